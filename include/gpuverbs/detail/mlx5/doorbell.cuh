// The ConnectX (mlx5) backend's side of the doorbell. Reached only through
// gpuverbs/detail/dispatch.cuh.
#pragma once

#include "gpuverbs/device/handles.hpp"
#include "gpuverbs/device/status.cuh"
#include "gpuverbs/mlx5/wqe.cuh"

namespace gv::detail::mlx5db {

/// After the send doorbell record moved (by the calling thread): writes the last published
/// WQE's first 8 bytes into the UAR, which makes the NIC fetch everything up to the
/// record. Without a mapped UAR (a CPU thread rings for the GPU) nothing more is done here.
GV_HOST_DEVICE Status ring_send(const dev::QpHandle& qp) {
    if (qp.mlx5.uar == nullptr) return Status::Ok;
    const bool sys = qp.q.sys != 0;
    unsigned long long last = atom::load_acquire(&qp.q.ctr->sq_last, sys);
    const auto* ctrl = reinterpret_cast<const mlx5_wqe_ctrl_seg*>(
        mlx5::wqe_seg(qp.q.sq, qp.q.sq_log_bb, last, 0));
    mlx5::ring_uar(qp.mlx5.uar, ctrl);
    return Status::Ok;
}

}  // namespace gv::detail::mlx5db
