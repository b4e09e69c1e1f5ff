// The software device's side of the doorbell: what happens when a group rings a QP's send
// doorbell, posts a receive, or waits. Reached only through gpuverbs/detail/dispatch.cuh.
#pragma once

#include "gpuverbs/detail/soft/exec.cuh"
#include "gpuverbs/device/handles.hpp"
#include "gpuverbs/device/status.cuh"

namespace gv::detail::soft {

/// The send doorbell record has moved: the calling group (every thread of it) executes the
/// QP's published WQEs, in order, unless another group is already doing so. A CPU thread
/// holding the handle of a device that executes on a GPU asks for a launch instead.
/// Returns QpNotReady before RTS and QpError in ERROR (work then completes flushed).
template <typename G>
GV_HOST_DEVICE Status ring_send(const dev::QpHandle& qp, const G& g) {
#if !GV_DEVICE_CODE
    if (qp.soft.host_doorbell) {
        qp.soft.host_doorbell(qp.soft.host_arg, dev::HostDoorbell::SendQueue);
        return Status::Ok;
    }
#endif
    progress(qp.soft.ctx, g);
    QpState s = load_state(qp.soft.ctx, state_scope(qp.soft.ctx) != kScopeGpu);
    if (s == QpState::Error) return Status::QpError;
    if (!sends_allowed(s)) return Status::QpNotReady;
    return Status::Ok;
}

/// A receive was published: in ERROR it is flushed at once; a sender of this process that
/// waits for a receive under RNR rules is retried.
GV_HOST_DEVICE void ring_recv(const dev::QpHandle& qp) {
#if !GV_DEVICE_CODE
    if (qp.soft.host_doorbell) {
        qp.soft.host_doorbell(qp.soft.host_arg, dev::HostDoorbell::RecvQueue);
        return;
    }
#endif
    QpContext* q = qp.soft.ctx;
    // Full fence: the receive doorbell record's store before the loads of the state and of
    // the peer's RNR flag. A waiting sender whose flag is missed here is retried by its own
    // RNR timer (its waiters drive it). On two GPUs (xgpu) the sender's executor runs on the
    // other GPU: system scope, or this store and its flag could pass each other there.
    const bool sys = state_scope(q) != kScopeGpu;
    atom::fence_seq_cst(sys);
    if (load_state(q, sys) == QpState::Error) flush_rq(q);
    QpContext* peer = q->remote;
    // A peer of this process on the other GPU is run from here too (progress() takes its lock
    // at system scope): its queues, CQs and buffers are reachable from this GPU (peer access).
    if (peer && peer_in_process(q) && atom::load_acquire(&peer->rnr_waiting, sys)) progress(peer, ThreadGroup{});
}

/// A waiter found nothing to poll: retry a send waiting for a receive (RNR), flush a QP in
/// ERROR. Cheap when there is nothing to do. A CPU thread on a GPU device asks for a launch
/// (the host side rate-limits those), so that RNR retries also run out for a CPU waiter.
GV_HOST_DEVICE void drive(const dev::QpHandle& qp) {
    if (qp.soft.ctx == nullptr) return;
#if !GV_DEVICE_CODE
    if (qp.soft.host_doorbell) {
        qp.soft.host_doorbell(qp.soft.host_arg, dev::HostDoorbell::Drive);
        return;
    }
#endif
    if (needs_progress(qp.soft.ctx)) {
        progress(qp.soft.ctx, ThreadGroup{});
        if (load_state(qp.soft.ctx, state_scope(qp.soft.ctx) != kScopeGpu) == QpState::Error)
            flush_rq(qp.soft.ctx);
    }
}

/// True when the device's QP context says ERROR. A CPU thread on a GPU device cannot read
/// it (GPU memory) and gets false.
GV_HOST_DEVICE bool in_error(const dev::QpHandle& qp) {
    if (qp.soft.ctx == nullptr) return false;
#if !GV_DEVICE_CODE
    if (qp.soft.host_doorbell) return false;
#endif
    // Acquire, so the cause written before the state (QpContext::syndrome: enter_error's
    // CAS precedes its release store) is seen with it. Device scope, as the executor reads
    // it: on a GPU device the state is GPU memory, written by executors on that GPU (of this
    // process or a peer's) or by host copies (to_error, the peer-death watcher); a strong
    // load is not served from a stale L1 line, so a spinning kernel sees the change. On a
    // CPU device it is host memory and this is a plain CPU acquire load. On two GPUs (xgpu)
    // the peer's executor, on the other GPU, may be the writer: system scope.
    return load_state(qp.soft.ctx, state_scope(qp.soft.ctx) != kScopeGpu) == QpState::Error;
}

}  // namespace gv::detail::soft
