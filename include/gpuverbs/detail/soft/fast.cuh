// The executor's fast path: the common small RDMA WRITE or READ (one WQEBB, 1 to 32 bytes
// through one data segment, or an inline WRITE of at most 12 bytes) executed by the group's
// leader in a short straight line, for drain() in exec.cuh. Part of the software device's
// executor (gpuverbs/detail/soft/exec.cuh).
#pragma once

#include "gpuverbs/detail/probe.cuh"
#include "gpuverbs/detail/soft/complete.cuh"
#include "gpuverbs/mlx5/wqe.cuh"

namespace gv::detail::soft {

// Most WQEs of a busy QP look alike: an RDMA WRITE or READ of a few bytes through one data
// segment (or a WRITE of an inline payload of at most 12 bytes), with the keys of the WQE
// before it. Taken through prepare(), each cost the H200 about 3 us in a long drain of
// 8-byte WRITEs (`gv_probe_path --batch 256`: reading and checking the WQE 0.74, the two
// regions 0.57, the copy 0.72 us), far more than its memory operations: one thread steps
// through the general decoder (the segment loop, the gather list, the plan's arrays) one
// dependent instruction after another. fast_run takes such WQEs in a short straight line and
// loads each next WQE while the one before it executes.
//
// It accepts a WQE only where prepare() would execute it successfully with the same effects
// (the same checks in the same order pass: size, ctrl, peer, body, local region, peer region
// and access); at anything else (another opcode or shape, a check that fails, a larger copy)
// it stops with that WQE at sq_ci, and prepare() decides it as always, errors included.

/// Bytes a fast-path WQE may move: its copy is the leader's few loads and then its stores.
inline constexpr uint64_t kFastBytes = 32;

/// The units of a WQE the fast path decodes: ctrl, raddr and the first data or inline
/// segment (a WQE of ds 3: one WQEBB).
struct FastWqe {
    struct Unit {
        uint64_t a, b;
    } u[3];
};

/// Where fast_run reads WQEs: the ring, and the group's stage when it holds a copy of some.
struct FastRing {
    const uint8_t* sq;
    uint32_t log_bb;
    uint32_t stage_n;
    const uint8_t* stage;
    unsigned long long stage_ci;
    /// The WQEBB at ci: in the stage when it holds it (a host ring: shared memory instead of
    /// a PCIe round trip), else in the ring.
    GV_HOST_DEVICE const uint8_t* bb(unsigned long long ci) const {
        const unsigned long long staged = ci - stage_ci;
        return staged < stage_n ? stage + staged * 64 : mlx5::wqe_seg(sq, log_bb, ci, 0);
    }
    /// The first three units of the (published) WQE at ci.
    GV_HOST_DEVICE FastWqe load(unsigned long long ci) const {
        const auto* from = reinterpret_cast<const FastWqe::Unit*>(bb(ci));
        FastWqe f;
        for (int i = 0; i < 3; ++i) f.u[i] = from[i];
        return f;
    }
};

/// A region as fast_run checks it: one MrCache entry with the checks that do not depend on
/// the WQE folded in (found, protection domain, shared when the table is another process's),
/// in fewer registers. access carries kFastFound when the entry may be used at all.
struct FastRegion {
    uint64_t addr = 0, length = 0;
    int64_t xlate = 0;
    uint32_t key = 0, access = 0, sys = 0;
};
inline constexpr uint32_t kFastFound = 1u << 31;

GV_HOST_DEVICE FastRegion fast_region(const MrCache& c, uint32_t pd, bool foreign) {
    FastRegion r;
    r.key = c.key;
    r.access = c.tab && c.found && c.pd == pd && (!foreign || c.shared) ? (c.access | kFastFound) : 0;
    r.addr = c.addr;
    r.length = c.length;
    r.xlate = c.xlate;
    r.sys = c.sys;
    return r;
}

/// mr_resolve_cached's answer for a region fast_region() made, or 0 where that region cannot
/// say (another key, or a check that fails: the caller then asks mr_resolve_cached).
GV_HOST_DEVICE uint64_t fast_resolve(const FastRegion& r, uint32_t key, uint64_t addr, uint64_t len, uint32_t need) {
    need |= kFastFound;
    if (key != r.key || (r.access & need) != need) return 0;
    if (addr < r.addr || len > r.length || addr - r.addr > r.length - len) return 0;
    const uint64_t p = uint64_t(int64_t(addr) + r.xlate);
    return p ? p : 1;
}

/// fast_run's way out of its registers when a WQE names another region (or one its copy
/// cannot vouch for): the leader's cache (lc.local, or lc.remote when remote) looks the key
/// up as prepare() would, and r becomes the entry found. Returns the pointer, or 0 when the
/// check fails (prepare() then judges the WQE). Not inlined: rare, and its registers would
/// count in fast_run's loop.
GV_HOST_DEVICE_NOINLINE uint64_t fast_lookup(LeaderCache& lc, bool remote, uint32_t key, uint64_t addr, uint64_t len,
                                             uint32_t need, FastRegion& r) {
    const QpConfig& c = lc.cfg;
    const bool foreign = remote && c.remote_mrs.owner != c.local_mrs.owner;
    const uint32_t pd = remote ? c.peer_pd : c.pd;
    MrCache& cache = remote ? lc.remote : lc.local;
    const uint64_t p = mr_resolve_cached(remote ? c.remote_mrs : c.local_mrs, cache, key, pd, addr, len, need,
                                         nullptr, foreign);
    if (p) r = fast_region(cache, pd, foreign);
    return p;
}

/// The regions of a WQE whose keys fast_run's copies do not hold (the first WQE of a drain,
/// whose leader cache starts empty, or a WQE naming other regions): both looked up in the
/// leader's caches at once, the peer's first, so that the two table loads overlap as in
/// prepare(), and the copies remade from them. with_local: the WQE has a local region (not
/// inline). Not inlined: once per drain in the common case.
GV_HOST_DEVICE_NOINLINE void fast_refill(LeaderCache& lc, bool with_local, uint32_t lkey, uint32_t rkey,
                                         FastRegion& local, FastRegion& remote) {
    const QpConfig& c = lc.cfg;
    const bool foreign = c.remote_mrs.owner != c.local_mrs.owner;
    mr_prefetch(c.remote_mrs, lc.remote, rkey);
    if (with_local) mr_prefetch(c.local_mrs, lc.local, lkey);
    remote = fast_region(lc.remote, c.peer_pd, foreign);
    if (with_local) local = fast_region(lc.local, c.pd, false);
}

/// Copies len (1 .. kFastBytes) bytes: with 8-byte alignment every load is issued before the
/// first store (d and s may overlap: the loads then see the bytes as they were, as prepare()'s
/// one-thread copy of a range this small does too), else copy_small's widest aligned steps.
GV_HOST_DEVICE void fast_copy(uint64_t dst, uint64_t src, uint64_t len) {
#if GV_DEVICE_CODE
    if (((dst | src | len) & 7) == 0) {
        const auto* s = reinterpret_cast<const uint64_t*>(src);
        auto* d = reinterpret_cast<uint64_t*>(dst);
        const uint32_t n = uint32_t(len / 8);
        uint64_t v[kFastBytes / 8];
#pragma unroll
        for (uint32_t i = 0; i < kFastBytes / 8; ++i)
            if (i < n) v[i] = s[i];
#pragma unroll
        for (uint32_t i = 0; i < kFastBytes / 8; ++i)
            if (i < n) d[i] = v[i];
        return;
    }
    const uint64_t x = dst ^ src;
    const uint32_t unit = (x & 7) == 0 ? 8 : (x & 3) == 0 ? 4 : (x & 1) == 0 ? 2 : 1;
    copy_small(reinterpret_cast<uint8_t*>(dst), reinterpret_cast<const uint8_t*>(src), len, unit);
#else
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), len);
#endif
}

