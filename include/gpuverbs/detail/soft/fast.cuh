// The executor's fast path: the common small RDMA WRITE or READ (one WQEBB, 1 to 128 bytes
// through one data segment, or an inline WRITE of at most 12 bytes) executed by the group's
// leader in a short straight line, for drain() in exec.cuh. Part of the software device's
// executor (gpuverbs/detail/soft/exec.cuh).
#pragma once

#include "gpuverbs/detail/probe.cuh"
#include "gpuverbs/detail/soft/complete.cuh"
#include "gpuverbs/detail/soft/plan.cuh"
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

/// WQEs moving at most this many bytes are executed by the group's leader alone, with no
/// group barrier (drain() in exec.cuh): a barrier costs more than the leader's few loads and
/// stores.
inline constexpr uint64_t kLeaderBytes = 128;

/// Bytes a fast-path WQE may move: at most what the leader executes alone anyway
/// (kLeaderBytes). Up to 32 bytes were the fast path's until 2026-12-04; a 64-byte WRITE then took
/// prepare() (loopback latency 6.4 us against 2.2 us at 8 bytes, and 40 M msg/s against 121 M over
/// 264 QPs, H200).
inline constexpr uint64_t kFastBytes = 128;
/// The bytes fast_copy moves per round: all of the round's loads (four 8-byte words), then its
/// stores. A copy of all 128 bytes in one round took the latency kernels from 177 to 224
/// registers a thread and the 512-thread block-commit kernel from 24 to 150 bytes of spills
/// (ptxas, sm_90): every kernel that commits inlines this.
inline constexpr uint64_t kFastChunk = 32;

/// Bytes a SEND on the fast path (fast_send_run) may move: one round of the copy. Up to
/// kFastBytes, the SENDs of 33-128 bytes lost where the sending block had 256 threads (H200,
/// session 19, 64 QPs: 64 B 9.9 -> 6.6 M msg/s, 128 B 9.0 -> 4.5 M), though they gained in
/// blocks of 32 and 64 threads (64 B: 9.5 -> 12.7 M, one QP 0.16 -> 0.20 M). Why is not known;
/// until it is, those SENDs take prepare(), as before.
inline constexpr uint64_t kFastSendBytes = kFastChunk;

/// SENDs fast_send_run checks before it claims their receives with one CAS and takes their
/// receive completions' CQ slots with one RMW (a power of two of at most 32: a run's per-SEND
/// scope bits fit one word; its gather and scatter addresses are kept in local memory).
inline constexpr uint32_t kFastSendRun = 16;
static_assert(kFastSendRun >= 1 && kFastSendRun <= 32, "kFastSendRun: 1 to 32");

/// The most bytes a WQE of this opcode may move on the fast path: 0 for an opcode it does not
/// take (drain() then offers it the next WQE only after a WQE it would take).
GV_HOST_DEVICE uint64_t fast_bytes_of(uint32_t opcode) {
    return opcode == MLX5_OPCODE_RDMA_WRITE || opcode == MLX5_OPCODE_RDMA_READ ? kFastBytes
           : opcode == MLX5_OPCODE_SEND                                         ? kFastSendBytes
                                                                                : 0;
}

/// Whether [a, a + len) and [b, b + len) share a byte. A copy of more than kFastChunk bytes between
/// such ranges is left to prepare(), whose one-thread copy takes 64 bytes per round: in chunks of
/// 32 the bytes that land could differ.
GV_HOST_DEVICE bool fast_overlap(uint64_t a, uint64_t b, uint64_t len) { return a < b + len && b < a + len; }

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

/// Where the leader's drain reads WQEs.
GV_HOST_DEVICE FastRing fast_ring(const LeaderCache& lc) {
    return FastRing{lc.cfg.sq, lc.cfg.sq_log_bb, lc.stage_n, static_cast<const uint8_t*>(lc.stage), lc.stage_ci};
}

