// The receive queue: post_recv / recv. Part of gpuverbs/device/queue_pair_device.cuh.
#pragma once

#include "gpuverbs/device/qp_doorbell.cuh"

namespace gv {
namespace dev {

// ---- receive queue ----------------------------------------------------------------------

/// Posts a receive of up to n buffers (n <= max_recv_sge) and updates the receive doorbell
/// record (mlx5 has no receive doorbell beyond it). Thread scope, strong.
/// A receive needs no buffer (sg = nullptr, n = 0; zero-length entries are skipped): it
/// takes a WRITE_IMM, whose data goes where the writer said and whose completion carries
/// the immediate and the byte count, or a zero-length SEND. A SEND with data into it fails
/// as on a NIC: the receive completes with LOCAL_LENGTH_ERR, the SEND with
/// REMOTE_INVAL_REQ_ERR, and both QPs go to ERROR.
GV_HOST_DEVICE Status post_recv(const QpHandle& qp, const Sge* sg, uint32_t n,
                                uint64_t timeout_ns = kWaitForever) {
    if (qp.q.ctr == nullptr) return Status::InvalidArgument;  // default-constructed handle
#if !GV_DEVICE_CODE
    if (!qp.q.host_reachable) return Status::InvalidArgument;  // GPU-memory queues
#endif
    if (n > qp.q.max_recv_sge) return Status::InvalidArgument;
    const unsigned long long ring = 1ull << qp.q.rq_log_cnt;
    unsigned long long pos;
    Status st = ring_reserve(&qp.q.ctr->rq_reserved, &qp.q.ctr->rq_retired, 1, ring, qp.q.sys != 0, timeout_ns, &pos);
    if (st != Status::Ok) return st;
    auto* ds = reinterpret_cast<mlx5_wqe_data_seg*>(qp.q.rq + ((pos & (ring - 1)) << qp.q.rq_log_stride));
    const uint32_t cap = (1u << qp.q.rq_log_stride) / 16;
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; ++i) {
        if (!sg[i].length) continue;
        mlx5::set_data_seg(&ds[k++], sg[i].length, sg[i].lkey, sg[i].addr);
    }
    if (k < cap) mlx5::set_data_seg(&ds[k], 0, MLX5_INVALID_LKEY, 0);  // end of list
    publish_in_order(&qp.q.ctr->rq_ready, pos, pos + 1, qp.q.sys != 0);
    // Monotonic receive doorbell record, as for the send queue.
    mlx5::advance_dbrec(&qp.q.dbrec[MLX5_RCV_DBR], uint32_t(pos + 1), 16, qp.q.sys != 0);
    detail::ring_recv(qp);
    return Status::Ok;
}

/// Posts a receive of one buffer (post_recv). recv(qp, nullptr, 0, 0): a receive without a
/// buffer, for a WRITE_IMM's immediate.
GV_HOST_DEVICE Status recv(const QpHandle& qp, void* laddr, uint32_t len, uint32_t lkey,
                           uint64_t timeout_ns = kWaitForever) {
    Sge s{reinterpret_cast<uint64_t>(laddr), len, lkey};
    return post_recv(qp, &s, 1, timeout_ns);
}

}  // namespace dev
}  // namespace gv
