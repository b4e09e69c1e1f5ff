// Per WQE of the send queue, the leader's first step: prepare() reads the WQE at sq_ci,
// validates it and plans its work (regions, an atomic, the copies, a SEND's receive), and the
// actions the executor's loop takes on its answer (Action). Part of the software device's
// executor (gpuverbs/detail/soft/exec.cuh: drain() calls prepare(), copies the plan and
// completes the WQE).
#pragma once

#include "gpuverbs/detail/probe.cuh"
#include "gpuverbs/detail/soft/batch.cuh"
#include "gpuverbs/detail/soft/plan.cuh"
#include "gpuverbs/mlx5/wqe_reader.cuh"

namespace gv::detail::soft {

// ---- the send-queue executor --------------------------------------------------------
//
// Per WQE the leader reads, validates and plans (prepare), the group copies (drain), and the
// leader completes (finish):
//   next_published  is a WQE published at sq_ci? (the doorbell record, once per drain)
//   check_header    size, flush in ERROR, ctrl segment (mlx5::WqeReader's checks)
//   run_atomic      an atomic's regions, and the 8-byte operation itself
//   resolve_local   the gather (READ: scatter) list's regions, or the inline payload
//   plan_rdma       the peer's region and access; the copies of a WRITE or READ
//   take_receive    claim the peer's next receive, under the RNR rules
//   plan_scatter    the copies of a SEND, over the receive's scatter list
//   finish          responder and requester CQEs, sq_ci, ERROR (complete.cuh)

enum Action : uint32_t {
    kStop = 0,     ///< nothing (more) to execute now
    kExecute = 1,  ///< copy the plan's segments, then finish the WQE
    kRnrWait = 2,  ///< the WQE at sq_ci waits for a receive on the peer
    /// Nothing more in this drain's batch, but more is published: the group staged only part
    /// of it (stage_wqes). progress() drains again before it gives the QP back.
    kMore = 3,
    /// The leader's warp executes a run of same-shape WQEs (warp_run.cuh), then the leader goes
    /// on (drain() only: never returned).
    kWarpRun = 4,
};

/// Reads, validates and plans the WQE at sq_ci (an atomic is performed here). Leader only.
/// kExecute with p.out.req_syndrome set: the WQE fails, and finish() completes it so.
/// ahead: drain() plans this WQE while the group still copies the one before it, which is not
/// complete yet; then only a WRITE, a READ or a SEND is planned (kStop for the rest, which
/// prepare() plans again in its turn): planning those changes nothing another agent sees (a
/// SEND's receive is looked at here and claimed when the plan is handed out: peek_receive,
/// claim_planned), where an atomic is performed here and a WRITE_IMM's failure path claims.
/// ahead: null, or (planning ahead) where the claim to make is left: 1 + the peer's receive
/// index a SEND was planned on, else 0. Kept by the leader, not in the Plan: the group's
/// copy of a plan (in shared memory) stays as it was, and so does its layout.
/// send_ahead: false leaves SENDs out of planning ahead too (the group would rather take them in a
/// run in their turn: send_run.cuh).
GV_HOST_DEVICE uint32_t prepare(QpContext* q, LeaderCache& lc, Plan& p, unsigned long long* ahead = nullptr,
                                bool send_ahead = true) {
    p.nseg = 0;
    p.sys = 0;
    p.run = 0;
    if (ahead) *ahead = 0;
    if (!next_published(lc)) return kStop;
    GV_EXEC_STAMP(kStampPublished);
    // On two GPUs every byte this WQE stores (into the peer's GPU, or into our own memory
    // while this group runs on the peer's GPU) is observed by threads of the other GPU: the
    // fence after the copy is system-scope (drain()).
    p.sys = lc.scope;
    const unsigned long long staged = lc.ci - lc.stage_ci;
    const mlx5::WqeReader w =
        staged < lc.stage_n
            ? mlx5::WqeReader(lc.cfg.sq, lc.cfg.sq_log_bb, lc.ci, static_cast<const uint8_t*>(lc.stage) + staged * 64)
            : mlx5::WqeReader(lc.cfg.sq, lc.cfg.sq_log_bb, lc.ci);
    Outcome o = outcome_of(w, lc.ci);
    auto fail = [&](uint8_t syn) -> uint32_t {
        o.req_syndrome = syn;
        p.nseg = 0;
        p.out = o;
        return kExecute;
    };
    if (uint8_t s = check_header(q, lc, w, o)) return fail(s);
    const uint8_t op = w.opcode();
    if (ahead && op != MLX5_OPCODE_RDMA_WRITE && op != MLX5_OPCODE_RDMA_READ && (!send_ahead || !mlx5::is_send(op)))
        return kStop;
    if (op == MLX5_OPCODE_NOP) {
        p.out = o;
        return kExecute;
    }
    // Remote end: a QP of ours connected back to this one, ready to receive.
    if (!lc.peer_up) return fail(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
    const mlx5::Violation v = w.check_body(lc.cfg.max_inline, kMaxSge);
    // The peer's region first: its loads then overlap the local lookup's (mr_fill).
    if (mlx5::has_raddr(op))
        mr_prefetch(lc.cfg.remote_mrs, lc.remote, w.raddr().rkey, lc.cfg.peer_pd, remote_foreign(lc.cfg));
    GV_EXEC_STAMP(kStampChecked);

    if (mlx5::is_atomic(op)) {
        if (uint8_t s = v.syndrome ? v.syndrome : run_atomic(lc, w, p, o)) return fail(s);
        p.out = o;
        return kExecute;
    }

    // The peer's receive side, for a WQE that consumes a receive: loaded here, so that its
    // loads overlap the local region's.
    RqView rv{};
    if (mlx5::consumes_receive(op)) rv = rq_view(lc.r);
    Gather g;
    if (uint8_t s = resolve_local(lc, w, v, g, p)) return fail(s);
    GV_EXEC_STAMP(kStampLocal);
    o.byte_len = uint32_t(g.total);
    if (mlx5::has_raddr(op)) {
        if (uint8_t s = plan_rdma(lc, w.raddr(), op == MLX5_OPCODE_RDMA_READ, g, p)) {
            // A WRITE_IMM the responder refuses on its memory: the receive WQE it would have
            // consumed (if one is posted: no RNR wait for a request that fails anyway) is
            // completed in error, "local access error" (a protection error on a local buffer
            // while processing a WRITE with immediate: verbs' IBV_WC_LOC_ACCESS_ERR, mlx5's
            // LOCAL_ACCESS_ERR), and the responder goes to ERROR (complete_responder).
            unsigned long long rc = 0;
            const bool rsys = rv.scope != kScopeGpu;  // its rq_ci: take_receive's scope
            if (op == MLX5_OPCODE_RDMA_WRITE_IMM && rq_pending(lc.r, atom::load_acquire(&lc.r->rq_ci, rsys)) != 0 &&
                take_receive(q, lc.r, rv, &rc) == Receive::Taken) {
                o.rq_index = uint16_t(rc);
                o.resp_kind = MLX5_CQE_RESP_WR_IMM;
                o.resp_syndrome = MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR;
            }
            return fail(s);
        }
    }
    GV_EXEC_STAMP(kStampRemote);
    if (mlx5::consumes_receive(op)) {
        unsigned long long rc = 0;
        if (ahead) {
            // A SEND planned ahead: the receive it would take, claimed when handed out.
            if (!peek_receive(lc.r, rv, &rc)) return kStop;
            *ahead = rc + 1;
        } else {
            const Receive got = take_receive(q, lc.r, rv, &rc);
            if (got == Receive::Wait) return kRnrWait;
            if (got == Receive::Exceeded) return fail(MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
        }
        o.rq_index = uint16_t(rc);
        o.resp_kind = op == MLX5_OPCODE_RDMA_WRITE_IMM ? MLX5_CQE_RESP_WR_IMM
                      : op == MLX5_OPCODE_SEND_IMM     ? MLX5_CQE_RESP_SEND_IMM
                                                       : MLX5_CQE_RESP_SEND;
        if (mlx5::is_send(op)) {
            if (uint8_t s = plan_scatter(lc, rv, rc, g, p, o)) return fail(s);
        }
        GV_EXEC_STAMP(kStampReceive);
    }
    p.out = o;
    return kExecute;
}

}  // namespace gv::detail::soft