/// One round of fast_copy: n (1 .. kFastChunk / 8) 8-byte words, every load issued before the
/// first store (d and s may overlap: the loads then see the bytes as they were, as prepare()'s
/// one-thread copy of a range this small does too).
GV_HOST_DEVICE void fast_copy_round(uint64_t dst, uint64_t src, uint32_t n) {
#if GV_DEVICE_CODE
    const auto* s = reinterpret_cast<const uint64_t*>(src);
    auto* d = reinterpret_cast<uint64_t*>(dst);
    uint64_t v[kFastChunk / 8];
#pragma unroll
    for (uint32_t i = 0; i < kFastChunk / 8; ++i)
        if (i < n) v[i] = s[i];
#pragma unroll
    for (uint32_t i = 0; i < kFastChunk / 8; ++i)
        if (i < n) d[i] = v[i];
#else
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), size_t(n) * 8);
#endif
}

/// Copies len (1 .. kFastBytes) bytes: with 8-byte alignment in rounds of kFastChunk bytes
/// (fast_copy_round; the first in a straight line, so that a copy of at most kFastChunk bytes
/// costs what it did before the rounds: a loop for every copy cost one QP's 8-byte WRITEs 9%,
/// H200, 2026-12-04), else copy_small's widest aligned steps.
GV_HOST_DEVICE void fast_copy(uint64_t dst, uint64_t src, uint64_t len) {
#if GV_DEVICE_CODE
    if (((dst | src | len) & 7) == 0) {
        fast_copy_round(dst, src, uint32_t((len < kFastChunk ? len : kFastChunk) / 8));
        if (len > kFastChunk) {
#pragma unroll 1
            for (uint64_t off = kFastChunk; off < len; off += kFastChunk)
                fast_copy_round(dst + off, src + off, uint32_t((len - off < kFastChunk ? len - off : kFastChunk) / 8));
        }
        return;
    }
    const uint64_t x = dst ^ src;
    const uint32_t unit = (x & 7) == 0 ? 8 : (x & 3) == 0 ? 4 : (x & 1) == 0 ? 2 : 1;
    copy_small(reinterpret_cast<uint8_t*>(dst), reinterpret_cast<const uint8_t*>(src), len, unit);
#else
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), len);
#endif
}

/// A WRITE's source words loaded before its WQE executes (the direct path, direct.cuh: in the
/// round of loads after the lock's acquire rather than after that round), for fast_run to store
/// instead of loading them. n: 8-byte words (0: none), from executor pointer lp.
struct Preloaded {
    uint64_t lp = 0;
    uint32_t n = 0;
    uint64_t v[kFastChunk / 8] = {};
};

/// The first WQE's checks as the direct path made them (direct.cuh: from the WQE's fields in its
/// registers and the regions' entries of its round B, without a branch), for fast_run to take
/// instead of decoding the WQE and checking it again: the same checks as fast_run's own for a
/// WRITE or READ with one data segment (opcode, size, QP, length, the peer's state and access,
/// both regions' keys, access and bounds, overlap), the WQE index being the poster's own.
/// ok false: none made, fast_run checks the WQE itself.
struct FastFirst {
    bool ok = false;
    bool is_read = false;
    uint32_t sys = 0;  ///< the scopes the copy touches (fast_run's sys)
    uint64_t len = 0, lp = 0, rp = 0;
};

/// Stores a Preloaded's n words at dst (8-byte aligned), as fast_copy_round's second half.
GV_HOST_DEVICE void store_preloaded(uint64_t dst, const Preloaded& pre) {
#if GV_DEVICE_CODE
    auto* d = reinterpret_cast<uint64_t*>(dst);
#pragma unroll
    for (uint32_t i = 0; i < kFastChunk / 8; ++i)
        if (i < pre.n) d[i] = pre.v[i];
#else
    std::memcpy(reinterpret_cast<void*>(dst), pre.v, size_t(pre.n) * 8);
#endif
}

