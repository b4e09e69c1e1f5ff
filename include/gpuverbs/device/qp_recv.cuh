// The receive queue: post_recv / recv. Part of gpuverbs/device/queue_pair_device.cuh.
#pragma once

#include "gpuverbs/device/qp_doorbell.cuh"

namespace gv {
namespace dev {

// ---- receive queue ----------------------------------------------------------------------

/// Writes the receive WQE of up to n buffers (zero-length entries skipped, an end-of-list entry
/// when there is room) at receive position pos.
GV_HOST_DEVICE void build_recv_wqe(const QpHandle& qp, unsigned long long pos, const Sge* sg, uint32_t n) {
    const unsigned long long ring = 1ull << qp.q.rq_log_cnt;
    auto* ds = reinterpret_cast<mlx5_wqe_data_seg*>(qp.q.rq + ((pos & (ring - 1)) << qp.q.rq_log_stride));
    const uint32_t cap = (1u << qp.q.rq_log_stride) / 16;
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; ++i) {
        if (!sg[i].length) continue;
        mlx5::set_data_seg(&ds[k++], sg[i].length, sg[i].lkey, sg[i].addr);
    }
    if (k < cap) mlx5::set_data_seg(&ds[k], 0, MLX5_INVALID_LKEY, 0);  // end of list
}

/// The group leader's part of a receive post: after every earlier reservation, the group's
/// receives become the published prefix (release: the members' WQE stores, ordered before by
/// the group barrier, are visible to whoever acquires rq_ready), the receive doorbell record
/// moves over them (monotonic, as for the send queue), and the backend hears of it once.
GV_HOST_DEVICE void rq_publish_range(const QpHandle& qp, const Reservation& res) {
    if (!res.total || res.status != Status::Ok) return;
    const unsigned long long end = res.base + res.total;
    publish_in_order(&qp.q.ctr->rq_ready, res.base, end, qp.q.sys != 0);
    mlx5::advance_dbrec(&qp.q.dbrec[MLX5_RCV_DBR], uint32_t(end), 16, qp.q.sys != 0);
    detail::ring_recv(qp);
}

/// Posts a receive of up to n buffers (n <= max_recv_sge) and updates the receive doorbell
/// record (mlx5 has no receive doorbell beyond it). Strong: the library reserves the position.
/// A receive needs no buffer (sg = nullptr, n = 0; zero-length entries are skipped): it
/// takes a WRITE_IMM, whose data goes where the writer said and whose completion carries
/// the immediate and the byte count, or a zero-length SEND. A SEND with data into it fails
/// as on a NIC: the receive completes with LOCAL_LENGTH_ERR, the SEND with
/// REMOTE_INVAL_REQ_ERR, and both QPs go to ERROR.
/// Scope as for the sends (reserve_group): Thread (any threads, any time; the converged lanes
/// of a warp that post receives on one QP together share one reservation and one publication),
/// Warp (every lane of the warp calls), Block (every thread of the block calls). A group posts
/// with one reservation, one in-order publication, one doorbell-record update and one ring,
/// where one per receive made the threads of a block queue behind each other. Invalid
/// arguments return InvalidArgument to the caller only; collective calls stay collective.
template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status post_recv(const QpHandle& qp, const Sge* sg, uint32_t n,
                                uint64_t timeout_ns = kWaitForever) {
    // A default-constructed handle: every member of a collective call holds the same one, and
    // reserve_group forms no group for it (no lane mask to publish with).
    if (qp.q.ctr == nullptr) return Status::InvalidArgument;
    // reserve_group also refuses a CPU thread's post on GPU-memory queues (InvalidArgument).
    const bool valid = n <= qp.q.max_recv_sge;
    Reservation res;
    const Status st = reserve_group<S, true>(qp, valid ? 1u : 0u, &res, timeout_ns);
    if (st == Status::Ok && valid) build_recv_wqe(qp, res.pos, sg, n);
    publish_group<S>(res, [&] { rq_publish_range(qp, res); });
    if (!valid) return Status::InvalidArgument;
    return st;
}

/// Posts a receive of one buffer (post_recv). recv(qp, nullptr, 0, 0): a receive without a
/// buffer, for a WRITE_IMM's immediate.
template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status recv(const QpHandle& qp, void* laddr, uint32_t len, uint32_t lkey,
                           uint64_t timeout_ns = kWaitForever) {
    Sge s{reinterpret_cast<uint64_t>(laddr), len, lkey};
    return post_recv<S>(qp, &s, 1, timeout_ns);
}

}  // namespace dev
}  // namespace gv
