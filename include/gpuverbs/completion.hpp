// Completion: a decoded completion queue entry, the same for every backend (the mlx5 CQE
// layer, gpuverbs/mlx5/cqe.cuh, decodes into it).
#pragma once

#include <infiniband/mlx5dv.h>

#include <cstdint>

#include "gpuverbs/config.hpp"

namespace gv {

/// A decoded completion, the same for every backend.
struct Completion {
    uint8_t status;      ///< 0 on success, else the mlx5 syndrome (MLX5_CQE_SYNDROME_*).
    uint8_t vendor_err;  ///< vendor syndrome of an error CQE.
    uint8_t cqe_opcode;  ///< MLX5_CQE_REQ, MLX5_CQE_RESP_*, MLX5_CQE_REQ_ERR, ...
    uint8_t wqe_opcode;  ///< for requester completions: the WQE opcode (MLX5_OPCODE_*)
    uint16_t wqe_counter;  ///< WQE index (send) or receive-queue index (receive)
    uint16_t reserved;
    uint32_t qpn;        ///< the local QP the completion belongs to
    uint32_t byte_len;   ///< bytes received (receive completions)
    uint32_t imm;        ///< immediate data, host order (RESP_WR_IMM / RESP_SEND_IMM)
    GV_HOST_DEVICE bool ok() const { return status == 0; }
    GV_HOST_DEVICE bool is_recv() const {
        return cqe_opcode == MLX5_CQE_RESP_WR_IMM || cqe_opcode == MLX5_CQE_RESP_SEND ||
               cqe_opcode == MLX5_CQE_RESP_SEND_IMM || cqe_opcode == MLX5_CQE_RESP_SEND_INV ||
               cqe_opcode == MLX5_CQE_RESP_ERR;
    }
};

}  // namespace gv