/// Loads n (0 .. 4) 8-byte words from src into v[0..n) without a branch (predicated loads in one
/// asm statement, so that the direct path's round B stays one basic block, see mr_load_if); n 0
/// loads nothing.
GV_HOST_DEVICE void load_words_if(uint64_t* v, uint64_t src, uint32_t n) {
    static_assert(kFastChunk / 8 == 4, "load_words_if loads up to four words");
#if GV_DEVICE_CODE
    asm volatile(
        "{\n\t.reg .pred p0, p1, p2, p3;\n\t"
        "setp.gt.u32 p0, %4, 0;\n\tsetp.gt.u32 p1, %4, 1;\n\tsetp.gt.u32 p2, %4, 2;\n\tsetp.gt.u32 p3, %4, 3;\n\t"
        "@p0 ld.u64 %0, [%5];\n\t@p1 ld.u64 %1, [%5+8];\n\t@p2 ld.u64 %2, [%5+16];\n\t@p3 ld.u64 %3, [%5+24];\n\t}"
        : "+l"(v[0]), "+l"(v[1]), "+l"(v[2]), "+l"(v[3])
        : "r"(n), "l"(src)
        : "memory");
#else
    if (n) std::memcpy(v, reinterpret_cast<const void*>(src), size_t(n) * 8);
#endif
}

/// mr_check's bounds and translation alone, for a WQE whose region entry, access and length
/// were checked on the WQE before it (same key, same need): the executor pointer of
/// [addr, addr + len), or 0 when it leaves the region.
GV_HOST_DEVICE uint64_t fast_bounds(const MrCache& c, uint64_t addr, uint64_t len) {
    if (addr < c.addr || len > c.length || addr - c.addr > c.length - len) return 0;
    const uint64_t p = uint64_t(int64_t(addr) + c.xlate);
    return p ? p : 1;
}

/// The ctrl segment's signal bit (fm_ce_se's CQ_UPDATE) in the second 8-byte word of unit 0, as
/// loaded (fm_ce_se is byte 11 of the WQE).
inline constexpr uint64_t kFastSignalBit = uint64_t(MLX5_WQE_CTRL_CQ_UPDATE) << 24;
/// The WQE index's two bytes (1 and 2) in the first 8-byte word of unit 0, as loaded.
inline constexpr uint64_t kFastIndexBytes = 0x00ffff00ull;

/// Whether the WQE w at ci has the shape of a WQE checked before it: unit 0 without its index and
/// signal bit (u0a, u0b), the rkey and the data segment's byte count and lkey (u2a) equal, its
/// index ci's. fast_run's lean check, its hand-off test and warp_run's lanes all use it.
GV_HOST_DEVICE bool fast_same_shape(const FastWqe& w, unsigned long long ci, uint64_t u0a, uint64_t u0b, uint32_t rkey,
                                    uint64_t u2a) {
    const uint64_t idx = ((ci >> 8) & 0xffu) << 8 | (ci & 0xffu) << 16;
    return w.u[0].a == (u0a | idx) && ((w.u[0].b ^ u0b) & ~kFastSignalBit) == 0 && uint32_t(w.u[1].b) == rkey &&
           w.u[2].a == u2a;
}

/// A run of WQEs of one shape that fast_run leaves to the leader's warp (warp_run.cuh): the shape
/// of the last WQE it checked, as it keeps it (ok: a run was handed over).
struct WarpShape {
    bool ok = false;
    bool is_read = false;
    uint32_t rkey = 0, len = 0, sys = 0;
    uint64_t u0a = 0, u0b = 0, u2a = 0;
};

/// Same-shape WQEs published behind the one fast_run has just executed for it to hand them to the
/// leader's warp (warp_run.cuh): fewer are not worth the group's barrier.
inline constexpr uint32_t kWarpRunMin = 4;

