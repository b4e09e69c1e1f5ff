// Completing one executed WQE: the responder's and the requester's CQEs, sq_ci, and the
// states the outcome moves the two QPs to (the NAK rules of IBA's RC responder).
// Part of the software device's executor (gpuverbs/detail/soft/exec.cuh).
#pragma once

#include "gpuverbs/detail/probe.cuh"
#include "gpuverbs/detail/soft/completions.cuh"

namespace gv::detail::soft {

// ---- complete -----------------------------------------------------------------------

/// Where a receive's completion goes: the receiving QP's number and its receive CQ.
struct RespTarget {
    uint32_t qpn;
    CqState* rcq;
};

/// Moves the peer (the responder) to ERROR with this syndrome: a receive completed in error,
/// a receive completion lost to a full CQ, or a request it refused (responder_refused).
GV_HOST_DEVICE void peer_to_error(LeaderCache& lc, uint32_t syndrome) {
    enter_error(lc.r, syndrome);
    lc.peer_up = false;
}

/// The peer's completion of a WQE that consumed one of its receives (WRITE_IMM, SEND):
/// success, or an error CQE that moves the peer to ERROR (so does a full CQ).
/// Returns true when that moved the peer to ERROR. t: the peer's QPN and receive CQ when the
/// caller has them at hand (fast_send_run), else null: loaded here. slot: the CQ slot taken for
/// this CQE ahead (cq_take_run), else null: taken here.
GV_HOST_DEVICE bool complete_responder(QpContext* q, LeaderCache& lc, const Outcome& o, const RespTarget* t,
                                       const CqSlot* slot) {
    QpContext* r = lc.r;
    mlx5::CqeFields f{};
    f.qpn = t ? t->qpn : r->qpn;
    f.rqpn = q->qpn;
    f.wqe_counter = o.rq_index;
    if (o.resp_syndrome) {
        f.cqe_opcode = MLX5_CQE_RESP_ERR;
        f.syndrome = o.resp_syndrome;
    } else {
        f.cqe_opcode = o.resp_kind;
        f.byte_cnt = o.byte_len;
        f.imm_be = o.imm_be;
    }
    if (!cq_push(t ? t->rcq : r->rcq, f, slot) || o.resp_syndrome) {
        peer_to_error(lc, o.resp_syndrome ? uint32_t(o.resp_syndrome) : uint32_t(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR));
        return true;
    }
    return false;
}

/// The requester's completion: always for an error, for success when signaled. Returns
/// false when the CQ was full (the completion is lost).
GV_HOST_DEVICE bool complete_requester(const LeaderCache& lc, const Outcome& o) {
    if (!o.req_syndrome && !o.signaled) return true;
    mlx5::CqeFields f{};
    f.qpn = lc.cfg.qpn;
    f.wqe_counter = o.wqe_index;
    f.wqe_opcode = o.opcode;
    if (o.req_syndrome) {
        f.cqe_opcode = MLX5_CQE_REQ_ERR;
        f.syndrome = o.req_syndrome;
    } else {
        f.cqe_opcode = MLX5_CQE_REQ;
        f.byte_cnt = o.byte_len;
    }
    return cq_push(lc.cfg.scq, f);
}

/// True when the requester's syndrome is a NAK the responder sent for a request it refused
/// on its own checks, with no receive of its own consumed: a remote access error (rkey, PD,
/// bounds, the region's or the QP's access rights) or an invalid request (a misaligned
/// atomic). The responder QP goes to ERROR for these.
///
/// Why (InfiniBand Architecture Specification vol. 1, chapter 9): the responder's error
/// handling for RC (9.9.3, responder side error behaviour, and its table summarising the
/// responder's error classes) sorts what a responder detects into classes. A PSN sequence
/// error (class B) and receiver-not-ready NAK the request and change nothing else. An invalid
/// request (a misaligned atomic, an unsupported opcode, a length beyond the receive), a
/// remote access error (R_Key, bounds, rights) and a remote operational error are the classes
/// that NAK the request *and* put the responder's QP in the Error state, completing the
/// receive WQE in use (if any) in error, so that everything behind it flushes. When no receive
/// WQE was in use there is no CQE to carry the error: the spec reports it as an affiliated
/// asynchronous error of the QP (11.6.3: "invalid request" and "local access violation"
/// work queue errors, verbs' IBV_EVENT_QP_REQ_ERR / IBV_EVENT_QP_ACCESS_ERR), again with the
/// QP in Error. ConnectX (mlx5) moves a responder QP to ERROR on the remote access errors it
/// detects, and Soft-RoCE does too (its responder calls these "class A/C" errors); the
/// differential check (tests/traffic/differential.cpp) compares the two devices' outcomes.
GV_HOST_DEVICE bool responder_refused(uint8_t req_syndrome) {
    return req_syndrome == MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR ||
           req_syndrome == MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR;
}

/// Moves the leader's view past the WQE prepare() planned (sq_ci as the leader counts it, and
/// what is left published), before its completion: drain() plans the next WQE from there while
/// the group copies this one. Nothing another agent sees changes here (complete() stores sq_ci).
/// bbs: the basic blocks stepped past (a run of SENDs: one each).
GV_HOST_DEVICE void advance(LeaderCache& lc, uint32_t bbs) {
    lc.ci += bbs;
    lc.pending -= bbs;
}
GV_HOST_DEVICE void advance(LeaderCache& lc, const Outcome& o) { advance(lc, o.bbs); }

/// The requester's side of completing a WQE (or a run's last SEND) that advance() counted:
/// its CQE, sq_ci, and ERROR for a failed WQE or a requester completion lost to a full CQ.
/// Leader only. Returns true when that moved this QP to ERROR.
GV_HOST_DEVICE bool finish_requester(QpContext* q, LeaderCache& lc, const Outcome& o) {
    const bool ok = complete_requester(lc, o);
    GV_EXEC_STAMP(kStampCqe);
    // Only the lock holder advances sq_ci (to lc.ci: advance() counted this WQE); the lock's
    // release store publishes it.
    atom::store_relaxed(&q->sq_ci, lc.ci, lc.scope != kScopeGpu);
    const bool failed = o.req_syndrome && o.req_syndrome != MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
    bool moved = false;
    if (failed || !ok) {
        enter_error(q, failed ? uint32_t(o.req_syndrome) : uint32_t(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR));
        lc.state = QpState::Error;
        moved = true;
    }
    GV_EXEC_STAMP(kStampFinished);
    return moved;
}

/// Completes a WQE that advance() stepped past, after the group copied its data: CQEs, sq_ci,
/// and ERROR for a failed WQE or a lost completion. Leader only. Returns true when that moved
/// either QP to ERROR (what the leader read of them at the start of the drain is then stale).
/// t, resp_slot: as complete_responder's.
GV_HOST_DEVICE bool complete(QpContext* q, LeaderCache& lc, const Outcome& o, const RespTarget* t = nullptr,
                             const CqSlot* resp_slot = nullptr) {
    bool moved = false;
    if (o.resp_kind && lc.r) {
        moved = complete_responder(q, lc, o, t, resp_slot);
        GV_EXEC_STAMP(kStampRespCqe);
    }
    // A request the responder refused (NAK) without consuming a receive (complete_responder
    // handled those, with their error CQE): the responder QP goes to ERROR too
    // (responder_refused says why). Its syndrome is the NAK's; its receives flush.
    if (!o.resp_kind && lc.r && responder_refused(o.req_syndrome)) {
        peer_to_error(lc, o.req_syndrome);
        moved = true;
    }
    return finish_requester(q, lc, o) || moved;
}

/// Completes the WQE prepare() planned, after the group copied its data. Leader only.
GV_HOST_DEVICE void finish(QpContext* q, LeaderCache& lc, const Outcome& o) {
    advance(lc, o);
    complete(q, lc, o);
}

}  // namespace gv::detail::soft
