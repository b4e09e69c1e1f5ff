// A run of same-shape small WRITEs or READs executed by a whole warp: the lanes read and check
// up to 32 WQEs at once and load their sources, then store them in ring order, one WQE and one
// fence at a time. For drain() in exec.cuh, where the draining group starts with a whole warp.
// Part of the software device's executor (gpuverbs/detail/soft/exec.cuh).
//
// Why. One thread executes a QP's WQEs (fast_run), about 1.1 us each in a long drain of 8-byte
// WRITEs (H100, `gv_probe_path --batch 256`), of which the release fence that RC ordering needs
// between two WQEs' bytes is about 0.3 us. The rest is that thread's own chain: the next WQE's
// units (an L2 round trip, which the fence waits for too), its decoding and checks, one
// dependent instruction after another, and the source's load. None of that has to happen in
// order, only the stores do: lane i reads and checks the WQE at sq_ci + i and loads its source,
// all lanes at once; then, in turn, lane i stores WQE i's bytes from its own registers, lane 0
// sq_ci, and the warp fences, with nothing else on the way. (Until session 41 lane 0 stored
// every WQE's bytes from values shuffled to it: some 65 dependent instructions a WQE beside the
// fence, 0.3 of the 0.76 us a WQE took in the loop on an H100.)
//
// What the warp does per WQE is fast_run's, in fast_run's order: the bytes, sq_ci, the release
// fence (its scope the shape's: the written region's and the QP's), the requester's CQE when the
// WQE is signaled. So RC ordering holds as fast_run argues it: a WQE's bytes are visible before
// its completion and before any byte of the next WQE, at the scope of whoever observes them (the
// loop below says why a fence in every lane after __syncwarp orders lane i's bytes).
// The sources loaded early: a lane loads its WQE's source only when it lies outside the span of
// every destination of the run, so no store of the run can change what it reads (an earlier
// WQE's READ into a later WQE's source, say); every WQE before the run has executed and been
// fenced already. Elsewhere lane 0 loads the source itself, when it stores that WQE.
//
// Which WQEs: those fast_run would execute the lean way (its shape check): every field of the
// first three units but the WQE index, the signal bit and the two addresses equal to the shape
// of a WQE fast_run has just checked in full (opcode, QP, size, keys, length, access, regions,
// the peer), its index the position's, both ranges within the cached regions (fast_bounds), and
// for more than kFastChunk bytes no overlap. The run ends at the first WQE that is not such:
// fast_run and prepare() take it in their turn, as always, errors included. fast_run hands over
// runs of at most kFastChunk bytes per WQE only (the lanes hold that much of each source); with
// longer ones lane 0 would load every source itself, after the previous WQE's fence.
#pragma once

#include <type_traits>

#include "gpuverbs/detail/group.cuh"
#include "gpuverbs/detail/soft/completions.cuh"
#include "gpuverbs/detail/soft/fast.cuh"