/// Executes the WQEs at sq_ci while they are of the common kind (above), and returns at the
/// first that is not, or when none is left. The group's leader, holding the QP's lock, after
/// next_published() found work. Returns true when it stopped at a SEND (for fast_send_run:
/// whoever stops at anything else saves that loop its load of the WQE).
///
/// It is inlined into every kernel that drains, the users' own included (through progress()),
/// so its registers count against their block sizes. It works on the leader cache itself (the
/// configuration, and both regions as MrCache entries whose WQE-independent checks were done
/// when they were loaded), which the compiler keeps in registers as long as no call takes its
/// address: an earlier version that looked regions up in a called function kept the whole
/// leader cache in local memory for all of drain() (stack 976 -> 1232 bytes in gv_write_bw's
/// kernel, 4 KiB WRITEs 8% slower, a lone WRITE's two region loads one after the other).
/// Per WQE it issues the next published WQE's loads before it copies this one. first: the
/// units of the WQE at lc.ci when load_batch loaded them already, else null; pre: that WQE's
/// source words when the caller loaded them already (the direct path; by value, so that they stay
/// in registers: through a pointer they went to local memory, and storing them there waited for
/// the loads in the middle of the direct path's round B), else none. sq_ci is stored
/// before each WQE's fence rather than after its completion (finish()'s order): the direct path
/// gives the QP back right after with no fence of its own, and in drains this order measured 7%
/// more 8-byte WRITEs on one and 66 QPs (H100, session 32, build F). hand: where the draining
/// group starts with a whole warp, fast_run stops before a run of at least kWarpRunMin WQEs of the
/// shape it just checked and leaves that shape there (hand->ok) for drain() to give the run to the
/// leader's warp (warp_run.cuh); else null.
GV_HOST_DEVICE bool fast_run(QpContext* q, LeaderCache& lc, const FastWqe* first = nullptr,
                             Preloaded pre = {}, FastFirst plan = {}, WarpShape* hand = nullptr) {
    // Whether the peer may be written (lc.peer_up) is known one load round after the state:
    // it is tested after this WQE's region loads are issued, so that the two rounds overlap.
    if (lc.pending == 0 || !sends_allowed(lc.state)) return false;
    const QpConfig& cfg = lc.cfg;
    const bool foreign = remote_foreign(cfg);
    unsigned long long ci = lc.ci;
    uint32_t pending = lc.pending;
    const FastRing ring = fast_ring(lc);
    bool lost = false;
    bool at_send = false;
    FastWqe cur = first ? *first : ring.load(ci);
    // The shape of the last WQE that passed the checks below (shaped), as loaded: unit 0 without
    // the WQE index and the signal bit (opcode, QP, ds, fence bits, immediate), the rkey, the
    // data segment's byte count and lkey; with what the checks found (length, direction, scope).
    // A WQE of the same shape differs only in its two addresses, its index and its signal: its
    // opcode, QP, size, keys, length, access and regions were checked on the one before, so
    // only its index and the bounds of its two ranges are left to check (the lean way, a
    // fraction of the instructions: one thread executes one QP's WQEs, and its instruction
    // path is most of a small WRITE's cost, docs/performance.md, session 17).
    bool shaped = false;
    bool sh_read = false;
    uint32_t sh_rkey = 0, sh_len = 0, sh_sys = 0;
    uint64_t sh_u0a = 0, sh_u0b = 0, sh_u2a = 0;
    for (;;) {
        uint64_t len, lp, rp;
        uint32_t sys;
        bool is_read;
        bool lean = false;
        if (plan.ok) {  // the first WQE, checked by the direct path
            lean = true;
            len = plan.len;
            lp = plan.lp;
            rp = plan.rp;
            sys = plan.sys;
            is_read = plan.is_read;
            plan.ok = false;
        } else if (shaped) {
            if (fast_same_shape(cur, ci, sh_u0a, sh_u0b, sh_rkey, sh_u2a)) {
                len = sh_len;
                is_read = sh_read;
                const uint64_t la = fast_bounds(lc.local, mlx5::from_be64(cur.u[2].b), len);
                const uint64_t ra = fast_bounds(lc.remote, mlx5::from_be64(cur.u[1].a), len);
                if (la && ra && (len <= kFastChunk || !fast_overlap(la, ra, len))) {
                    lean = true;
                    lp = la;
                    rp = ra;
                    sys = sh_sys;
                }
            }
        }
        if (!lean) {
            const mlx5::CtrlFields c = mlx5::read_ctrl_seg(reinterpret_cast<const mlx5_wqe_ctrl_seg*>(&cur.u[0]));
            is_read = c.opcode == MLX5_OPCODE_RDMA_READ;
            // check_header and check_ctrl: one WQEBB (published: pending >= 1), its own position
            // and QP. check_body for ds 3: a raddr segment and one data or inline segment.
            if ((c.opcode != MLX5_OPCODE_RDMA_WRITE && !is_read) || c.ds != 3 || c.wqe_index != uint16_t(ci) ||
                c.qpn != cfg.qpn) {
                at_send = c.opcode == MLX5_OPCODE_SEND;
                break;
            }
            const mlx5::RaddrFields ra = mlx5::read_raddr_seg(reinterpret_cast<const mlx5_wqe_raddr_seg*>(&cur.u[1]));
            const mlx5::DataFields d = mlx5::read_data_seg(reinterpret_cast<const mlx5_wqe_data_seg*>(&cur.u[2]));
            GV_EXEC_STAMP(kStampChecked);
            const bool inl = (d.byte_count & MLX5_INLINE_SEG) != 0;
            // The regions, when the caches hold other keys (a drain's first WQE): the peer's first,
            // so that the two entries' loads are in flight together, as in prepare().
            mr_prefetch(cfg.remote_mrs, lc.remote, ra.rkey, cfg.peer_pd, foreign);
            if (!inl) mr_prefetch(cfg.local_mrs, lc.local, d.lkey, cfg.pd, false);
            if (!lc.peer_up) break;  // prepare() fails it: TRANSPORT_RETRY_EXC_ERR
            GV_EXEC_STAMP(kStampLocal);
            sys = lc.scope;  // as prepare()'s p.sys
            if (inl) {
                // check_body: not in a READ, within max_inline and within the WQE (4 + len <= 16).
                len = d.byte_count & ~uint32_t(MLX5_INLINE_SEG);
                if (is_read || len == 0 || len > 12 || len > cfg.max_inline) break;
                // The payload, 4 bytes into unit 2 (of the stage's copy when staged).
                lp = reinterpret_cast<uint64_t>(ring.bb(ci) + 2 * 16 + 4);
                sys |= cfg.sys;
            } else {
                len = d.byte_count;  // 0 would mean 2 GiB: not for this path
                if (len == 0 || len > kFastBytes) break;
                lp = mr_check(lc.local, d.addr, len, is_read ? kLocalWrite : 0u, is_read ? &sys : nullptr);
                if (!lp) break;
            }
            // resolve_remote: the peer QP's access rights, then its region.
            const uint32_t need = is_read ? kRemoteRead : kRemoteWrite;
            if (!(cfg.peer_access & need)) break;
            rp = mr_check(lc.remote, ra.raddr, len, need, is_read ? nullptr : &sys);
            if (!rp || (len > kFastChunk && fast_overlap(lp, rp, len))) break;
            // An inline WQE's payload sits where a data segment's lkey would: no shape.
            shaped = !inl;
            sh_u0a = cur.u[0].a & ~kFastIndexBytes;
            sh_u0b = cur.u[0].b & ~kFastSignalBit;
            sh_rkey = uint32_t(cur.u[1].b);
            sh_u2a = cur.u[2].a;
            sh_len = uint32_t(len);
            sh_sys = sys;
            sh_read = is_read;
        }
        // The next WQE's units, when it is published: their loads overlap this WQE's copy and
        // fence. Issued here rather than before the region checks: a drain's first WQE has its
        // two region entries in flight there, and both sets of loads at once would need more
        // registers than a 512-thread block may use.
        const bool more = pending > 1;
        FastWqe next = cur;
        if (more) next = ring.load(ci + 1);
        GV_EXEC_STAMP(kStampRemote);
        // The first WQE's source, when the caller loaded it already (the same words: the same
        // executor pointer and length, after the same checks).
        if (pre.n && !is_read && lp == pre.lp && len == uint64_t(pre.n) * 8 && (rp & 7) == 0)
            store_preloaded(rp, pre);
        else
            fast_copy(is_read ? lp : rp, is_read ? rp : lp, len);
        pre.n = 0;
        GV_EXEC_STAMP(kStampCopied);
        // sq_ci past this WQE before the fence, which then orders it with the bytes, before
        // whatever the caller stores next. Only the lock holder reads sq_ci to act on it, after
        // the lock's acquire; the one reader without the lock (needs_progress, in ERROR) treats
        // any difference from the published count as work to drive, which the holder then finds
        // done.
        ++ci;
        --pending;
        atom::store_relaxed(&q->sq_ci, ci, lc.scope != kScopeGpu);
        // RC ordering, as in drain(): this WQE's bytes before its completion and before any byte
        // of the next WQE, at the scope of whoever observes them.
        atom::fence_release(sys != 0);
        GV_EXEC_STAMP(kStampFenced);
        // finish() for a WQE that succeeded and consumed no receive (complete_requester): the
        // requester's CQE when signaled.
        bool ok = true;
        if (cur.u[0].b & kFastSignalBit) {
            mlx5::CqeFields f{};
            f.qpn = cfg.qpn;
            f.wqe_counter = uint16_t(ci - 1);
            f.wqe_opcode = is_read ? MLX5_OPCODE_RDMA_READ : MLX5_OPCODE_RDMA_WRITE;
            f.cqe_opcode = MLX5_CQE_REQ;
            f.byte_cnt = uint32_t(len);
            ok = cq_push(cfg.scq, f);
        }
        GV_EXEC_STAMP(kStampCqe);
        GV_EXEC_STAMP(kStampFinished);
        if (!ok) {  // the CQ was full: the completion is lost, the QP goes to ERROR (finish())
            lost = true;
            break;
        }
        if (!more) break;
        // hand: where the group has a whole warp, a run of WQEs shaped as this one is the warp's
        // (drain(), warp_run.cuh): the lanes read and check them at once, one lane stores them.
        // Only when the next WQE has this shape (its units are here): after a WQE of another
        // shape, fast_run checks the next one and hands off from there, rather than the warp
        // finding a run of none. Only WQEs of at most kFastChunk bytes, whose sources the lanes
        // load at once: a longer one's source lane 0 loads itself, as this loop does, with the
        // warp's shuffles and barrier on top (64-byte WRITEs and READs over 264 QPs x 512: 1.5%
        // more without them in runs, H100, session 40).
        if (hand && shaped && sh_len <= kFastChunk && pending >= kWarpRunMin &&
            fast_same_shape(next, ci, sh_u0a, sh_u0b, sh_rkey, sh_u2a)) {
            hand->ok = true;
            hand->is_read = sh_read;
            hand->rkey = sh_rkey;
            hand->len = sh_len;
            hand->sys = sh_sys;
            hand->u0a = sh_u0a;
            hand->u0b = sh_u0b;
            hand->u2a = sh_u2a;
            break;
        }
        cur = next;
    }
    lc.ci = ci;
    lc.pending = pending;
    if (lost) {
        enter_error(q, uint32_t(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR));
        lc.state = QpState::Error;
    }
    return at_send;
}

