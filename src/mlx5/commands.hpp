// The PRM commands the mlx5 backend sends through DevX, built from plain parameters (pure
// functions, unit-tested byte for byte on any machine: tests/mlx5/prm_test.cpp). The QP
// transitions take the ibv_qp_attr the verbs control layer already validated and clamped
// (verbs::init_transition, rtr_transition, rts_transition), so both backends check the same
// rules and the PRM image only translates.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <string>

#include "gpuverbs/types.hpp"
#include "mlx5/prm.hpp"

namespace gv::detail::mlx5be {

/// CREATE_CQ over memory registered as umems: 64-byte CQEs, no collapsing, no overrun
/// ignore (an overrun moves the CQ to error instead of overwriting unread completions),
/// no moderation, no compression.
struct CqParams {
    uint32_t log_cq_size = 0;   ///< log2 of CQEs
    uint32_t uar_page = 0;      ///< a UAR page of the process (arming; unused when polling)
    uint32_t eqn = 0;           ///< from mlx5dv_devx_query_eqn
    uint32_t cq_umem_id = 0;
    uint64_t cq_umem_offset = 0;
    uint32_t dbr_umem_id = 0;
    uint64_t dbr_offset = 0;    ///< 8-byte aligned
    uint32_t log_page_size = 0;  ///< of the umem, from 4 KiB (0: 4 KiB pages)
};
prm::Cmd create_cq_cmd(const CqParams& p);

/// CREATE_QP of an RC QP over memory registered as umems: the work queue (receive ring first,
/// send ring after it, as the PRM lays them) and the doorbell record ([0] receive, [1] send).
struct QpParams {
    uint32_t pdn = 0;
    uint32_t uar_page = 0;      ///< the UAR whose doorbell register rings this QP
    uint32_t cqn_snd = 0;
    uint32_t cqn_rcv = 0;
    uint32_t log_sq_size = 0;   ///< log2 of send WQEBBs (64 bytes)
    uint32_t log_rq_size = 0;   ///< log2 of receive WQEs
    uint32_t log_rq_stride = 4;  ///< log2 of bytes per receive WQE (>= 4)
    uint32_t wq_umem_id = 0;
    uint64_t wq_umem_offset = 0;
    uint32_t dbr_umem_id = 0;
    uint64_t dbr_offset = 0;
    uint32_t log_page_size = 0;
    uint32_t ts_format = prm::kQpcTsFormatFreeRunning;
};
prm::Cmd create_qp_cmd(const QpParams& p);

/// RST2INIT: port, P_Key index 0, remote access (rre/rwe/rae and 8-byte atomics) from a
/// verbs::init_transition() attribute set.
prm::Cmd rst2init_cmd(uint32_t qpn, const ibv_qp_attr& a);

/// What INIT2RTR needs beyond the verbs attributes on RoCE: the destination MAC (resolved by
/// the kernel through an address handle), whether the source GID is RoCE v2 (UDP), and the
/// UDP source port to use.
struct RoceExtra {
    bool roce = false;
    bool v2 = false;
    std::array<uint8_t, 6> dmac{};
    uint16_t udp_sport = 0xc000;
};
/// INIT2RTR from a verbs::rtr_transition() attribute set: path MTU, remote QPN, receive PSN,
/// incoming READ/atomic depth, RNR timer, the primary address path (RoCE: GRH with MAC; IB:
/// LID), log_msg_max.
prm::Cmd init2rtr_cmd(uint32_t qpn, const ibv_qp_attr& a, const RoceExtra& roce, uint32_t log_msg_max = 30);

/// RTR2RTS from a verbs::rts_transition() attribute set: send PSN, ACK timeout, retry
/// counts, outgoing READ/atomic depth; an ACK requested for every packet.
prm::Cmd rtr2rts_cmd(uint32_t qpn, const ibv_qp_attr& a);

prm::Cmd qp_2err_cmd(uint32_t qpn);
prm::Cmd qp_2rst_cmd(uint32_t qpn);
prm::Cmd query_qp_cmd(uint32_t qpn);

/// log2 of a READ/atomic depth as the QP context holds it (0 -> 0; otherwise floor, as the
/// kernel's ilog2 does: a depth is never rounded up past what the peer granted).
uint32_t log_depth(uint32_t depth);

/// qpc.state of a QUERY_QP output as a gv::QpState.
QpState qp_state_from_prm(uint32_t qpc_state);

/// A command's failure in words: "CREATE_QP failed: status 0x3 (BAD_PARAM), syndrome
/// 0x1234abcd" with the status name and, for the common ones, the likely cause.
std::string cmd_status_text(const char* command, uint32_t status, uint32_t syndrome);

}  // namespace gv::detail::mlx5be