namespace gv::detail::soft {

/// Whether the group g starts with a whole warp that takes part in its collective calls: a block
/// of at least 32 threads (ranks 0..31 are its first warp), or a warp group of all 32 lanes.
template <typename G>
GV_HOST_DEVICE bool whole_warp(const G& g) {
#if GV_DEVICE_CODE
    if constexpr (std::is_base_of_v<BlockGroup, G>) return g.size() >= 32;
    else if constexpr (std::is_same_v<G, WarpGroup>) return g.mask == 0xffffffffu;
#endif
    (void)g;
    return false;
}

/// What warp_run needs of the leader (every lane passes its own; lane 0's count).
struct WarpRunArgs {
    QpContext* q;
    CqState* scq;
    const uint8_t* sq;
    const uint8_t* stage;
    unsigned long long stage_ci;
    unsigned long long ci;
    uint32_t log_bb, stage_n, pending, qpn, scope;
    WarpShape s;
    MrCache local, remote;
};

GV_HOST_DEVICE WarpRunArgs warp_run_args(QpContext* q, const LeaderCache& lc, const WarpShape& s) {
    return WarpRunArgs{q,          lc.cfg.scq, lc.cfg.sq,  static_cast<const uint8_t*>(lc.stage), lc.stage_ci,
                       lc.ci,      lc.cfg.sq_log_bb, lc.stage_n, lc.pending, lc.cfg.qpn, lc.scope, s,
                       lc.local,   lc.remote};
}

/// warp_run's result: the WQEs it executed (sq_ci moved past them), and whether the last one's
/// completion was lost (the CQ was full: the QP is to go to ERROR, as in fast_run).
struct WarpRunDone {
    uint32_t n;
    bool lost;
};

#if GV_DEVICE_CODE
namespace warp_detail {
__device__ __forceinline__ uint64_t from0(uint64_t v) { return __shfl_sync(0xffffffffu, (unsigned long long)v, 0); }
__device__ __forceinline__ uint32_t from0(uint32_t v) { return __shfl_sync(0xffffffffu, v, 0); }
__device__ __forceinline__ uint64_t min64(uint64_t v) {
    for (int o = 16; o; o >>= 1) {
        const uint64_t w = __shfl_xor_sync(0xffffffffu, (unsigned long long)v, o);
        v = w < v ? w : v;
    }
    return v;
}
__device__ __forceinline__ uint64_t max64(uint64_t v) {
    for (int o = 16; o; o >>= 1) {
        const uint64_t w = __shfl_xor_sync(0xffffffffu, (unsigned long long)v, o);
        v = w > v ? w : v;
    }
    return v;
}
}  // namespace warp_detail

/// Executes the run of WQEs of shape a.s at a.ci (at most a.pending, 32 at a time): every lane of
/// one whole warp calls it, converged, lane 0 being the leader that holds the QP (its a counts;
/// the other lanes' a is not read). Inline: out of line, its arguments went through the stack
/// and the 512-thread block-commit kernel's spills grew twice as much (ptxas, sm_90: 88 / 140
/// bytes of spill stores / loads before, 144 / 200 inline, 186 / 368 out of line).
__device__ __forceinline__ WarpRunDone warp_run(WarpRunArgs a) {
    using namespace warp_detail;
    constexpr unsigned kAll = 0xffffffffu;
    uint32_t lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    // Lane 0's values, to every lane.
    const FastRing ring{reinterpret_cast<const uint8_t*>(from0(uint64_t(a.sq))), from0(a.log_bb), from0(a.stage_n),
                        reinterpret_cast<const uint8_t*>(from0(uint64_t(a.stage))), from0(uint64_t(a.stage_ci))};
    const unsigned long long ci = from0(uint64_t(a.ci));
    const uint32_t pending = from0(a.pending);
    const uint64_t len = from0(a.s.len);
    const bool is_read = from0(uint32_t(a.s.is_read)) != 0;
    const uint32_t rkey = from0(a.s.rkey);
    const uint64_t u0a = from0(a.s.u0a), u0b = from0(a.s.u0b), u2a = from0(a.s.u2a);
    MrCache local{}, remote{};
    local.addr = from0(a.local.addr);
    local.length = from0(a.local.length);
    local.xlate = int64_t(from0(uint64_t(a.local.xlate)));
    remote.addr = from0(a.remote.addr);
    remote.length = from0(a.remote.length);
    remote.xlate = int64_t(from0(uint64_t(a.remote.xlate)));

    const uint32_t words = uint32_t(len / 8);
    const uint32_t sys = from0(a.s.sys);
    const uint32_t scope = a.scope;  // lane 0's, read by lane 0 only
    WarpRunDone done{0, false};
    // Chunks of 32 WQEs (one a lane) for as long as the last one was whole and WQEs are pending:
    // the warp goes on without handing the QP back (each hand-back cost fast_run's WQE and a
    // barrier of the group per 32).
    for (;;) {
        // Lane i: the WQE at ci + i, fast_run's lean checks.
        const uint32_t n = pending - done.n < 32 ? pending - done.n : 32;
        bool ok = false, sig = false;
        uint64_t dst = 0, src = 0;
        if (lane < n) {
            const unsigned long long c = ci + done.n + lane;
            const FastWqe w = ring.load(c);
            if (fast_same_shape(w, c, u0a, u0b, rkey, u2a)) {
                const uint64_t la = fast_bounds(local, mlx5::from_be64(w.u[2].b), len);
                const uint64_t ra = fast_bounds(remote, mlx5::from_be64(w.u[1].a), len);
                ok = la && ra && (len <= kFastChunk || !fast_overlap(la, ra, len));
                sig = (w.u[0].b & kFastSignalBit) != 0;
                dst = is_read ? la : ra;
                src = is_read ? ra : la;
            }
        }
        // The run: the WQEs up to the first that is not of the shape.
        const unsigned bad = ~__ballot_sync(kAll, ok);
        const uint32_t k = bad ? uint32_t(__ffs(bad)) - 1 : 32u;
        const bool in = lane < k;
        // The span of the run's destinations; a source outside it is loaded now.
        const uint64_t dlo = min64(in ? dst : ~0ull);
        const uint64_t dhi = max64(in ? dst + len : 0ull);
        const bool pre =
            in && ((dst | src | len) & 7) == 0 && len <= kFastChunk && (src + len <= dlo || src >= dhi);
        Preloaded mine;  // this lane's WQE's source, when pre
        mine.n = words;
        load_words_if(mine.v, src, pre ? words : 0u);

        // In ring order: WQE j's bytes, sq_ci, the release fence, its CQE when signaled. Lane j stores the
        // bytes it loaded, from its own registers (no shuffle to lane 0 on the way); lane 0 stores those of a
        // WQE whose source it loads now (not preloaded: see above), and sq_ci and the CQE. Then the warp
        // syncs and every lane fences: __syncwarp orders lane j's stores before whatever any lane does after
        // it, so every lane's fence, lane j+1's included, comes after WQE j's bytes and orders them before
        // that lane's later stores (a fence orders what came before it in its thread or reached it through a
        // synchronization: PTX's cumulativity). So WQE j's bytes are visible before its CQE and before any
        // byte of WQE j+1, as fast_run's one thread orders them with its fence. One warp-wide MEMBAR a WQE,
        // as before.
        const unsigned premask = __ballot_sync(kAll, pre);
        const unsigned sigmask = __ballot_sync(kAll, in && sig);
        for (uint32_t j = 0; j < k; ++j) {
            if ((premask >> j) & 1u) {  // warp-uniform
                if (lane == j) store_preloaded(dst, mine);
            } else {
                const uint64_t d = __shfl_sync(kAll, (unsigned long long)dst, j);
                const uint64_t s = __shfl_sync(kAll, (unsigned long long)src, j);
                if (lane == 0) fast_copy(d, s, len);
            }
            if (lane == 0) atom::store_relaxed(&a.q->sq_ci, ci + done.n + 1, scope != kScopeGpu);
            __syncwarp(kAll);
            atom::fence_release(sys != 0);
            if ((sigmask >> j) & 1u) {  // warp-uniform
                if (lane == 0) {
                    mlx5::CqeFields f{};
                    f.qpn = a.qpn;
                    f.wqe_counter = uint16_t(ci + done.n);
                    f.wqe_opcode = is_read ? MLX5_OPCODE_RDMA_READ : MLX5_OPCODE_RDMA_WRITE;
                    f.cqe_opcode = MLX5_CQE_REQ;
                    f.byte_cnt = uint32_t(len);
                    done.lost = !cq_push(a.scq, f);
                }
                if (__shfl_sync(kAll, uint32_t(done.lost), 0)) {
                    ++done.n;
                    return done;
                }
            }
            ++done.n;
        }
        if (k < 32 || done.n >= pending) break;
    }
    return done;
}
#endif

}  // namespace gv::detail::soft
