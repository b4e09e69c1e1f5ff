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
    // Release, and nothing waits for it: the slots' reads (the ctrl word below, the CQE's)
    // come before a poster that acquires the retirement point writes into them.
    if (c.is_recv()) {
        if (!s->rq_retired) return;
        unsigned long long r = atom::load_acquire(s->rq_retired);
        uint32_t ahead = (uint32_t(c.wqe_counter) - uint32_t(r)) & 0xffff;
        if (ahead >= 0x8000) return;  // already retired by a later completion
        atom::max_release(s->rq_retired, r + ahead + 1);
    } else {
        if (!s->sq_retired) return;
        // The WQE's ctrl segment is at the counter's position in the ring: positions agree
        // with the 16-bit counter modulo 2^16, and the ring's size (at most 2^15 WQEBBs, a power
        // of two) divides that. So it is read first, without waiting for the retirement point,
        // and the retirement point after it (acquire: in that order). If that point is still at
        // or before the WQE, it was there when ds was read too (it only moves forward), so the
        // slot still held this WQE, not a poster's next one. If it moved past (another poller
        // retired a later completion, and a poster may have reused the slot), that retirement
        // covered this WQE and ds is not used. Before (2026-12-04) the point was read first and
        // again after ds: one dependent load more on every poll (`gv_probe_path`).
        const uint64_t ring = 64ull << s->sq_log_bb;
        auto* ctrl = reinterpret_cast<const uint32_t*>(s->sq + ((uint64_t(c.wqe_counter) * 64) & (ring - 1)));
        // The ctrl segment's second word (QP number, ds), with acquire: the retirement point's
        // load below cannot be performed before it.
        const uint32_t ds = mlx5::from_be32(atom::load_acquire(&ctrl[1])) & 0x3f;
        const unsigned long long r = atom::load_acquire(s->sq_retired);
        const uint32_t ahead = (uint32_t(c.wqe_counter) - uint32_t(r)) & 0xffff;
        if (ahead >= 0x8000) return;  // already retired by a later completion
        atom::max_release(s->sq_retired, r + ahead + (ds ? mlx5::ds_to_bbs(ds) : 1));
    }
}

/// The same, looking the QP's slot up.
GV_HOST_DEVICE void cq_retire(const CqHandle& cq, const Completion& c) { cq_retire(cq, c, CqQpSlot{}); }

/// Publishes the consumer index in the doorbell record, never moving it backwards when
/// several pollers race (24-bit field, compared modulo 2^24). The poller that claimed entries
/// [from, ci) calls it: in order, the record holds `from`, so one CAS from there, without a
/// load. Pollers decode what they claim before the claim, so the record may pass entries
/// another poller claimed and has not yet published. Not called where the CQ has no record
/// (the software device reads `ci`).
GV_HOST_DEVICE void cq_update_dbrec(const CqHandle& cq, unsigned long long from, unsigned long long ci) {
    mlx5::advance_dbrec_from(&cq.dbrec[mlx5::kCqSetCi], uint32_t(from), uint32_t(ci), 24, cq.sys != 0);
}

/// The slot at qpn's hash position, every field loaded at once (the table is written before
/// any of its QPs completes); qpn 0 when there is no table.
GV_HOST_DEVICE CqQpSlot cq_slot_at(const CqHandle& cq, uint32_t qpn) {
    if (!cq.slots) return CqQpSlot{};
    return cq.slots[qpn & cq.slot_mask];
}

/// Completions one turn of poll_cq takes with one claim at most: the entry at the consumer
/// index and the ready ones after it.
inline constexpr uint32_t kPollBatch = 8;

/// Polls up to `max` completions; returns how many were written to `out`. Thread scope;
/// any number of threads (and CPU threads) may poll one CQ at once, each completion
/// going to exactly one of them.
///
/// Each turn takes the ready entries at the consumer index together (up to kPollBatch and
/// what the caller still takes): their owner words are read at once (relaxed, then one acquire
/// fence for all), they are decoded, claimed with one CAS, published in the doorbell record
/// with one CAS, and retired once per run of one QP's completions (a retirement frees every
/// slot up to its WQE, so the last of a run covers the ones before it). Taken one at a time,
/// each completion cost a poller about 3.3 us on the H200 (`gv_probe_path`), one after another.
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
        // The entries after it that are ready too. A ring smaller than the batch wraps onto
        // entries of this pass, whose owner bit then does not match: they are not taken.
        const uint32_t room = max - n < kPollBatch ? max - n : kPollBatch;
        uint8_t own[kPollBatch];
        own[0] = op_own;
        uint32_t k = 1;
        if (room > 1) {
GV_UNROLL
            for (uint32_t i = 1; i < kPollBatch; ++i)
                if (i < room) own[i] = uint8_t(atom::load_relaxed(mlx5::cqe_owner_word(&cq.cqes[(c + i) & mask]), sys) >> 24);
GV_UNROLL
            for (uint32_t i = 1; i < kPollBatch; ++i)
                if (i < room && k == i && mlx5::op_own_ready(own[i], uint32_t(c + i), cq.log_cnt)) k = i + 1;
            // Acquire for the owner words read relaxed: the rest of those CQEs (released before
            // their owner byte by the producer) is read after this.
            if (k > 1) atom::fence_acquire(sys);
        }
        for (uint32_t i = 0; i < k; ++i) out[n + i] = mlx5::decode_cqe(&cq.cqes[(c + i) & mask], own[i]);
        // Issued before the claim, so that their latency overlaps the CAS's: the slot of the
        // batch's last completion (most batches are one QP's).
        const CqQpSlot slot = cq_slot_at(cq, out[n + k - 1].qpn);
        GV_EXEC_STAMP(detail::kStampPollReady);
        // Claim them. A failed CAS means another poller took entry c (and the producer may
        // since have reused the slots), so what we decoded is discarded.
        if (!atom::cas(cq.ci, c, c + k, sys)) continue;
        GV_EXEC_STAMP(detail::kStampPollClaimed);
        if (cq.dbrec) cq_update_dbrec(cq, c, c + k);
        GV_EXEC_STAMP(detail::kStampPollDbrec);
        for (uint32_t i = 0; i < k; ++i) {
            const Completion& x = out[n + i];
            // Covered by the next one's retirement: the same QP and queue, and nothing of its
            // own to keep (an error's syndrome is kept by its own cq_retire).
            const bool covered =
                i + 1 < k && x.ok() && out[n + i + 1].qpn == x.qpn && out[n + i + 1].is_recv() == x.is_recv();
            if (!covered) cq_retire(cq, x, slot);
        }
        GV_EXEC_STAMP(detail::kStampPollRetired);
        n += k;
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
