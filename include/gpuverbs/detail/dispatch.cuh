// The one place where the device API depends on the backend: what a doorbell, a posted
// receive, a waiter with nothing to poll, and the ERROR query do on each. Everything else
// of the device API (reserving, building and publishing WQEs, updating doorbell records,
// polling CQEs) is the mlx5 format, the same for every backend.
//
//   soft   the group that rings executes the QP's published WQEs (detail/soft/)
//   mlx5   the NIC is told through its doorbell register (detail/mlx5/)
//   verbs  the proxy thread watches the doorbell records and posts what they publish to the
//          verbs device (a CPU thread that rings or waits does that step itself when the
//          proxy thread is not on the QP); the state the proxy publishes (VerbsQpPart)
//          answers the status and the ERROR query, as the software device's own state does
#pragma once

#include "gpuverbs/detail/group.cuh"
#include "gpuverbs/detail/mlx5/doorbell.cuh"
#include "gpuverbs/detail/soft/doorbell.cuh"

namespace gv::detail {

namespace verbs_db {
/// The state the host and the proxy published for a verbs QP. Acquire at system scope: it is
/// pinned host memory written by CPU threads.
GV_HOST_DEVICE QpState state(const dev::QpHandle& qp) {
    return qp.verbs.state ? QpState(atom::load_acquire(qp.verbs.state, true)) : QpState::Reset;
}
/// A CPU thread steps the QP itself (posts what it published, polls completions) unless
/// the proxy thread holds it; kernels leave everything to the proxy.
GV_HOST_DEVICE void step_on_host(const dev::QpHandle& qp) {
#if !GV_DEVICE_CODE
    if (qp.verbs.host_step) qp.verbs.host_step(qp.verbs.host_arg);
#else
    (void)qp;
#endif
}
/// After the doorbell record moved: the proxy picks the WQEs up. The status is the software
/// device's: QpError in ERROR (the work completes flushed), QpNotReady before RTS (it is held
/// until RTS).
GV_HOST_DEVICE Status ring_send(const dev::QpHandle& qp) {
    step_on_host(qp);
    const QpState s = state(qp);
    if (s == QpState::Error) return Status::QpError;
    if (s != QpState::Rts && s != QpState::Sqd) return Status::QpNotReady;
    return Status::Ok;
}
}  // namespace verbs_db

/// Whether a committer moves the send doorbell record before it rings. Not on the software
/// device: its executor reads how far the ring is published (soft::QpContext::sq_ready), so a
/// commit there is the ring alone (the record's load and CAS cost about 0.85 us on the H200).
GV_HOST_DEVICE bool commit_moves_record(const dev::QpHandle& qp) { return qp.backend != Backend::Soft; }

/// The send doorbell record was moved forward by the group's leader (`lead`), where the backend
/// reads it (commit_moves_record); every thread of the group (scope S) calls this.
template <Scope S, typename G>
GV_HOST_DEVICE Status ring_send(const dev::QpHandle& qp, const G& g, bool lead) {
    switch (qp.backend) {
        case Backend::Soft: return soft::ring_send(qp, g);
        case Backend::Mlx5: return lead ? mlx5db::ring_send(qp) : Status::Ok;
        case Backend::Verbs: return verbs_db::ring_send(qp);
        case Backend::Auto: break;
    }
    return Status::InvalidArgument;
}

/// A receive was published and the receive doorbell record moved (thread scope).
GV_HOST_DEVICE void ring_recv(const dev::QpHandle& qp) {
    if (qp.backend == Backend::Soft) soft::ring_recv(qp);
    else if (qp.backend == Backend::Verbs) verbs_db::step_on_host(qp);
}

/// A waiter found nothing to poll: let the backend make progress that waits for no
/// doorbell (retries under RNR rules, flushes after ERROR). Cheap when idle.
GV_HOST_DEVICE void drive(const dev::QpHandle& qp) {
    if (qp.backend == Backend::Soft) soft::drive(qp);
    else if (qp.backend == Backend::Verbs) verbs_db::step_on_host(qp);
}

/// Where a kernel posts the flush READ that makes data a NIC wrote into this GPU's memory
/// visible to it (dev::flush_gpu_writes); null when nothing is needed:
///   soft   the executor's copies are this GPU's own stores (or the CPU's, for host memory),
///          released before the CQE that reports them: a consumer that acquired the CQE sees
///          them. Nothing crosses PCIe.
///   mlx5   the context's loopback flush QP when the GPU does not order GPUDirect RDMA writes
///          for its kernels (ReadFlush, docs/mlx5.md).
///   verbs  null: the proxy thread closes the gap itself before it writes the CQEs
///          (cudaDeviceFlushGPUDirectRDMAWrites after polling completions of work that wrote
///          local memory, where the GPU needs it: VerbsOptions::gpudirect_flush).
GV_HOST_DEVICE const dev::Mlx5Flush* flush_target(const dev::QpHandle& qp) {
    return qp.backend == Backend::Mlx5 ? qp.mlx5.flush : nullptr;
}

/// Whether the device side can see the QP in ERROR. The software device keeps the QP state
/// where a kernel can read it, and the verbs proxy publishes it there; on mlx5 the state
/// lives in the NIC (an error shows as an error completion), so this is false there.
GV_HOST_DEVICE bool in_error(const dev::QpHandle& qp) {
    if (qp.backend == Backend::Verbs) return verbs_db::state(qp) == QpState::Error;
    return qp.backend == Backend::Soft && soft::in_error(qp);
}

}  // namespace gv::detail
