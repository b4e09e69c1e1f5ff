// Polling a completion queue from kernels or CPU threads (the handle: device/handles.hpp).
#pragma once

#include <type_traits>

#include "gpuverbs/detail/probe.cuh"
#include "gpuverbs/device/atomic.cuh"
#include "gpuverbs/device/handles.hpp"
#include "gpuverbs/device/status.cuh"
#include "gpuverbs/mlx5/cqe.cuh"

namespace gv::dev {

GV_HOST_DEVICE const CqQpSlot* cq_find_slot(const CqHandle& cq, uint32_t qpn) {
    if (!cq.slots) return nullptr;
    for (uint32_t i = 0; i <= cq.slot_mask; ++i) {
        const CqQpSlot* s = &cq.slots[(qpn + i) & cq.slot_mask];
        if (s->qpn == qpn) return s;
        if (s->qpn == 0) return nullptr;
    }
    return nullptr;
}

/// Frees the queue slots up to and including the WQE a completion reports (and keeps the
/// syndrome of a QP's first error where the slot asks for it).
///
/// Pollers claim completions in order but may retire them in any order, so a completion
/// can arrive here after a later one of its QP was retired. Rebuilding its position from
/// the 16-bit counter then gives a value 2^16 ahead (freeing slots whose WQEs have not
/// executed), so such a completion frees nothing: the later retirement covered it.
/// Unretired entries lie less than 2^15 ahead of the retirement point (rings hold at
/// most 2^15 entries / WQEBBs), retired ones up to 2^15 behind it.
GV_HOST_DEVICE void cq_retire(const CqHandle& cq, const Completion& c, const CqQpSlot& hint) {
    // The slot at the QP number's hash position, loaded whole before the completion was
    // claimed (poll_cq), is the QP's in the common case; else it is looked up.
    const CqQpSlot* s = hint.qpn == c.qpn ? &hint : cq_find_slot(cq, c.qpn);
    if (!s) return;
    // The QP's first error other than a flush: why it entered ERROR (kept once).
    if (s->syndrome && !c.ok() && c.status != MLX5_CQE_SYNDROME_WR_FLUSH_ERR) {
        uint32_t none = 0;
        atom::cas(s->syndrome, none, uint32_t(c.status), cq.sys != 0);
    }
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
        auto* ctrl = reinterpret_cast<const uint32_t*>(s->sq + ((pos * 64) & (ring - 1)));
        // The ctrl segment's second word (QP number, ds), with acquire: the re-check below
        // cannot be performed before it (a fence after a plain load cost as much again).
        const uint32_t ds = mlx5::from_be32(atom::load_acquire(&ctrl[1])) & 0x3f;
        if (atom::load_acquire(s->sq_retired) > pos) return;
        atom::fetch_max(s->sq_retired, pos + (ds ? mlx5::ds_to_bbs(ds) : 1));
    }
}

/// The same, looking the QP's slot up.
GV_HOST_DEVICE void cq_retire(const CqHandle& cq, const Completion& c) { cq_retire(cq, c, CqQpSlot{}); }

/// Publishes the consumer index in the doorbell record, never moving it backwards when
/// several pollers race (24-bit field, compared modulo 2^24). The poller that claimed entry
/// ci - 1 calls it: in order, the record holds ci - 1, so one CAS from there, without a load.
GV_HOST_DEVICE void cq_update_dbrec(const CqHandle& cq, unsigned long long ci) {
    mlx5::advance_dbrec_from(&cq.dbrec[mlx5::kCqSetCi], uint32_t(ci - 1), uint32_t(ci), 24, cq.sys != 0);
}

/// The slot at qpn's hash position, every field loaded at once (the table is written before
/// any of its QPs completes); qpn 0 when there is no table.
GV_HOST_DEVICE CqQpSlot cq_slot_at(const CqHandle& cq, uint32_t qpn) {
    if (!cq.slots) return CqQpSlot{};
    return cq.slots[qpn & cq.slot_mask];
}

/// Polls up to `max` completions; returns how many were written to `out`. Thread scope;
/// any number of threads (and CPU threads) may poll one CQ at once, each completion
/// going to exactly one of them.
GV_HOST_DEVICE uint32_t poll_cq(const CqHandle& cq, Completion* out, uint32_t max) {
    if (cq.cqes == nullptr || cq.ci == nullptr) return 0;  // default-constructed handle
#if !GV_DEVICE_CODE
    if (!cq.host_reachable) return 0;  // GPU memory: a CPU thread cannot read the ring
#endif
    GV_EXEC_STAMP(detail::kStampPollEnter);
    const bool sys = cq.sys != 0;
    const uint32_t mask = (1u << cq.log_cnt) - 1;
    uint32_t n = 0;
    while (n < max) {
        unsigned long long c = atom::load_acquire(cq.ci, sys);
        const mlx5_cqe64* cqe = &cq.cqes[c & mask];
        uint8_t op_own;
        if (!mlx5::cqe_ready(cqe, c, cq.log_cnt, sys, &op_own)) break;
        Completion x = mlx5::decode_cqe(cqe, op_own);
        // Issued before the claim, so that their latency overlaps the CAS's.
        const CqQpSlot slot = cq_slot_at(cq, x.qpn);
        GV_EXEC_STAMP(detail::kStampPollReady);
        // Claim it. A failed CAS means another poller took entry c (and the producer may
        // since have reused the slot), so what we decoded is discarded.
        if (!atom::cas(cq.ci, c, c + 1, sys)) continue;
        GV_EXEC_STAMP(detail::kStampPollClaimed);
        cq_update_dbrec(cq, c + 1);
        GV_EXEC_STAMP(detail::kStampPollDbrec);
        cq_retire(cq, x, slot);
        GV_EXEC_STAMP(detail::kStampPollRetired);
        out[n++] = x;
    }
    return n;
}

/// True once the software device lost a completion because this CQ was full. From a CPU
/// thread, false for a CQ in GPU memory (unreadable there; kernels see the flag).
GV_HOST_DEVICE bool cq_overrun(const CqHandle& cq) {
#if !GV_DEVICE_CODE
    if (!cq.host_reachable) return false;  // GPU memory: a CPU thread cannot read the flag
#endif
    return cq.overrun && atom::load_acquire(cq.overrun, cq.sys != 0) != 0;
}

}  // namespace gv::dev
