// Completions (the CQ's slots; the CQE format is mlx5/cqe.cuh), the receive queue,
// flushing and entering ERROR.
// Part of the software device's executor (gpuverbs/detail/soft/exec.cuh).
#pragma once

#include "gpuverbs/mlx5/cqe.cuh"
#include "gpuverbs/mlx5/wqe.cuh"
#include "gpuverbs/detail/soft/mr_check.cuh"

namespace gv::detail::soft {

// ---- completions --------------------------------------------------------------------

/// A CQ slot taken ahead of its CQE (cq_take_run): its number, and whether the ring had room
/// for it (false: that completion is lost, and the CQ was marked overrun).
struct CqSlot {
    unsigned long long slot;
    bool ok;
};

/// Takes n consecutive slots of the CQ with one RMW, for CQEs written later with cq_push(cq, f,
/// &slot) in slot order: the first slot's number, and in *fit how many of the n had room (the
/// rest are lost completions, and the CQ is marked overrun, as cq_push marks it). Every slot
/// taken must get its CQE (a consumer waits at an empty slot) unless it is lost: the caller
/// takes only slots for completions it will write. Same scopes and checks as cq_push.
GV_HOST_DEVICE unsigned long long cq_take_run(CqState* cq, uint32_t n, uint32_t* fit) {
    const uint32_t log_cnt = cq->log_cnt;
    const uint32_t xgpu = atom::load_relaxed(&cq->xgpu);
    const bool sys = cq->sys != 0;
    const unsigned long long* const ci_ctr = cq->ci;
    uint32_t* const ci_word = &cq->dbrec[mlx5::kCqSetCi];
    uint32_t* const overrun = cq->overrun;
    const uint32_t cnt = 1u << log_cnt;
    const unsigned long long first = rmw_add_relaxed(&cq->prod, (unsigned long long)n, xgpu ? kScopePeer : kScopeGpu);
    auto read_ci = [&] {
        return ci_ctr ? uint32_t(atom::load_acquire(ci_ctr, sys)) & 0xffffff
                      : mlx5::from_be32(atom::load_acquire(ci_word, sys)) & 0xffffff;
    };
    // Slots [first, first + n): the one at first + i is free when fewer than cnt entries are
    // unread before it.
    auto room = [&](uint32_t ci) {
        const uint32_t unread = (uint32_t(first) - ci) & 0xffffff;
        return unread >= cnt ? 0u : (cnt - unread < n ? cnt - unread : n);
    };
    uint32_t k = room(read_ci());
    if (k < n) {
        // As in cq_push: the index may have been read before the slots were taken.
        atom::fence_seq_cst(sys);
        k = room(read_ci());
        if (k < n) atom::store_release(overrun, 1u, sys);
    }
    *fit = k;
    return first;
}

/// Writes one CQE into the CQ (mlx5::write_cqe formats it). Returns false when the ring is
/// full (overrun): the completion is lost, as on a NIC, and the CQ is marked so pollers
/// report it. taken: a slot cq_take_run took for this CQE (one without room is a lost
/// completion now); null takes one here.
GV_HOST_DEVICE bool cq_push(CqState* cq, const mlx5::CqeFields& f, const CqSlot* taken = nullptr) {
    // The CQ's fixed fields, all loaded before the slot's RMW: the RMW and the acquire below
    // are ordered after them anyway (no load moves across an atomic here), so loading them
    // first costs one latency for all, where loading each where it is used cost one each.
    const uint32_t log_cnt = cq->log_cnt;
    const uint32_t xgpu = atom::load_relaxed(&cq->xgpu);
    const bool sys = cq->sys != 0;
    const unsigned long long* const ci_ctr = cq->ci;
    uint32_t* const ci_word = &cq->dbrec[mlx5::kCqSetCi];
    mlx5_cqe64* const cqes = cq->cqes;
    uint32_t* const overrun = cq->overrun;
    const uint32_t cnt = 1u << log_cnt;
    if (taken) {
        if (!taken->ok) return false;
        mlx5::write_cqe(&cqes[taken->slot & (cnt - 1)], f, mlx5::sw_owner(uint32_t(taken->slot), log_cnt), sys);
        return true;
    }
    // Slot reservation: several executors may complete into one CQ at once. System scope once
    // a QP completing here is connected to another GPU (xgpu): the peer's executor on that GPU
    // reserves responder slots here while this GPU's executors reserve theirs; a device-scope
    // RMW is atomic only among one GPU's threads.
    // Relaxed: the slot's number is all the reservation gives (the CQE's stores go where it
    // says, so they cannot precede it); an acquire-release RMW cost the H200 about 0.25 us
    // more per CQE, with the consumer index's load waiting behind it.
    const unsigned long long slot = rmw_add_relaxed(&cq->prod, 1ull, xgpu ? kScopePeer : kScopeGpu);
    // How far the consumers have read: the pollers' consumer index (ci_ctr, advanced by the
    // claim that follows their reads of the entries), or, where the CQ has none here, the
    // doorbell record (24 bits; a stand-in NIC's CQ). The slot is free when fewer than cnt
    // entries are unread. Differences are taken modulo 2^24, exact while cnt <= 2^23. Acquire:
    // the consumer's reads of the slot's last CQE come before the stores below.
    auto read_ci = [&] {
        return ci_ctr ? uint32_t(atom::load_acquire(ci_ctr, sys)) & 0xffffff
                      : mlx5::from_be32(atom::load_acquire(ci_word, sys)) & 0xffffff;
    };
    uint32_t ci = read_ci();
    if (((uint32_t(slot) - ci) & 0xffffff) >= cnt) {
        // The index may have been read before the slot was taken (nothing orders the two):
        // read it again, after both, before calling the ring full.
        atom::fence_seq_cst(sys);
        ci = read_ci();
        if (((uint32_t(slot) - ci) & 0xffffff) >= cnt) {
            atom::store_release(overrun, 1u, sys);
            return false;
        }
    }
    // The owner bit flips with every pass over the ring; the low 32 bits of the slot
    // number carry it (log_cnt < 32).
    mlx5::write_cqe(&cqes[slot & (cnt - 1)], f, mlx5::sw_owner(uint32_t(slot), log_cnt), sys);
    return true;
}

// ---- receive queue ------------------------------------------------------------------

/// A QP's receive side as its peer's executor reads it: the configuration the host wrote
/// before the QP could receive, loaded in one round (rq_view), where each field loaded where
/// it was first used cost a device-memory latency of its own, one after another.
struct RqView {
    const uint32_t* dbrec;  ///< its doorbell records
    const uint8_t* rq;      ///< its receive ring
    uint32_t log_cnt;       ///< log2 of receive WQEs
    uint32_t log_stride;    ///< log2 of bytes per receive WQE
    uint32_t sys;           ///< QpContext::sys: its queues' scope
    uint32_t scope;         ///< state_scope(): the scope of RMWs on its rq_ci
    uint32_t pd;
    MrTable mrs;  ///< its own regions (where its receive lists point)
};

GV_HOST_DEVICE RqView rq_view(const QpContext* r) {
    RqView v;
    v.dbrec = r->dbrec;
    v.rq = r->rq;
    v.log_cnt = r->rq_log_cnt;
    v.log_stride = r->rq_log_stride;
    v.sys = r->sys;
    v.scope = state_scope(r);
    v.pd = r->pd;
    v.mrs = r->local_mrs;
    return v;
}

/// The receive WQE at index idx of the ring v describes.
GV_HOST_DEVICE const mlx5_wqe_data_seg* rq_wqe(const RqView& v, unsigned long long idx) {
    const uint64_t mask = (1ull << v.log_cnt) - 1;
    return reinterpret_cast<const mlx5_wqe_data_seg*>(v.rq + ((idx & mask) << v.log_stride));
}

/// Posted but unconsumed receive WQEs (the producer index is 16 bits in the dbrec).
GV_HOST_DEVICE uint32_t rq_pending(const QpContext* q, unsigned long long ci) {
    return (mlx5::read_rq_dbrec(q->dbrec, q->sys != 0) - uint32_t(ci)) & 0xffff;
}

/// Completes every posted receive of a QP in ERROR with WR_FLUSH_ERR.
GV_HOST_DEVICE void flush_rq(QpContext* q) {
    // rq_ci is claimed by this QP's flushes and by its peer's executor (take_receive): on two
    // GPUs (xgpu) both claim it with system-scope RMWs.
    const uint32_t sc = state_scope(q);
    for (;;) {
        unsigned long long c = atom::load_acquire(&q->rq_ci, sc != kScopeGpu);
        if (rq_pending(q, c) == 0) return;
        if (!rmw_cas(&q->rq_ci, c, c + 1, sc)) continue;
        mlx5::CqeFields f{};
        f.cqe_opcode = MLX5_CQE_RESP_ERR;
        f.syndrome = MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
        f.wqe_counter = uint16_t(c);
        f.qpn = q->qpn;
        cq_push(q->rcq, f);
    }
}

GV_HOST_DEVICE void enter_error(QpContext* q, uint32_t syndrome) {
    // The peer's executor moves q to ERROR too (a responder error): on two GPUs the syndrome's
    // CAS and the state's release are system-scope, so a poller or qp_in_error on q's GPU sees
    // the cause with the state.
    const uint32_t sc = state_scope(q);
    uint32_t expect = 0;
    rmw_cas(&q->syndrome, expect, syndrome, sc);
    atom::store_release(&q->state, uint32_t(QpState::Error), sc != kScopeGpu);
    flush_rq(q);
}

}  // namespace gv::detail::soft