/// Executes the small SENDs at sq_ci (one data segment of at most kFastSendBytes bytes, into a
/// receive whose first entry takes the message whole) and returns at the first WQE that is not
/// one, or when none is left. The group's leader, holding the QP's lock, after fast_run(). A loop
/// of its own, not a case of fast_run's: inside fast_run's loop (with its next WQE's units and
/// the last WQE's shape live) the receive queue's view and complete() took the block-commit
/// bench kernel from 24 to about 690 bytes of spills (ptxas, sm_90).
///
/// prepare()'s checks in its order (ctrl, peer, body, local region; the peer's receive, its
/// first entry's region) and the claim of the receive after them, so that a WQE left to
/// prepare() finds everything as it was; then the copy, the fence and complete(), as for any
/// WQE that consumed a receive.
///
/// In runs of up to kFastSendRun SENDs. A run is checked whole first (every WQE a small SEND
/// that passes every check, each into its own receive: rc, rc + 1, ...; nothing changes
/// meanwhile), then its receives are claimed with one CAS of the peer's rq_ci and their receive
/// completions' CQ slots taken with one RMW (cq_take_run), and then each SEND is copied, fenced
/// and completed in turn, its receive CQE into its slot. What one SEND cost in the claim (a
/// CAS) and the CQ slot (an RMW and the consumer index's acquire) is paid once per run: in a
/// drain of 64 8-byte SENDs the receive's claim took 0.80 us and its CQE 1.11 us of the 3.17 us
/// a SEND took (gv_probe_path --op send --batch 64, H200, session 20, call 7).
///
/// Only this QP's executor (the lock holder) and the peer's own flushes in ERROR move the
/// peer's rq_ci, and the CAS checks it: a flush meanwhile ends the run before any byte moves,
/// and prepare() takes the SEND. The receive WQEs are read before their claim (a claimed slot of
/// the receive ring may be posted into again): what the copies need of them is kept for the run,
/// in local memory. A run whose CQ slots do not all fit: the SENDs up to the first one without
/// room execute, that one's completion is lost (the peer goes to ERROR), and the rest stay
/// published for prepare(), which then finds the peer in ERROR (their claimed receives get no
/// completion, as every later one of a full CQ). A signaled SEND is the last of its run, so that
/// a requester completion it loses (this QP then goes to ERROR) leaves no receive of the live
/// peer claimed behind it.
/// H200, session 20, call 8 (64 QPs x 256 threads): 8-byte SENDs 19.1 -> 35.0 M msg/s, 32-byte
/// 16.7 -> 26.9 M, one QP 0.31 -> 0.54 M; the 512-thread block-commit kernel's spills 60 -> 148
/// bytes (ptxas, sm_90), and its 4 KiB WRITEs over 264 QPs 4% slower, though they never come here.
static_assert(kFastSendBytes <= kFastChunk,
              "fast_send_run copies in one round (every load before the first store): a source and "
              "receive buffer that overlap then need no check, as in prepare()'s one-thread copy");
