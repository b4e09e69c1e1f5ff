// Device handle of a completion queue, and polling it from kernels or CPU threads.
#pragma once

#include <type_traits>

#include "gpuverbs/device/atomic.cuh"
#include "gpuverbs/device/status.cuh"
#include "gpuverbs/mlx5/cqe.cuh"
#include "gpuverbs/soft/state.cuh"

namespace gv::dev {

/// Where a poller reports completed send / receive WQEs, so that posters may reuse their
/// queue slots (one entry per QP using this CQ, found by QP number).
struct CqQpSlot {
    uint32_t qpn;  ///< 0: empty
    uint32_t sq_log_bb;
    uint8_t* sq;                       ///< to read a completed WQE's size
    unsigned long long* sq_retired;    ///< null unless this CQ is the QP's send CQ
    unsigned long long* rq_retired;    ///< null unless this CQ is the QP's receive CQ
};

/// Trivially copyable CQ handle. Keep the CompletionQueue alive while a kernel uses it.
struct CqHandle {
    mlx5_cqe64* cqes;
    uint32_t* dbrec;
    unsigned long long* ci;  ///< consumer index shared by every poller
    CqQpSlot* slots;
    uint32_t* overrun;       ///< software device: set once completions were lost (else null)
    uint32_t log_cnt;
    uint32_t slot_mask;
    uint32_t sys;            ///< the ring is host memory or a NIC writes it
    uint32_t cqn;
    /// The ring is GPU memory: host code must not touch it (set by
    /// CompletionQueue::device_handle and QueuePair::device_handle).
    uint32_t ring_on_gpu;
};
static_assert(std::is_trivially_copyable_v<CqHandle>);

/// True when the calling thread must not touch cq's ring: a default-constructed handle, or
/// (host code only) a ring in GPU memory. poll_cq then returns 0, the waits InvalidArgument.
GV_HOST_DEVICE bool cq_unreachable(const CqHandle& cq) {
#if GV_DEVICE_CODE
    return cq.cqes == nullptr || cq.ci == nullptr;
#else
    return cq.cqes == nullptr || cq.ci == nullptr || cq.ring_on_gpu != 0;
#endif
}

GV_HOST_DEVICE const CqQpSlot* cq_find_slot(const CqHandle& cq, uint32_t qpn) {
    if (!cq.slots) return nullptr;
    for (uint32_t i = 0; i <= cq.slot_mask; ++i) {
        const CqQpSlot* s = &cq.slots[(qpn + i) & cq.slot_mask];
        if (s->qpn == qpn) return s;
        if (s->qpn == 0) return nullptr;
    }
    return nullptr;
}

/// Frees the queue slots up to and including the WQE a completion reports.
///
/// Pollers claim completions in order but may retire them in any order, so a completion
/// can arrive here after a later one of its QP was retired. Rebuilding its position from
/// the 16-bit counter then gives a value 2^16 ahead (freeing slots whose WQEs have not
/// executed), so such a completion frees nothing: the later retirement covered it.
/// Unretired entries lie less than 2^15 ahead of the retirement point (rings hold at
/// most 2^15 entries / WQEBBs), retired ones up to 2^15 behind it.
GV_HOST_DEVICE void cq_retire(const CqHandle& cq, const Completion& c) {
    const CqQpSlot* s = cq_find_slot(cq, c.qpn);
    if (!s) return;
    if (c.is_recv()) {
        if (!s->rq_retired) return;
        unsigned long long r = atom::load_acquire(s->rq_retired);
        uint32_t ahead = (uint32_t(c.wqe_counter) - uint32_t(r)) & 0xffff;
        if (ahead >= 0x8000) return;  // already retired by a later completion
        atom::fetch_max(s->rq_retired, r + ahead + 1);
    } else {
        if (!s->sq_retired) return;
        unsigned long long r = atom::load_acquire(s->sq_retired);
        uint32_t ahead = (uint32_t(c.wqe_counter) - uint32_t(r)) & 0xffff;
        if (ahead >= 0x8000) return;  // already retired by a later completion
        unsigned long long pos = r + ahead;
        // The WQE was unretired when r was read, so its slot held its ctrl segment; but
        // another poller may retire past it (and a poster reuse the slot) meanwhile, so
        // after reading ds, check the retirement point is still at or before it. If it
        // moved past, that retirement covered this WQE (retirement points are WQE ends).
        uint64_t ring = 64ull << s->sq_log_bb;
        auto* ctrl = reinterpret_cast<const mlx5_wqe_ctrl_seg*>(s->sq + ((pos * 64) & (ring - 1)));
        uint32_t ds = mlx5::read_ctrl_seg(ctrl).ds;
        atom::fence_acquire();  // the ds read above happens before the re-check below
        if (atom::load_acquire(s->sq_retired) > pos) return;
        atom::fetch_max(s->sq_retired, pos + (ds ? mlx5::ds_to_bbs(ds) : 1));
    }
}

/// Publishes the consumer index in the doorbell record, never moving it backwards when
/// several pollers race (24-bit field, compared modulo 2^24).
GV_HOST_DEVICE void cq_update_dbrec(const CqHandle& cq, unsigned long long ci) {
    mlx5::advance_dbrec(&cq.dbrec[mlx5::kCqSetCi], uint32_t(ci), 24, cq.sys != 0);
}

/// Polls up to `max` completions; returns how many were written to `out`. Thread scope;
/// any number of threads (and CPU threads) may poll one CQ at once, each completion
/// going to exactly one of them. 0 for a handle the caller must not touch (cq_unreachable).
GV_HOST_DEVICE uint32_t poll_cq(const CqHandle& cq, Completion* out, uint32_t max) {
    if (cq_unreachable(cq)) return 0;  // default-constructed, or GPU memory seen from the host
    const bool sys = cq.sys != 0;
    const uint32_t mask = (1u << cq.log_cnt) - 1;
    uint32_t n = 0;
    while (n < max) {
        unsigned long long c = atom::load_acquire(cq.ci, sys);
        const mlx5_cqe64* cqe = &cq.cqes[c & mask];
        uint8_t op_own;
        if (!mlx5::cqe_ready(cqe, c, cq.log_cnt, sys, &op_own)) break;
        Completion x = mlx5::decode_cqe(cqe, op_own);
        // Claim it. A failed CAS means another poller took entry c (and the producer may
        // since have reused the slot), so what we decoded is discarded.
        if (!atom::cas(cq.ci, c, c + 1, sys)) continue;
        cq_update_dbrec(cq, c + 1);
        cq_retire(cq, x);
        out[n++] = x;
    }
    return n;
}

/// True once the software device lost a completion because this CQ was full.
GV_HOST_DEVICE bool cq_overrun(const CqHandle& cq) {
    return cq.overrun && !cq_unreachable(cq) && atom::load_acquire(cq.overrun, cq.sys != 0) != 0;
}

}  // namespace gv::dev
