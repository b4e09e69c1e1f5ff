// The mlx5 completion layer: 64-byte CQEs with an owner bit, written from CqeFields by
// whoever produces completions (the software device, a proxy thread) and decoded into a
// Completion by pollers.
#pragma once

#include <infiniband/mlx5dv.h>

#include <cstring>

#include "gpuverbs/completion.hpp"
#include "gpuverbs/mlx5/wqe.cuh"

namespace gv {

namespace mlx5 {

static_assert(sizeof(mlx5_cqe64) == 64, "CQE is 64 bytes");
static_assert(sizeof(mlx5_err_cqe) == 64, "error CQE is 64 bytes");
static_assert(offsetof(mlx5_cqe64, op_own) == 63, "op_own is the CQE's last byte");

inline constexpr uint32_t kCqeSize = 64;
/// Index of the consumer-index word in a CQ doorbell record (the arm word follows). These
/// two come from rdma-core's provider-internal mlx5.h (MLX5_CQ_SET_CI, MLX5_CQ_ARM_DB);
/// mlx5dv.h does not export them.
inline constexpr int kCqSetCi = 0;
inline constexpr int kCqArmDb = 1;

GV_HOST_DEVICE uint8_t cqe_opcode(uint8_t op_own) { return op_own >> 4; }

/// The owner value a CQE at consumer index `ci` carries once the producer wrote it:
/// it flips on every pass over the ring, so the previous pass's entries read as stale.
GV_HOST_DEVICE uint8_t sw_owner(uint32_t ci, uint32_t log_cnt) {
    return uint8_t((ci >> log_cnt) & 1);
}

/// The aligned word of a CQE that holds op_own (its last byte, the word's high byte): the
/// producer releases it last.
GV_HOST_DEVICE const uint32_t* cqe_owner_word(const mlx5_cqe64* cqe) {
    return reinterpret_cast<const uint32_t*>(cqe) + 15;
}

/// Whether op_own (of the CQE at `ci`) says the CQE holds a new completion.
GV_HOST_DEVICE bool op_own_ready(uint8_t op_own, uint32_t ci, uint32_t log_cnt) {
    return cqe_opcode(op_own) != MLX5_CQE_INVALID && (op_own & MLX5_CQE_OWNER_MASK) == sw_owner(ci, log_cnt);
}

/// Reads op_own with acquire ordering (the producer releases it last), and says whether
/// the CQE at `ci` holds a new completion.
GV_HOST_DEVICE bool cqe_ready(const mlx5_cqe64* cqe, uint32_t ci, uint32_t log_cnt, bool sys,
                              uint8_t* op_own_out) {
    const uint8_t op_own = uint8_t(atom::load_acquire(cqe_owner_word(cqe), sys) >> 24);
    *op_own_out = op_own;
    return op_own_ready(op_own, ci, log_cnt);
}

/// What one CQE says, in host order: the fields write_cqe() encodes. Success CQEs
/// (MLX5_CQE_REQ, MLX5_CQE_RESP_*) carry byte_cnt, imm_be and rqpn; error CQEs
/// (MLX5_CQE_REQ_ERR, MLX5_CQE_RESP_ERR) carry syndrome and vendor_err instead.
struct CqeFields {
    uint8_t cqe_opcode;    ///< MLX5_CQE_REQ, MLX5_CQE_RESP_*, MLX5_CQE_REQ_ERR, MLX5_CQE_RESP_ERR
    uint8_t syndrome;      ///< error CQEs: MLX5_CQE_SYNDROME_*
    uint8_t vendor_err;    ///< error CQEs: vendor syndrome (0 unless a device reported one)
    uint8_t wqe_opcode;    ///< requester CQEs: the WQE's opcode (0 for responder ones)
    uint16_t wqe_counter;  ///< the WQE's index (send) or the receive queue's index
    uint32_t qpn;          ///< the QP the completion belongs to (24 bits)
    uint32_t byte_cnt;
    uint32_t imm_be;       ///< immediate data in wire order, as the WQE carried it
    uint32_t rqpn;         ///< responder CQEs: the sending QP (24 bits)
};

/// Writes the first 60 bytes of one CQE into `slot` (everything but the word that holds
/// wqe_counter, signature and op_own: cqe_last_word()), with plain stores. Bytes of the layout
/// the CQE kind leaves unused are zeroed. No consumer reads them before it acquires the new
/// op_own, which the producer stores after them with release ordering (write_cqe, or a run's
/// one fence and then its last words: the software device's SEND runs); and the producer
/// writes the slot only after the consumer index said the previous CQE there was read.
/// `sys`: the ring is host memory or a NIC/CPU reads it (system-scope ordering).
GV_HOST_DEVICE void write_cqe_body(mlx5_cqe64* slot, const CqeFields& f, bool sys) {
    uint32_t w[16] = {};
    if (f.cqe_opcode == MLX5_CQE_REQ_ERR || f.cqe_opcode == MLX5_CQE_RESP_ERR) {
        mlx5_err_cqe e;
        std::memset(&e, 0, sizeof(e));
        e.syndrome = f.syndrome;
        e.vendor_err_synd = f.vendor_err;
        e.s_wqe_opcode_qpn = to_be32((uint32_t(f.wqe_opcode) << 24) | (f.qpn & 0xffffff));
        std::memcpy(w, &e, sizeof(e));
    } else {
        mlx5_cqe64 c;
        std::memset(&c, 0, sizeof(c));
        c.imm_inval_pkey = f.imm_be;
        c.byte_cnt = to_be32(f.byte_cnt);
        c.sop_drop_qpn = to_be32((uint32_t(f.wqe_opcode) << 24) | (f.qpn & 0xffffff));
        c.flags_rqpn = to_be32(f.rqpn & 0xffffff);
        std::memcpy(w, &c, sizeof(c));
    }
#if GV_DEVICE_CODE
    // Five stores instead of fifteen (the slot is 64-byte aligned).
    (void)sys;
    auto* d4 = reinterpret_cast<uint4*>(slot);
    d4[0] = make_uint4(w[0], w[1], w[2], w[3]);
    d4[1] = make_uint4(w[4], w[5], w[6], w[7]);
    d4[2] = make_uint4(w[8], w[9], w[10], w[11]);
    reinterpret_cast<uint2*>(slot)[6] = make_uint2(w[12], w[13]);
    reinterpret_cast<uint32_t*>(slot)[14] = w[14];
#else
    auto* dst = reinterpret_cast<uint32_t*>(slot);
    for (int i = 0; i < 15; ++i) atom::store_relaxed(&dst[i], w[i], sys);
#endif
}

/// The CQE's last word as it lies in memory: wqe_counter, signature (0) and op_own (the CQE's
/// opcode and the owner bit `owner`). Stored last, with release ordering, it hands the CQE to
/// its consumer.
GV_HOST_DEVICE uint32_t cqe_last_word(const CqeFields& f, uint8_t owner) {
    const uint8_t op_own = uint8_t((f.cqe_opcode << 4) | (owner & MLX5_CQE_OWNER_MASK));
    return uint32_t(to_be16(f.wqe_counter)) | (uint32_t(op_own) << 24);
}

/// Where cqe_last_word() goes in a slot.
GV_HOST_DEVICE uint32_t* cqe_last_word_at(mlx5_cqe64* slot) { return reinterpret_cast<uint32_t*>(slot) + 15; }

/// Writes one CQE into `slot` with the owner bit `owner` (sw_owner() of the slot's
/// producer index): 60 bytes with plain stores (write_cqe_body), then the word holding op_own
/// with a release store, so a consumer that sees the new owner (cqe_ready's acquire) sees the
/// rest. `sys`: the ring is host memory or a NIC/CPU reads it (system-scope ordering).
GV_HOST_DEVICE void write_cqe(mlx5_cqe64* slot, const CqeFields& f, uint8_t owner, bool sys) {
    write_cqe_body(slot, f, sys);
    atom::store_release(cqe_last_word_at(slot), cqe_last_word(f, owner), sys);
}

/// Decodes a CQE that cqe_ready() accepted.
GV_HOST_DEVICE Completion decode_cqe(const mlx5_cqe64* cqe, uint8_t op_own) {
    Completion c{};
    c.cqe_opcode = cqe_opcode(op_own);
    c.wqe_counter = from_be16(cqe->wqe_counter);
    if (c.cqe_opcode == MLX5_CQE_REQ_ERR || c.cqe_opcode == MLX5_CQE_RESP_ERR) {
        const auto* e = reinterpret_cast<const mlx5_err_cqe*>(cqe);
        c.status = e->syndrome;
        c.vendor_err = e->vendor_err_synd;
        uint32_t s = from_be32(e->s_wqe_opcode_qpn);
        c.wqe_opcode = uint8_t(s >> 24);
        c.qpn = s & 0xffffff;
        if (c.status == 0) c.status = 0xff;  // an error CQE never reads as success
        return c;
    }
    uint32_t sdq = from_be32(cqe->sop_drop_qpn);
    c.qpn = sdq & 0xffffff;
    if (c.cqe_opcode == MLX5_CQE_REQ) c.wqe_opcode = uint8_t(sdq >> 24);
    c.byte_len = from_be32(cqe->byte_cnt);
    c.imm = from_be32(cqe->imm_inval_pkey);
    return c;
}

/// Consumer index update in the CQ doorbell record (dbrec[kCqSetCi]): tells the
/// producer these entries may be overwritten. Release: our reads of the CQEs happen first.
GV_HOST_DEVICE void update_cq_dbrec(uint32_t* dbrec, uint32_t ci, bool sys) {
    atom::store_release(&dbrec[kCqSetCi], to_be32(ci & 0xffffff), sys);
}

/// Readable name of a CQE syndrome.
GV_HOST_DEVICE const char* syndrome_name(uint8_t s) {
    switch (s) {
        case 0: return "SUCCESS";
        case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR: return "LOCAL_LENGTH_ERR";
        case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR: return "LOCAL_QP_OP_ERR";
        case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR: return "LOCAL_PROT_ERR";
        case MLX5_CQE_SYNDROME_WR_FLUSH_ERR: return "WR_FLUSH_ERR";
        case MLX5_CQE_SYNDROME_MW_BIND_ERR: return "MW_BIND_ERR";
        case MLX5_CQE_SYNDROME_BAD_RESP_ERR: return "BAD_RESP_ERR";
        case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR: return "LOCAL_ACCESS_ERR";
        case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR: return "REMOTE_INVAL_REQ_ERR";
        case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR: return "REMOTE_ACCESS_ERR";
        case MLX5_CQE_SYNDROME_REMOTE_OP_ERR: return "REMOTE_OP_ERR";
        case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR: return "TRANSPORT_RETRY_EXC_ERR";
        case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR: return "RNR_RETRY_EXC_ERR";
        case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR: return "REMOTE_ABORTED_ERR";
        default: return "UNKNOWN_SYNDROME";
    }
}

}  // namespace mlx5
}  // namespace gv