GV_HOST_DEVICE void fast_send_run(QpContext* q, LeaderCache& lc) {
    if (lc.pending == 0 || !sends_allowed(lc.state) || !lc.peer_up) return;
    const QpConfig& cfg = lc.cfg;
    const FastRing ring = fast_ring(lc);
    QpContext* const r = lc.r;
    unsigned long long rc = 0;  // the peer's rq_ci as this run moves it, once read
    uint32_t posted = 0;        // receives known posted from rc on
    bool have_rc = false;
    // What the copies of a run need of its receives and gathers, kept from the checks.
    uint64_t dst[kFastSendRun], src[kFastSendRun];
    while (lc.pending) {
        const RqView v = rq_view(r);
        const RespTarget to{r->qpn, r->rcq};
        // The run's checks, prepare()'s in its order; nothing is changed until all have passed.
        const uint32_t most = lc.pending < kFastSendRun ? lc.pending : kFastSendRun;
        uint32_t n = 0;
        uint32_t sysbits = 0;  // bit i: SEND i's receive buffer is host or peer-GPU memory
        while (n < most) {
            const unsigned long long ci = lc.ci + n;
            const FastWqe cur = ring.load(ci);
            const mlx5::CtrlFields c = mlx5::read_ctrl_seg(reinterpret_cast<const mlx5_wqe_ctrl_seg*>(&cur.u[0]));
            if (c.opcode != MLX5_OPCODE_SEND || c.ds != 2 || c.wqe_index != uint16_t(ci) || c.qpn != cfg.qpn) break;
            const mlx5::DataFields d = mlx5::read_data_seg(reinterpret_cast<const mlx5_wqe_data_seg*>(&cur.u[1]));
            if (d.byte_count & MLX5_INLINE_SEG) break;
            const uint32_t len = d.byte_count;
            if (len == 0 || len > kFastSendBytes) break;
            mr_prefetch(cfg.local_mrs, lc.local, d.lkey, cfg.pd, false);
            const uint64_t lp = mr_check(lc.local, d.addr, len, 0u, nullptr);
            if (!lp) break;
            // The peer's receive rc + n: where its queue stands is read at the run's first SEND,
            // its record again when the receives it showed are used up (none: the RNR rules, in
            // prepare()).
            if (!have_rc) {
                rc = atom::load_relaxed(&r->rq_ci, v.scope != kScopeGpu);
                have_rc = true;
            }
            if (n == posted && (posted = receives_posted(v, rc)) <= n) break;
            const mlx5::DataFields rd = mlx5::read_data_seg(rq_wqe(v, rc + n));
            if (rd.lkey == MLX5_INVALID_LKEY || mlx5::data_len(rd.byte_count) < len) break;
            uint32_t rsys = 0;
            const uint64_t rp = mr_resolve_cached(v.mrs, lc.remote, rd.lkey, v.pd, rd.addr, len, kLocalWrite, &rsys,
                                                  v.mrs.owner != cfg.local_mrs.owner);
            if (!rp) break;
            dst[n] = rp;
            src[n] = lp;
            if (rsys) sysbits |= 1u << n;
            ++n;
            // A signaled SEND ends the run: its completion, if lost, moves this QP to ERROR, and
            // no receive may then be claimed behind it (the live peer would never complete it).
            if (cur.u[0].b & kFastSignalBit) break;
        }
        GV_EXEC_STAMP(kStampChecked);
        if (n == 0) return;
        // The run's receives, with one CAS.
        unsigned long long seen = rc;  // claim_receive leaves the rq_ci it found here
        if (!claim_receive(q, r, seen, v.scope, n)) return;
        uint32_t fit = 0;
        const unsigned long long first = cq_take_run(to.rcq, n, &fit);
        GV_EXEC_STAMP(kStampReceive);
        for (uint32_t i = 0; i < n; ++i) {
            const unsigned long long ci = lc.ci;
            const FastWqe cur = ring.load(ci);  // read by the checks: from L1
            const mlx5::CtrlFields c = mlx5::read_ctrl_seg(reinterpret_cast<const mlx5_wqe_ctrl_seg*>(&cur.u[0]));
            const uint32_t len = mlx5::read_data_seg(reinterpret_cast<const mlx5_wqe_data_seg*>(&cur.u[1])).byte_count;
            fast_copy(dst[i], src[i], len);
            GV_EXEC_STAMP(kStampCopied);
            // RC ordering, as in drain(): the SEND's bytes before its completions and before any
            // byte of the next WQE.
            atom::fence_release(lc.scope != 0 || ((sysbits >> i) & 1));
            GV_EXEC_STAMP(kStampFenced);
            Outcome o{};
            o.opcode = MLX5_OPCODE_SEND;
            o.wqe_index = uint16_t(ci);
            o.signaled = (cur.u[0].b & kFastSignalBit) ? 1 : 0;
            o.bbs = 1;
            o.imm_be = c.imm_be;
            o.byte_len = len;
            o.rq_index = uint16_t(rc);
            o.resp_kind = MLX5_CQE_RESP_SEND;
            ++rc;
            --posted;
            advance(lc, o);
            const CqSlot slot{first + i, i < fit};
            // A lost completion moved a QP to ERROR: the run's later SENDs stay published (their
            // receives claimed, with no completion: the peer's CQ is full or the peer in ERROR).
            if (complete(q, lc, o, &to, &slot)) return;
        }
    }
}

}  // namespace gv::detail::soft
