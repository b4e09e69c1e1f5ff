// Completions (CQE writing), the receive queue, flushing and entering ERROR.
// Part of the software device's executor (gpuverbs/soft/exec.cuh).
#pragma once

#include "gpuverbs/mlx5/cqe.cuh"
#include "gpuverbs/mlx5/wqe.cuh"
#include "gpuverbs/detail/soft/mr_check.cuh"

namespace gv::detail::soft {

// ---- completions --------------------------------------------------------------------

struct CqeFields {
    uint8_t cqe_opcode;
    uint8_t syndrome;
    uint8_t wqe_opcode;
    uint16_t wqe_counter;
    uint32_t qpn;
    uint32_t byte_cnt;
    uint32_t imm_be;
    uint32_t rqpn;
};

/// Writes one CQE. Returns false when the ring is full (overrun): the completion is
/// lost, as on a NIC, and the CQ is marked so pollers report it.
GV_HOST_DEVICE bool cq_push(CqState* cq, const CqeFields& f) {
    const uint32_t cnt = 1u << cq->log_cnt;
    // Slot reservation: several executors may complete into one CQ at once.
    unsigned long long slot = atom::fetch_add(&cq->prod, 1ull);
    // The consumer publishes how far it has read in the doorbell record (24 bits); the
    // slot is free when fewer than cnt entries are unread. Differences are taken modulo
    // 2^24, exact while cnt <= 2^23.
    uint32_t ci = mlx5::from_be32(atom::load_acquire(&cq->dbrec[mlx5::kCqSetCi], cq->sys != 0)) &
                  0xffffff;
    if (((uint32_t(slot) - ci) & 0xffffff) >= cnt) {
        atom::store_release(cq->overrun, 1u, cq->sys != 0);
        return false;
    }
    uint32_t w[16] = {};
    if (f.cqe_opcode == MLX5_CQE_REQ_ERR || f.cqe_opcode == MLX5_CQE_RESP_ERR) {
        mlx5_err_cqe e;
        std::memset(&e, 0, sizeof(e));
        e.syndrome = f.syndrome;
        e.s_wqe_opcode_qpn = mlx5::to_be32((uint32_t(f.wqe_opcode) << 24) | (f.qpn & 0xffffff));
        std::memcpy(w, &e, sizeof(e));
    } else {
        mlx5_cqe64 c;
        std::memset(&c, 0, sizeof(c));
        c.imm_inval_pkey = f.imm_be;
        c.byte_cnt = mlx5::to_be32(f.byte_cnt);
        c.sop_drop_qpn = mlx5::to_be32((uint32_t(f.wqe_opcode) << 24) | (f.qpn & 0xffffff));
        c.flags_rqpn = mlx5::to_be32(f.rqpn & 0xffffff);
        std::memcpy(w, &c, sizeof(c));
    }
    auto* dst = reinterpret_cast<uint32_t*>(&cq->cqes[slot & (cnt - 1)]);
    for (int i = 0; i < 15; ++i) atom::store_relaxed(&dst[i], w[i], cq->sys != 0);
    // The last word holds wqe_counter, signature and op_own. Release: the consumer that
    // acquires op_own sees the other 60 bytes.
    uint8_t owner = uint8_t((slot >> cq->log_cnt) & 1);
    uint8_t op_own = uint8_t((f.cqe_opcode << 4) | owner);
    uint32_t last = uint32_t(mlx5::to_be16(f.wqe_counter)) | (uint32_t(op_own) << 24);
    atom::store_release(&dst[15], last, cq->sys != 0);
    return true;
}

// ---- receive queue ------------------------------------------------------------------

GV_HOST_DEVICE const mlx5_wqe_data_seg* rq_wqe(const QpContext* q, unsigned long long idx) {
    uint64_t mask = (1ull << q->rq_log_cnt) - 1;
    return reinterpret_cast<const mlx5_wqe_data_seg*>(q->rq + ((idx & mask) << q->rq_log_stride));
}

/// Posted but unconsumed receive WQEs (the producer index is 16 bits in the dbrec).
GV_HOST_DEVICE uint32_t rq_pending(const QpContext* q, unsigned long long ci) {
    return (mlx5::read_rq_dbrec(q->dbrec, q->sys != 0) - uint32_t(ci)) & 0xffff;
}

/// Completes every posted receive of a QP in ERROR with WR_FLUSH_ERR.
GV_HOST_DEVICE void flush_rq(QpContext* q) {
    for (;;) {
        unsigned long long c = atom::load_acquire(&q->rq_ci);
        if (rq_pending(q, c) == 0) return;
        if (!atom::cas(&q->rq_ci, c, c + 1)) continue;
        CqeFields f{};
        f.cqe_opcode = MLX5_CQE_RESP_ERR;
        f.syndrome = MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
        f.wqe_counter = uint16_t(c);
        f.qpn = q->qpn;
        cq_push(q->rcq, f);
    }
}

GV_HOST_DEVICE void enter_error(QpContext* q, uint32_t syndrome) {
    uint32_t expect = 0;
    atom::cas(&q->syndrome, expect, syndrome);
    atom::store_release(&q->state, uint32_t(QpState::Error));
    flush_rq(q);
}

}  // namespace gv::detail::soft
