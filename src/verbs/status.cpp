#include "verbs/status.hpp"

#include <infiniband/mlx5dv.h>

namespace gv::detail::verbs {

uint8_t wc_status_to_syndrome(ibv_wc_status s) {
    switch (s) {
    case IBV_WC_SUCCESS: return 0;
    case IBV_WC_LOC_LEN_ERR: return MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
    case IBV_WC_LOC_QP_OP_ERR: return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
    case IBV_WC_LOC_PROT_ERR: return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
    case IBV_WC_WR_FLUSH_ERR: return MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
    case IBV_WC_MW_BIND_ERR: return MLX5_CQE_SYNDROME_MW_BIND_ERR;
    case IBV_WC_BAD_RESP_ERR: return MLX5_CQE_SYNDROME_BAD_RESP_ERR;
    case IBV_WC_LOC_ACCESS_ERR: return MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR;
    case IBV_WC_REM_INV_REQ_ERR: return MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR;
    case IBV_WC_REM_ACCESS_ERR: return MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
    case IBV_WC_REM_OP_ERR: return MLX5_CQE_SYNDROME_REMOTE_OP_ERR;
    case IBV_WC_RETRY_EXC_ERR: return MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR;
    case IBV_WC_RNR_RETRY_EXC_ERR: return MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR;
    case IBV_WC_REM_ABORT_ERR: return MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR;
    // No mlx5 syndrome of their own: the nearest class.
    case IBV_WC_REM_INV_RD_REQ_ERR: return MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR;  // a bad request at the responder
    case IBV_WC_RESP_TIMEOUT_ERR: return MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR;  // no response came
    case IBV_WC_LOC_EEC_OP_ERR:    // RD transport only
    case IBV_WC_LOC_RDD_VIOL_ERR:  // RD transport only
    case IBV_WC_INV_EECN_ERR:      // RD transport only
    case IBV_WC_INV_EEC_STATE_ERR: // RD transport only
    case IBV_WC_FATAL_ERR:
    case IBV_WC_GENERAL_ERR:
    case IBV_WC_TM_ERR:
    case IBV_WC_TM_RNDV_INCOMPLETE:
        break;
    }
    return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;  // also for values past the enum
}

ibv_wc_status syndrome_to_wc_status(uint8_t syndrome) {
    switch (syndrome) {
    case 0: return IBV_WC_SUCCESS;
    case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR: return IBV_WC_LOC_LEN_ERR;
    case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR: return IBV_WC_LOC_QP_OP_ERR;
    case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR: return IBV_WC_LOC_PROT_ERR;
    case MLX5_CQE_SYNDROME_WR_FLUSH_ERR: return IBV_WC_WR_FLUSH_ERR;
    case MLX5_CQE_SYNDROME_MW_BIND_ERR: return IBV_WC_MW_BIND_ERR;
    case MLX5_CQE_SYNDROME_BAD_RESP_ERR: return IBV_WC_BAD_RESP_ERR;
    case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR: return IBV_WC_LOC_ACCESS_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR: return IBV_WC_REM_INV_REQ_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR: return IBV_WC_REM_ACCESS_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_OP_ERR: return IBV_WC_REM_OP_ERR;
    case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR: return IBV_WC_RETRY_EXC_ERR;
    case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR: return IBV_WC_RNR_RETRY_EXC_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR: return IBV_WC_REM_ABORT_ERR;
    default: return IBV_WC_GENERAL_ERR;
    }
}

bool wc_status_exact(ibv_wc_status s) {
    return syndrome_to_wc_status(wc_status_to_syndrome(s)) == s;
}

const char* syndrome_name(uint8_t syndrome) {
    switch (syndrome) {
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

const char* wc_status_name(ibv_wc_status s) {
    switch (s) {
#define GV_WC_NAME(x) \
    case x: return #x;
    GV_WC_NAME(IBV_WC_SUCCESS)
    GV_WC_NAME(IBV_WC_LOC_LEN_ERR)
    GV_WC_NAME(IBV_WC_LOC_QP_OP_ERR)
    GV_WC_NAME(IBV_WC_LOC_EEC_OP_ERR)
    GV_WC_NAME(IBV_WC_LOC_PROT_ERR)
    GV_WC_NAME(IBV_WC_WR_FLUSH_ERR)
    GV_WC_NAME(IBV_WC_MW_BIND_ERR)
    GV_WC_NAME(IBV_WC_BAD_RESP_ERR)
    GV_WC_NAME(IBV_WC_LOC_ACCESS_ERR)
    GV_WC_NAME(IBV_WC_REM_INV_REQ_ERR)
    GV_WC_NAME(IBV_WC_REM_ACCESS_ERR)
    GV_WC_NAME(IBV_WC_REM_OP_ERR)
    GV_WC_NAME(IBV_WC_RETRY_EXC_ERR)
    GV_WC_NAME(IBV_WC_RNR_RETRY_EXC_ERR)
    GV_WC_NAME(IBV_WC_LOC_RDD_VIOL_ERR)
    GV_WC_NAME(IBV_WC_REM_INV_RD_REQ_ERR)
    GV_WC_NAME(IBV_WC_REM_ABORT_ERR)
    GV_WC_NAME(IBV_WC_INV_EECN_ERR)
    GV_WC_NAME(IBV_WC_INV_EEC_STATE_ERR)
    GV_WC_NAME(IBV_WC_FATAL_ERR)
    GV_WC_NAME(IBV_WC_RESP_TIMEOUT_ERR)
    GV_WC_NAME(IBV_WC_GENERAL_ERR)
    GV_WC_NAME(IBV_WC_TM_ERR)
    GV_WC_NAME(IBV_WC_TM_RNDV_INCOMPLETE)
#undef GV_WC_NAME
    }
    return "IBV_WC_UNKNOWN";
}

}  // namespace gv::detail::verbs
