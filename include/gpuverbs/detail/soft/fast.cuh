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
// dependent instruction after another. fast_run takes such WQEs in a short straight line, two
// deep: the next WQE is checked and its source loaded while the one before it is fenced.
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

/// Where the leader's drain reads WQEs.
GV_HOST_DEVICE FastRing fast_ring(const LeaderCache& lc) {
    return FastRing{lc.cfg.sq, lc.cfg.sq_log_bb, lc.stage_n, static_cast<const uint8_t*>(lc.stage), lc.stage_ci};
}

/// Copies len (1 .. kFastBytes) bytes: with 8-byte alignment every load is issued before the
/// first store (d and s may overlap: the loads then see the bytes as they were, as prepare()'s
/// one-thread copy of a range this small does too), else copy_small's widest aligned steps.
GV_HOST_DEVICE void fast_copy(uint64_t dst, uint64_t src, uint64_t len) {
#if GV_DEVICE_CODE
    const uint64_t x = dst ^ src;
    const uint32_t unit = (x & 7) == 0 ? 8 : (x & 3) == 0 ? 4 : (x & 1) == 0 ? 2 : 1;
    copy_small(reinterpret_cast<uint8_t*>(dst), reinterpret_cast<const uint8_t*>(src), len, unit);
#else
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), len);
#endif
}

/// WQEs of the fast path moving whole 8-byte words, at most this many bytes, have their source
/// loaded when they are planned (in fast_run's pipeline, before the fence of the WQE ahead);
/// longer ones (up to kFastBytes) are copied at their store. Two words, not four: fast_run is
/// inlined into kernels capped at 128 registers a thread (512-thread blocks), where it holds
/// two planned WQEs and the next one's units across a fence; with four words ptxas (sm_90)
/// spilled 232 bytes in a 512-thread block-commit kernel where it spills 76 without the
/// pipeline and 150 with two words.
inline constexpr uint32_t kFastWordBytes = 16;

/// One WQE the fast path takes, checked and planned: where its bytes go and either its source's
/// words, loaded when it was planned (words: the loads are issued then and waited for at the
/// stores), or, for the rest, the source's address in v[0] (copied at the store, fast_copy).
/// Packed: two of these and the next WQE's units are live in fast_run across a fence.
struct FastStep {
    uint64_t dst;
    uint32_t meta;  ///< len (bits 0..5), opcode (8..15), signaled (16), words (17), sys (24..31)
    uint64_t v[kFastWordBytes / 8];
    GV_HOST_DEVICE uint32_t len() const { return meta & 63u; }
    GV_HOST_DEVICE uint8_t opcode() const { return uint8_t(meta >> 8); }
    GV_HOST_DEVICE bool signaled() const { return (meta >> 16) & 1u; }
    GV_HOST_DEVICE bool words() const { return (meta >> 17) & 1u; }
    GV_HOST_DEVICE uint32_t sys() const { return meta >> 24; }
};

/// Plans s's bytes from src: its words loaded when they are whole words of at most
/// kFastWordBytes, else src kept for the store.
GV_HOST_DEVICE void fast_load(FastStep& s, uint64_t src) {
    if (!s.words()) {
        s.v[0] = src;
        return;
    }
    const uint32_t n = s.len() / 8;
#if GV_DEVICE_CODE
    const auto* from = reinterpret_cast<const uint64_t*>(src);
#pragma unroll
    for (uint32_t i = 0; i < kFastWordBytes / 8; ++i)
        if (i < n) s.v[i] = from[i];
#else
    std::memcpy(s.v, reinterpret_cast<const void*>(src), size_t(n) * 8);
#endif
}

/// Stores s's bytes: the words loaded by fast_load, or the copy.
GV_HOST_DEVICE void fast_store(const FastStep& s) {
    if (!s.words()) {
        fast_copy(s.dst, s.v[0], s.len());
        return;
    }
    const uint32_t n = s.len() / 8;
#if GV_DEVICE_CODE
    auto* to = reinterpret_cast<uint64_t*>(s.dst);
#pragma unroll
    for (uint32_t i = 0; i < kFastWordBytes / 8; ++i)
        if (i < n) to[i] = s.v[i];
#else
    std::memcpy(reinterpret_cast<void*>(s.dst), s.v, size_t(n) * 8);
#endif
}

