// The one place where the device API depends on the backend: what a doorbell, a posted
// receive, a waiter with nothing to poll, and the ERROR query do on each. Everything else
// of the device API (reserving, building and publishing WQEs, updating doorbell records,
// polling CQEs) is the mlx5 format, the same for every backend.
//
//   soft   the group that rings executes the QP's published WQEs (detail/soft/)
//   mlx5   the NIC is told through its doorbell register (detail/mlx5/)
//   verbs  nothing: the proxy thread watches the doorbell records and posts what they
//          publish to the verbs device
#pragma once

#include "gpuverbs/detail/group.cuh"
#include "gpuverbs/detail/mlx5/doorbell.cuh"
#include "gpuverbs/detail/soft/doorbell.cuh"

namespace gv::detail {

/// The send doorbell record was moved forward by the group's leader (`lead`); every thread
/// of the group (scope S) calls this.
template <Scope S, typename G>
GV_HOST_DEVICE Status ring_send(const dev::QpHandle& qp, const G& g, bool lead) {
    switch (qp.backend) {
        case Backend::Soft: return soft::ring_send(qp, g);
        case Backend::Mlx5: return lead ? mlx5db::ring_send(qp) : Status::Ok;
        case Backend::Verbs: return Status::Ok;
        case Backend::Auto: break;
    }
    return Status::InvalidArgument;
}

/// A receive was published and the receive doorbell record moved (thread scope).
GV_HOST_DEVICE void ring_recv(const dev::QpHandle& qp) {
    if (qp.backend == Backend::Soft) soft::ring_recv(qp);
}

/// A waiter found nothing to poll: let the backend make progress that waits for no
/// doorbell (retries under RNR rules, flushes after ERROR). Cheap when idle.
GV_HOST_DEVICE void drive(const dev::QpHandle& qp) {
    if (qp.backend == Backend::Soft) soft::drive(qp);
}

/// Whether the device side can see the QP in ERROR. Only the software device keeps the QP
/// state where a kernel can read it; on mlx5 and verbs the state lives in the NIC (an error
/// shows as an error completion), so this is false there.
GV_HOST_DEVICE bool in_error(const dev::QpHandle& qp) {
    return qp.backend == Backend::Soft && soft::in_error(qp);
}

}  // namespace gv::detail
