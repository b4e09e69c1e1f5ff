// Removing a QP's unpolled completions from a CQ ring: what every backend's CQ does when a QP
// is reset or destroyed (libmlx5's mlx5_cq_clean), written once for the software device, the
// mlx5 backend and the verbs proxy's rings.
#pragma once

#include <cstdint>

#include "gpuverbs/mlx5/cqe.cuh"

namespace gv::detail {

/// Removes the CQEs of `qpn` among the unpolled entries of `ring` (2^log_cnt CQEs, consumer
/// index `ci`): polled later, they would retire slots of the QP's emptied queues (or of a new
/// QP with the same number) and wreck its counters. The produced entries are [ci, end) (an
/// entry a producer is still writing ends the scan; `sys`: the ring is live memory read with
/// system-scope ordering, not a copy). Walking from the newest, later entries move towards the
/// producer over the removed ones, each with the owner bit of its new position (it may be on the
/// next pass); every moved entry is stored into `ring` and handed to write(index, cqe) for a
/// ring that `ring` only copies. Returns how many were removed: the consumer index advances by
/// that many, past the gap. No thread may poll the CQ meanwhile (libmlx5 holds the CQ lock).
template <class Write>
uint32_t clean_cq_ring(mlx5_cqe64* ring, uint32_t log_cnt, unsigned long long ci, uint32_t qpn, bool sys,
                       Write&& write) {
    const uint32_t cnt = 1u << log_cnt, mask = cnt - 1;
    uint8_t op_own;
    unsigned long long end = ci;
    while (end - ci < cnt && mlx5::cqe_ready(&ring[end & mask], uint32_t(end), log_cnt, sys, &op_own)) ++end;
    uint32_t freed = 0;
    for (unsigned long long i = end; i-- > ci;) {
        mlx5_cqe64 e = ring[i & mask];
        if (mlx5::decode_cqe(&e, e.op_own).qpn == qpn) {
            ++freed;
        } else if (freed) {
            e.op_own = uint8_t((e.op_own & ~MLX5_CQE_OWNER_MASK) | mlx5::sw_owner(uint32_t(i + freed), log_cnt));
            ring[(i + freed) & mask] = e;
            write(size_t((i + freed) & mask), e);
        }
    }
    return freed;
}

}  // namespace gv::detail
