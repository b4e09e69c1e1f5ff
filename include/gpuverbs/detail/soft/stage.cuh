// Staging: the library's own executor kernels copy a host-memory send ring's published
// WQEBBs into shared memory in one parallel read before the leader decodes them.
// Part of the software device's executor (gpuverbs/detail/soft/exec.cuh).
#pragma once

#include <type_traits>

#include "gpuverbs/detail/soft/batch.cuh"
#include "gpuverbs/detail/soft/mr_check.cuh"
#include "gpuverbs/mlx5/wqe_reader.cuh"

namespace gv::detail::soft {

/// How many WQEBBs a group stages (stage_wqes): G::kStageBbs where the group type says so (the
/// library's own executor kernels, which give it the shared memory), else none.
template <typename G, typename = void>
struct StageBbs {
    static constexpr uint32_t value = 0;
};
template <typename G>
struct StageBbs<G, std::void_t<decltype(G::kStageBbs)>> {
    static constexpr uint32_t value = G::kStageBbs;
};

#if GV_DEVICE_CODE
/// A QP whose send ring is host memory (CPU threads post there) costs the leader a PCIe round
/// trip for each WQE it reads, one after another. The group reads the published WQEBBs at
/// sq_ci (up to G::kStageBbs) into g.stage at once, every thread a share, one round trip in
/// all; the leader then reads WQEs from there (only their first WQEBB: longer WQEs read the
/// rest, and inline payloads, from the ring). The copies are of published WQEBBs, which no
/// poster rewrites before sq_ci passes them, so they are the ring's bytes. Every thread of the
/// group calls it, holding the QP's lock.
template <typename G>
__device__ void stage_wqes(QpContext* q, const G& g, LeaderCache& lc) {
    constexpr uint32_t kMax = StageBbs<G>::value;
    uint32_t n = 0;
    if (g.leader() && q->sys) {  // sys: the queues are host memory
        const unsigned long long ci = q->sq_ci;
        // Acquire, as next_published would (which then takes this value instead).
        const uint32_t pi = Published::of(q, true).read();
        const uint32_t pending = (pi - uint32_t(ci)) & 0xffff;
        n = pending < kMax ? pending : kMax;
        g.hdr->ci = ci;
        g.hdr->ring = q->sq;
        g.hdr->mask = (1u << q->sq_log_bb) - 1;
        lc.staged_pi = pi;
    }
    n = uint32_t(g.bcast(n));  // its barrier publishes the header
    if (n == 0) return;
    const unsigned long long ci = g.hdr->ci;
    const uint8_t* ring = g.hdr->ring;
    const uint32_t mask = g.hdr->mask;
    // After the leader's acquire and the barrier: the WQE bytes are visible to every thread.
    for (uint32_t u = g.rank(); u < n * 4; u += g.size()) {
        const uint32_t bb = uint32_t(ci + u / 4) & mask;
        g.stage[u] = reinterpret_cast<const uint4*>(ring + size_t(bb) * 64)[u % 4];
    }
    g.sync();
    if (g.leader()) {
        lc.stage = g.stage;
        lc.stage_ci = ci;
        lc.stage_n = n;
        // More published than staged: this drain takes the whole WQEs the stage holds, as if
        // the record said no more (as a record read a little earlier would have), and ends with
        // kMore (lc.cut): progress() drains again at once, and the next drain stages the rest.
        // No ring would tell of the rest: it was rung for before this drain began. A WQE larger
        // than the stage (or one whose size is wrong) leaves the record as read: the drain then
        // reads it from the ring and judges it there.
        const uint32_t pending = (lc.staged_pi - uint32_t(ci)) & 0xffff;
        if (pending > n) {
            uint32_t whole = 0;
            while (whole < n) {
                const uint32_t bbs = mlx5::WqeReader(nullptr, 0, ci + whole, g.stage + whole * 4).bbs();
                if (whole + bbs > n) break;
                whole += bbs;
            }
            if (whole) {
                lc.staged_pi = uint32_t(ci + whole) & 0xffff;
                lc.cut = 1;
            }
        }
    }
}
#endif

}  // namespace gv::detail::soft