/// The fast path's checks of the WQE f at ci, those prepare() would make and in its order
/// (check_header and check_ctrl: one WQEBB, published, its own position and QP; check_body for
/// ds 3: a raddr segment and one data or inline segment; the peer; the local region; the peer's
/// access and region). True when the fast path may take it: s is planned and its source's
/// loads are issued (fast_load). Changes nothing but the leader's region caches.
GV_HOST_DEVICE bool fast_plan(LeaderCache& lc, const FastRing& ring, unsigned long long ci, const FastWqe& f,
                              bool foreign, FastStep& s) {
    const QpConfig& cfg = lc.cfg;
    const mlx5::CtrlFields c = mlx5::read_ctrl_seg(reinterpret_cast<const mlx5_wqe_ctrl_seg*>(&f.u[0]));
    const bool is_read = c.opcode == MLX5_OPCODE_RDMA_READ;
    if ((c.opcode != MLX5_OPCODE_RDMA_WRITE && !is_read) || c.ds != 3 || c.wqe_index != uint16_t(ci) ||
        c.qpn != cfg.qpn)
        return false;
    const mlx5::RaddrFields ra = mlx5::read_raddr_seg(reinterpret_cast<const mlx5_wqe_raddr_seg*>(&f.u[1]));
    const mlx5::DataFields d = mlx5::read_data_seg(reinterpret_cast<const mlx5_wqe_data_seg*>(&f.u[2]));
    GV_EXEC_STAMP(kStampChecked);
    const bool inl = (d.byte_count & MLX5_INLINE_SEG) != 0;
    // The regions, when the caches hold other keys (a drain's first WQE): the peer's first,
    // so that the two entries' loads are in flight together, as in prepare().
    mr_prefetch(cfg.remote_mrs, lc.remote, ra.rkey, cfg.peer_pd, foreign);
    if (!inl) mr_prefetch(cfg.local_mrs, lc.local, d.lkey, cfg.pd, false);
    // Whether the peer may be written (lc.peer_up) is known one load round after the state:
    // tested after the region loads are issued, so that the two rounds overlap.
    if (!lc.peer_up) return false;  // prepare() fails it: TRANSPORT_RETRY_EXC_ERR
    GV_EXEC_STAMP(kStampLocal);
    uint32_t sys = lc.scope;  // as prepare()'s p.sys
    uint64_t len, lp;
    if (inl) {
        // check_body: not in a READ, within max_inline and within the WQE (4 + len <= 16).
        len = d.byte_count & ~uint32_t(MLX5_INLINE_SEG);
        if (is_read || len == 0 || len > 12 || len > cfg.max_inline) return false;
        // The payload, 4 bytes into unit 2 (of the stage's copy when staged).
        lp = reinterpret_cast<uint64_t>(ring.bb(ci) + 2 * 16 + 4);
        sys |= cfg.sys;
    } else {
        len = d.byte_count;  // 0 would mean 2 GiB: not for this path
        if (len == 0 || len > kFastBytes) return false;
        lp = mr_check(lc.local, d.addr, len, is_read ? kLocalWrite : 0u, is_read ? &sys : nullptr);
        if (!lp) return false;
    }
    // resolve_remote: the peer QP's access rights, then its region.
    const uint32_t need = is_read ? kRemoteRead : kRemoteWrite;
    if (!(cfg.peer_access & need)) return false;
    const uint64_t rp = mr_check(lc.remote, ra.raddr, len, need, is_read ? nullptr : &sys);
    if (!rp) return false;
    s.dst = is_read ? lp : rp;
    const uint64_t src = is_read ? rp : lp;
    const bool words = ((s.dst | src | len) & 7) == 0 && len <= kFastWordBytes;
    const bool signaled = (c.fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) != 0;
    s.meta = uint32_t(len) | uint32_t(c.opcode) << 8 | uint32_t(signaled) << 16 | uint32_t(words) << 17 | sys << 24;
    fast_load(s, src);
    GV_EXEC_STAMP(kStampRemote);
    return true;
}

/// The requester's CQE of a fast-path WQE that succeeded (complete_requester), at position ci.
/// False when the CQ was full (the completion is lost).
GV_HOST_DEVICE bool fast_cqe(CqState* cq, uint32_t qpn, unsigned long long ci, uint8_t opcode, uint32_t len) {
    mlx5::CqeFields f{};
    f.qpn = qpn;
    f.wqe_counter = uint16_t(ci);
    f.wqe_opcode = opcode;
    f.cqe_opcode = MLX5_CQE_REQ;
    f.byte_cnt = len;
    return cq_push(cq, f);
}

/// fast_cqe out of line, for fast_run's loop: cq_push's loads and its slot's RMW would
/// otherwise be live beside the pipeline's two WQEs (a signaled WQE is typically the last of
/// many; its call costs less than the registers).
GV_HOST_DEVICE_NOINLINE bool fast_cqe_outlined(CqState* cq, uint32_t qpn, unsigned long long ci, uint8_t opcode,
                                               uint32_t len) {
    return fast_cqe(cq, qpn, ci, opcode, len);
}

/// After s's stores: its fence, its CQE when signaled, sq_ci past it (finish() for a WQE that
/// succeeded and consumed no receive). RC ordering, as in drain(): the WQE's bytes before its
/// completion and before any byte of the next WQE, at the scope of whoever observes them.
/// False when the CQE was lost: the QP then goes to ERROR (fast_lost).
template <bool kOutlinedCqe>
GV_HOST_DEVICE bool fast_finish(QpContext* q, const LeaderCache& lc, const FastStep& s, unsigned long long ci) {
    atom::fence_release(s.sys() != 0);
    GV_EXEC_STAMP(kStampFenced);
    bool ok = true;
    if (s.signaled())
        ok = kOutlinedCqe ? fast_cqe_outlined(lc.cfg.scq, lc.cfg.qpn, ci, s.opcode(), s.len())
                          : fast_cqe(lc.cfg.scq, lc.cfg.qpn, ci, s.opcode(), s.len());
    GV_EXEC_STAMP(kStampCqe);
    atom::store_relaxed(&q->sq_ci, ci + 1, lc.scope != kScopeGpu);
    GV_EXEC_STAMP(kStampFinished);
    return ok;
}

