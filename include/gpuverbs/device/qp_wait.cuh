// Completions (wait_cq, wait_send, wait_recv) and the QP-state query. Part of
// gpuverbs/device/queue_pair_device.cuh.
#pragma once

#include "gpuverbs/device/qp_recv.cuh"

namespace gv {
namespace dev {

// ---- completions ------------------------------------------------------------------------

/// Lets the backend make progress for a waiter that found nothing to poll: on the software
/// device, retries a send waiting for a receive (RNR) and flushes a QP in ERROR. Cheap when
/// there is nothing to do; a no-op on the other backends.
GV_HOST_DEVICE void drive(const QpHandle& qp) { detail::drive(qp); }

/// Waits until n completions were polled from cq (into out[0..n) when out is not null),
/// driving qp meanwhile. Thread scope. Returns Ok, CompletionError (all n were polled and
/// at least one failed: inspect out), CqOverrun, or Timeout; *polled gets the count.
GV_HOST_DEVICE Status wait_cq(const QpHandle& qp, const CqHandle& cq, uint32_t n, Completion* out,
                              uint64_t timeout_ns = kWaitForever, uint32_t* polled = nullptr) {
    bool bad = cq.cqes == nullptr || cq.ci == nullptr;  // default-constructed handle
#if !GV_DEVICE_CODE
    bad = bad || !cq.host_reachable;  // GPU memory: CPU threads cannot read the ring
#endif
    if (bad) {
        if (polled) *polled = 0;
        return Status::InvalidArgument;
    }
    uint32_t got = 0;
    bool failed = false;
    uint64_t start = 0;
    uint32_t spins = 0, idle = 0;
    while (got < n) {
        Completion tmp[8];
        Completion* dst = out ? out + got : tmp;
        uint32_t want = out ? n - got : (n - got < 8 ? n - got : 8);
        uint32_t k = poll_cq(cq, dst, want);
        for (uint32_t i = 0; i < k; ++i) failed |= !dst[i].ok();
        got += k;
        if (k) continue;
        if (cq_overrun(cq)) {
            if (polled) *polled = got;
            return Status::CqOverrun;
        }
        drive(qp);
        if (timeout_ns != kWaitForever && (++spins & 63) == 0) {
            uint64_t now = atom::now_ns();
            if (!start) start = now;
            else if (now - start > timeout_ns) {
                if (polled) *polled = got;
                return Status::Timeout;
            }
        }
        spin_pause(idle, 1024);  // waits for completions: yield later, keep latency low
    }
    if (polled) *polled = got;
    return failed ? Status::CompletionError : Status::Ok;
}

/// Waits for n completions on the QP's send CQ.
GV_HOST_DEVICE Status wait_send(const QpHandle& qp, uint32_t n, Completion* out = nullptr,
                                uint64_t timeout_ns = kWaitForever, uint32_t* polled = nullptr) {
    return wait_cq(qp, qp.scq, n, out, timeout_ns, polled);
}

/// Waits for n completions on the QP's receive CQ.
GV_HOST_DEVICE Status wait_recv(const QpHandle& qp, uint32_t n, Completion* out = nullptr,
                                uint64_t timeout_ns = kWaitForever, uint32_t* polled = nullptr) {
    return wait_cq(qp, qp.rcq, n, out, timeout_ns, polled);
}

// ---- QP state ---------------------------------------------------------------------------

/// True when the QP is in ERROR. For a kernel (or CPU thread) that waits on a memory flag
/// rather than on a completion: it learns that nothing more will come, e.g. after the
/// library's peer-death watcher (peer process exited), QueuePair::to_error() or a failed
/// WQE moved the QP there. Everything outstanding then completes with an error (WR_FLUSH_ERR
/// behind the failure), which wait_send / wait_recv collect. Thread scope, never waits,
/// cheap enough for every turn of a spin loop. What can be known depends on the backend:
///   soft          the device's own QP state, read where it lives (exact);
///   verbs         the state the proxy thread publishes in pinned host memory: ERROR once the
///                 host moved the QP there or the proxy saw it fail (an error completion, a
///                 malformed WQE), at the latest when it writes the error CQE;
///   mlx5          always false: the state lives in the NIC, with no copy a GPU can read.
///                 There an error shows only as an error completion (the QP is then in ERROR).
/// Also false for a default-constructed handle, and for a CPU thread holding the handle of a
/// software device bound to a GPU (its state is GPU memory: ask QueuePair::state()).
GV_HOST_DEVICE bool qp_in_error(const QpHandle& qp) { return detail::in_error(qp); }

}  // namespace dev
}  // namespace gv
