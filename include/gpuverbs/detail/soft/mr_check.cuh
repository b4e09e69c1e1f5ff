// Memory-region checks: key lookup, bounds and access, the foreign-process rule, the
// leader's caches.
// Part of the software device's executor (gpuverbs/detail/soft/exec.cuh).
#pragma once

#include "gpuverbs/detail/soft/copy.cuh"

namespace gv::detail::soft {

// ---- memory-region checks -----------------------------------------------------------

/// True when q's peer belongs to q's own process. An executor runs only its own process's
/// QPs: another process's WQEs point at that process's private memory too. Reads q's own
/// state only (remote_mrs is q's copy of the peer's table descriptor): after a peer process
/// died nothing of it needs to be read.
GV_HOST_DEVICE bool peer_in_process(const QpContext* q) { return q->remote_mrs.owner == q->local_mrs.owner; }

/// The last region the leader resolved in a table, as the checks use it: consecutive WQEs
/// mostly name the same keys, and each lookup is a memory load that later steps wait for.
/// The checks that do not depend on the WQE (the entry held the key and was valid, its
/// protection domain is the one the lookup named, a foreign table's region is shared) are
/// done once, when the entry is loaded, and kept as one bit of `access` (kMrUsable).
///
/// A cache serves one table with one protection domain and one foreign rule: the leader's
/// local cache the QP's own table (its PD, never foreign), the remote cache the peer's table
/// (the peer's PD, foreign when another process registered it). A lookup in another table
/// (tab differs) reloads, so the cache never answers for a table it was not loaded from.
/// Small on purpose: the leader cache is inlined into every kernel that drains, and each
/// word of it is a register there (see fast.cuh).
struct MrCache {
    const MrEntry* tab = nullptr;
    uint32_t key = 0;
    uint32_t access = 0;  ///< the entry's gv::Access bits, and kMrUsable when it may be used at all
    uint32_t sys = 0;     ///< MrEntry::sys
    uint64_t addr = 0, length = 0;
    int64_t xlate = 0;
};
inline constexpr uint32_t kMrUsable = 1u << 31;

/// An MR entry's fields as loaded, not yet checked: mr_load_if issues the loads, mr_take checks
/// them into a cache (mr_fill's checks). Apart, so that a caller with other loads to issue (the
/// direct path's round B, direct.cuh) issues all of them before it waits for any.
struct MrRaw {
    uint64_t addr = 0, length = 0;
    int64_t xlate = 0;
    uint32_t key = 0, pd = 0, access = 0, sys = 0, valid = 0, shared = 0;
    bool found = false;  ///< the key's index lies in the table
};

static_assert(offsetof(MrEntry, addr) == 0 && offsetof(MrEntry, length) == 8 && offsetof(MrEntry, xlate) == 16 &&
                  offsetof(MrEntry, key) == 24 && offsetof(MrEntry, pd) == 28 && offsetof(MrEntry, access) == 32 &&
                  offsetof(MrEntry, sys) == 36 && offsetof(MrEntry, valid) == 40 && offsetof(MrEntry, shared) == 44,
              "mr_load_if reads an MrEntry as six 8-byte words");

/// mr_fill's loads without a branch: when `want` and key's index lies in t, the entry's fields
/// (found); else nothing is loaded. Three predicated 16-byte loads in one asm statement, so that
/// a caller's round of loads stays one basic block (the direct path's round B: with mr_fill's
/// branches there, each region's checks were placed before the next loads, SASS of session 32).
GV_HOST_DEVICE MrRaw mr_load_if(const MrTable& t, uint32_t key, bool want) {
    const uint32_t idx = key >> 8;
    const bool in = want && t.entries != nullptr && idx < t.capacity;
    const MrEntry* e = in ? t.entries + idx : t.entries;  // not read unless in
    uint64_t w[6] = {0, 0, 0, 0, 0, 0};
#if GV_DEVICE_CODE
    asm volatile(
        "{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %6, 0;\n\t"
        "@p ld.v2.u64 {%0, %1}, [%7];\n\t@p ld.v2.u64 {%2, %3}, [%7+16];\n\t@p ld.v2.u64 {%4, %5}, [%7+32];\n\t}"
        : "+l"(w[0]), "+l"(w[1]), "+l"(w[2]), "+l"(w[3]), "+l"(w[4]), "+l"(w[5])
        : "r"(uint32_t(in)), "l"(e)
        : "memory");
#else
    if (in) std::memcpy(w, e, sizeof(w));
#endif
    MrRaw r;
    r.found = in;
    r.addr = w[0];
    r.length = w[1];
    r.xlate = int64_t(w[2]);
    r.key = uint32_t(w[3]);
    r.pd = uint32_t(w[3] >> 32);
    r.access = uint32_t(w[4]);
    r.sys = uint32_t(w[4] >> 32);
    r.valid = uint32_t(w[5]);
    r.shared = uint32_t(w[5] >> 32);
    return r;
}

/// a when c, else b, field by field (a conditional on the two objects made the compiler keep both
/// in local memory, and store the first before the lock's RMW: SASS of the direct path).
GV_HOST_DEVICE MrRaw mr_select(bool c, const MrRaw& a, const MrRaw& b) {
    MrRaw r;
    r.addr = c ? a.addr : b.addr;
    r.length = c ? a.length : b.length;
    r.xlate = c ? a.xlate : b.xlate;
    r.key = c ? a.key : b.key;
    r.pd = c ? a.pd : b.pd;
    r.access = c ? a.access : b.access;
    r.sys = c ? a.sys : b.sys;
    r.valid = c ? a.valid : b.valid;
    r.shared = c ? a.shared : b.shared;
    r.found = c ? a.found : b.found;
    return r;
}

/// Fills c from r, key's entry of t as mr_load_if loaded it, with the lookup's protection domain pd
/// and foreign rule (mr_fill's checks).
GV_HOST_DEVICE void mr_take(const MrRaw& r, const MrTable& t, MrCache& c, uint32_t key, uint32_t pd, bool foreign) {
    c.tab = t.entries;
    c.key = key;
    c.access = 0;
    if (!r.found) return;
    c.sys = r.sys;
    c.addr = r.addr;
    c.length = r.length;
    c.xlate = r.xlate;
    const bool usable = r.valid && r.key == key && r.pd == pd && (!foreign || r.shared);
    c.access = usable ? ((r.access & ~kMrUsable) | kMrUsable) : 0;
}

/// Loads key's entry of table t into c, with the lookup's protection domain pd and foreign
/// rule: every field at once, checked afterwards, so a lookup costs one load's latency
/// (loading `valid` first and the rest after its branch cost two). A WQE's two lookups
/// (local and peer) are issued back to back and overlap too. Relaxed: registration completed
/// (host side) before the key was handed to posters.
GV_HOST_DEVICE void mr_fill(const MrTable& t, MrCache& c, uint32_t key, uint32_t pd, bool foreign) {
    c.tab = t.entries;
    c.key = key;
    c.access = 0;
    const uint32_t idx = key >> 8;
    if (t.entries == nullptr || idx >= t.capacity) return;
    const MrEntry* e = &t.entries[idx];
    const uint32_t valid = atom::load_relaxed(&e->valid);
    const uint32_t k = e->key, epd = e->pd, access = e->access, shared = e->shared;
    c.sys = e->sys;
    c.addr = e->addr;
    c.length = e->length;
    c.xlate = e->xlate;
    const bool usable = valid && k == key && epd == pd && (!foreign || shared);
    c.access = usable ? ((access & ~kMrUsable) | kMrUsable) : 0;
}

/// mr_fill unless c already holds key's entry of t.
GV_HOST_DEVICE void mr_prefetch(const MrTable& t, MrCache& c, uint32_t key, uint32_t pd, bool foreign) {
    if (c.tab != t.entries || c.key != key || !c.tab) mr_fill(t, c, key, pd, foreign);
}

/// The executor pointer of [addr, addr + len) in the region c holds, or 0 when it may not be
/// used with `need` (not usable, missing access, out of bounds). *sys |= the region's scope.
GV_HOST_DEVICE uint64_t mr_check(const MrCache& c, uint64_t addr, uint64_t len, uint32_t need, uint32_t* sys) {
    need |= kMrUsable;
    if ((c.access & need) != need) return 0;
    if (addr < c.addr || len > c.length || addr - c.addr > c.length - len) return 0;
    if (sys) *sys |= c.sys;
    const uint64_t p = uint64_t(int64_t(addr) + c.xlate);
    return p ? p : 1;
}

/// Resolves [addr, addr + len) under key in table t (through the cache c) for `need`: the
/// executor pointer, or 0 when the key names no usable region of t for this access.
GV_HOST_DEVICE uint64_t mr_resolve_cached(const MrTable& t, MrCache& c, uint32_t key, uint32_t pd,
                                          uint64_t addr, uint64_t len, uint32_t need, uint32_t* sys,
                                          bool foreign = false) {
    mr_prefetch(t, c, key, pd, foreign);
    return mr_check(c, addr, len, need, sys);
}

/// The executing QP's configuration (what the host wrote before it moved the QP to a state
/// that sends), read once per drain instead of once per WQE: each field read per WQE was a
/// load from device memory that the WQE's later steps waited for, after a data-dependent
/// branch, so a chain of them cost about a load's latency each (one such load, max_inline,
/// added about 0.5 us per 8-byte WRITE on the H200). The host changes none of these while
/// the QP executes: they are set on create and on INIT/RTR, before any WQE can run.
struct QpConfig {
    uint32_t qpn = 0;
    uint32_t pd = 0;
    uint32_t sq_log_bb = 0;
    uint32_t max_inline = 0;
    uint32_t sys = 0;
    uint8_t* sq = nullptr;
    CqState* scq = nullptr;
    MrTable local_mrs{};
    MrTable remote_mrs{};
    /// The peer's part (valid while LeaderCache::peer_up): the access it allows as
    /// responder and its protection domain.
    uint32_t peer_access = 0;
    uint32_t peer_pd = 0;
};

/// True when the peer's table belongs to another process: only its shared regions may be used.
GV_HOST_DEVICE bool remote_foreign(const QpConfig& c) { return c.remote_mrs.owner != c.local_mrs.owner; }

/// What the group's leader remembers across the WQEs of one drain, so that the doorbell
/// record, QP states, the QP's configuration and regions are not re-read (with acquire loads,
/// or loads that a later step waits for) for every WQE.
struct LeaderCache {
    uint32_t pending = 0;  ///< WQEBBs known to be published past sq_ci
    uint32_t batches = 0;  ///< 1 once load_batch read the record for this drain
    unsigned long long ci = 0;  ///< sq_ci as the leader advances it
    QpState state = QpState::Reset;
    /// The remote end is a QP of ours connected back to this one, ready to receive (read once
    /// per drain; an error that moves the peer to ERROR during the drain clears it).
    bool peer_up = false;
    /// state_scope() of the QP: kScopePeer while its peer is on another GPU (read once per drain).
    uint32_t scope = kScopeGpu;
    QpContext* r = nullptr;
    QpConfig cfg;
    MrCache local, remote;
    /// WQEBBs [stage_ci, stage_ci + stage_n) copied out of a host-memory ring by the group
    /// (stage_wqes in exec.cuh): 16-byte units, four per WQEBB. staged_pi: the doorbell
    /// record's producer index that the copy went by (read with acquire, under the lock).
    const void* stage = nullptr;
    unsigned long long stage_ci = 0;
    uint32_t stage_n = 0;
    uint32_t staged_pi = 0;
    /// 1 when staged_pi was cut to the WQEs the stage holds whole, short of the record: the
    /// drain then ends with kMore (exec.cuh), so that progress() drains the rest.
    uint32_t cut = 0;
};

}  // namespace gv::detail::soft