/// A completion was lost (the CQ was full): the QP goes to ERROR, as finish() does.
GV_HOST_DEVICE void fast_lost(QpContext* q, LeaderCache& lc) {
    enter_error(q, uint32_t(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR));
    lc.state = QpState::Error;
}

/// The direct path's execution (direct.cuh): the one WQE at lc.ci, whose units it built, when
/// the fast path takes it (else it is left at sq_ci, for the drain to decide).
GV_HOST_DEVICE void fast_one(QpContext* q, LeaderCache& lc, const FastWqe& first) {
    if (lc.pending == 0 || !sends_allowed(lc.state)) return;
    FastStep s;
    if (!fast_plan(lc, fast_ring(lc), lc.ci, first, remote_foreign(lc.cfg), s)) return;
    fast_store(s);
    GV_EXEC_STAMP(kStampCopied);
    const bool ok = fast_finish<false>(q, lc, s, lc.ci);
    ++lc.ci;
    --lc.pending;
    if (!ok) fast_lost(q, lc);
}

/// Executes the WQEs at sq_ci while they are of the common kind (above), and returns at the
/// first that is not, or when none is left. The group's leader, holding the QP's lock, after
/// next_published() found work.
///
/// It is inlined into every kernel that drains, the users' own included (through progress()),
/// so its registers count against their block sizes. It works on the leader cache itself (the
/// configuration, and both regions as MrCache entries whose WQE-independent checks were done
/// when they were loaded), which the compiler keeps in registers as long as no call takes its
/// address: an earlier version that looked regions up in a called function kept the whole
/// leader cache in local memory for all of drain() (stack 976 -> 1232 bytes in gv_write_bw's
/// kernel, 4 KiB WRITEs 8% slower, a lone WRITE's two region loads one after the other).
/// first: the units of the WQE at lc.ci when load_batch loaded them already, else null.
///
/// A pipeline two WQEs deep: WQE k's bytes are stored, then WQE k+1 is checked and planned
/// and its source's loads are issued (its units were loaded during k-1's fence) and WQE k+2's
/// units' loads too, then k's fence, which they overlap, then k's completion. So a long drain
/// of small WRITEs costs about one store and fence per WQE, not a chain of the WQE's, the
/// source's and the fence's round trips each (H200, `gv_probe_path --batch 256`: 1.17 us per
/// 8-byte WRITE before, the copy's load 0.20 and the fence 0.32 of it).
///
/// What reading k+1's source before k's fence keeps: this thread stored k's bytes before it
/// loads k+1's source, so where they are the same bytes (a WRITE sending what the READ before
/// it fetched, loopback WRITEs whose destination is the next one's source) the load returns
/// k's bytes, by the order of one thread's accesses to one location, exactly as if k's fence
/// came first; the fence orders this thread's accesses for other threads only. Other threads'
/// stores into k+1's source while it is posted are the application's race with the device (the
/// source of a posted WQE is the device's until it completes), as on a NIC, which reads a
/// gather list when it gets to it. RC ordering as a polling responder sees it is the fence's,
/// and there is still one between any two WQEs' stores: k's bytes are visible before k's
/// completion and before any byte of k+1.
GV_HOST_DEVICE void fast_run(QpContext* q, LeaderCache& lc, const FastWqe* first = nullptr) {
    if (lc.pending == 0 || !sends_allowed(lc.state)) return;
    const bool foreign = remote_foreign(lc.cfg);
    unsigned long long ci = lc.ci;
    uint32_t pending = lc.pending;
    const FastRing ring = fast_ring(lc);
    bool lost = false;
    // One call site of fast_plan (it is inlined with its region lookups): each turn stores the
    // WQE planned in the turn before (have: s), plans the next one from w, loads the units of
    // the one after it, then fences and completes s.
    FastStep s;
    bool have = false;
    FastWqe w = first ? *first : ring.load(ci);
    for (;;) {
        if (have) {
            fast_store(s);
            GV_EXEC_STAMP(kStampCopied);
        }
        // The next WQE planned, its source's loads and the units of the one after it issued,
        // before this one's fence (see above). left: the WQEs published from `at` on.
        const unsigned long long at = ci + (have ? 1u : 0u);
        const uint32_t left = pending - (have ? 1u : 0u);
        FastStep n;
        const bool go = left > 0 && fast_plan(lc, ring, at, w, foreign, n);
        if (go && left > 1) w = ring.load(at + 1);
        if (have) {
            const bool ok = fast_finish<true>(q, lc, s, ci);
            ++ci;
            --pending;
            if (!ok) {
                lost = true;
                break;
            }
        }
        if (!go) break;
        s = n;
        have = true;
    }
    lc.ci = ci;
    lc.pending = pending;
    if (lost) fast_lost(q, lc);
}

}  // namespace gv::detail::soft