/// Executes the WQEs at sq_ci while they are of the common kind (above), and returns at the
/// first that is not, or when none is left. The group's leader, holding the QP's lock, after
/// next_published() found work.
///
/// It is inlined into every kernel that drains, the users' own included (through progress()),
/// so its registers count against their block sizes: it keeps what it uses in locals (the
/// configuration fields, ci, the published count, and each region as a FastRegion, with the
/// checks that do not depend on the WQE done once), and leaves region lookups to fast_refill
/// and fast_lookup, which are called, not inlined. gv_write_bw's kernel uses 109 registers
/// per thread with it (128 before the fast path). A first version that held whole MrCache
/// copies took that kernel to 154, past what a 512-thread block may use
/// (cudaErrorLaunchOutOfResources); one that was called instead of inlined fit in 128 but
/// cost a third of the rate. Per WQE it issues the next published WQE's loads before it
/// executes this one.
GV_HOST_DEVICE void fast_run(QpContext* q, LeaderCache& lc) {
    if (lc.pending == 0 || !lc.peer_ok || !sends_allowed(lc.state)) return;
    const uint32_t qpn = lc.cfg.qpn, max_inline = lc.cfg.max_inline, qsys = lc.cfg.sys;
    const uint32_t peer_access = lc.cfg.peer_access;
    CqState* const scq = lc.cfg.scq;
    const uint32_t scope = lc.scope;
    FastRegion local = fast_region(lc.local, lc.cfg.pd, false);
    FastRegion remote = fast_region(lc.remote, lc.cfg.peer_pd, lc.cfg.remote_mrs.owner != lc.cfg.local_mrs.owner);
    unsigned long long ci = lc.ci;
    uint32_t pending = lc.pending;
    const FastRing ring{lc.cfg.sq, lc.cfg.sq_log_bb, lc.stage_n, static_cast<const uint8_t*>(lc.stage), lc.stage_ci};
    bool lost = false;
    FastWqe cur = ring.load(ci);
    for (;;) {
        const mlx5::CtrlFields c = mlx5::read_ctrl_seg(reinterpret_cast<const mlx5_wqe_ctrl_seg*>(&cur.u[0]));
        const bool is_read = c.opcode == MLX5_OPCODE_RDMA_READ;
        // check_header and check_ctrl: one WQEBB (published: pending >= 1), its own position
        // and QP. check_body for ds 3: a raddr segment and one data or inline segment.
        if ((c.opcode != MLX5_OPCODE_RDMA_WRITE && !is_read) || c.ds != 3 || c.wqe_index != uint16_t(ci) ||
            c.qpn != qpn)
            break;
        const mlx5::RaddrFields ra = mlx5::read_raddr_seg(reinterpret_cast<const mlx5_wqe_raddr_seg*>(&cur.u[1]));
        const mlx5::DataFields d = mlx5::read_data_seg(reinterpret_cast<const mlx5_wqe_data_seg*>(&cur.u[2]));
        // The next WQE's units, when it is published: their loads overlap this WQE's work.
        const bool more = pending > 1;
        FastWqe next = cur;
        if (more) next = ring.load(ci + 1);
        GV_EXEC_STAMP(kStampChecked);
        uint32_t sys = scope;  // as prepare()'s p.sys
        uint64_t len, lp;
        const bool inl = (d.byte_count & MLX5_INLINE_SEG) != 0;
        if (ra.rkey != remote.key || (!inl && d.lkey != local.key)) fast_refill(lc, !inl, d.lkey, ra.rkey, local, remote);
        if (inl) {
            // check_body: not in a READ, within max_inline and within the WQE (4 + len <= 16).
            len = d.byte_count & ~uint32_t(MLX5_INLINE_SEG);
            if (is_read || len == 0 || len > 12 || len > max_inline) break;
            // The payload, 4 bytes into unit 2 (of the stage's copy when staged).
            lp = reinterpret_cast<uint64_t>(ring.bb(ci) + 2 * 16 + 4);
            sys |= qsys;
        } else {
            len = d.byte_count;  // 0 would mean 2 GiB: not for this path
            if (len == 0 || len > kFastBytes) break;
            const uint32_t lneed = is_read ? kLocalWrite : 0u;
            lp = fast_resolve(local, d.lkey, d.addr, len, lneed);
            if (!lp && !(lp = fast_lookup(lc, false, d.lkey, d.addr, len, lneed, local))) break;
            if (is_read) sys |= local.sys;
        }
        // resolve_remote: the peer QP's access rights, then its region.
        const uint32_t need = is_read ? kRemoteRead : kRemoteWrite;
        if (!(peer_access & need)) break;
        uint64_t rp = fast_resolve(remote, ra.rkey, ra.raddr, len, need);
        if (!rp && !(rp = fast_lookup(lc, true, ra.rkey, ra.raddr, len, need, remote))) break;
        if (!is_read) sys |= remote.sys;
        GV_EXEC_STAMP(kStampRemote);
        fast_copy(is_read ? lp : rp, is_read ? rp : lp, len);
        GV_EXEC_STAMP(kStampCopied);
        // RC ordering, as in drain(): this WQE's bytes before its completion and before any byte
        // of the next WQE, at the scope of whoever observes them.
        atom::fence_release(sys != 0);
        GV_EXEC_STAMP(kStampFenced);
        // finish() for a WQE that succeeded and consumed no receive (complete_requester): the
        // requester's CQE when signaled, then sq_ci.
        bool ok = true;
        if (c.fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) {
            mlx5::CqeFields f{};
            f.qpn = qpn;
            f.wqe_counter = uint16_t(ci);
            f.wqe_opcode = c.opcode;
            f.cqe_opcode = MLX5_CQE_REQ;
            f.byte_cnt = uint32_t(len);
            ok = cq_push(scq, f);
        }
        GV_EXEC_STAMP(kStampCqe);
        ++ci;
        --pending;
        atom::store_relaxed(&q->sq_ci, ci, scope != kScopeGpu);
        GV_EXEC_STAMP(kStampFinished);
        if (!ok) {  // the CQ was full: the completion is lost, the QP goes to ERROR (finish())
            lost = true;
            break;
        }
        if (!more) break;
        cur = next;
    }
    lc.ci = ci;
    lc.pending = pending;
    if (lost) {
        enter_error(q, uint32_t(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR));
        lc.state = QpState::Error;
    }
}

}  // namespace gv::detail::soft
