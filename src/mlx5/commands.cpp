#include "mlx5/commands.hpp"

#include "gpuverbs/errors.hpp"

namespace gv::detail::mlx5be {

using namespace prm;

prm::Cmd create_cq_cmd(const CqParams& p) {
    Cmd c(create_cq_in::kBits, "CREATE_CQ");
    c.set(create_cq_in::opcode, kCmdCreateCq);
    c.set(create_cq_in::cq_umem_valid, 1);
    c.set(create_cq_in::cq_umem_id, p.cq_umem_id);
    c.set(create_cq_in::cq_umem_offset, p.cq_umem_offset);
    const Field ctx = create_cq_in::cq_context;
    c.set(at(ctx, cqc::dbr_umem_valid), 1);
    c.set(at(ctx, cqc::dbr_umem_id), p.dbr_umem_id);
    GV_REQUIRE(p.dbr_offset % 8 == 0, "CQ doorbell record offset " + hex(p.dbr_offset) + " is not 8-byte aligned");
    c.set(at(ctx, cqc::dbr_addr), p.dbr_offset);
    c.set(at(ctx, cqc::cqe_sz), kCqcCqeSz64);
    c.set(at(ctx, cqc::cc), 0);  // every completion gets its own CQE
    c.set(at(ctx, cqc::oi), 0);  // overrun is an error, never a silent overwrite
    c.set(at(ctx, cqc::log_cq_size), p.log_cq_size);
    c.set(at(ctx, cqc::uar_page), p.uar_page);
    c.set(at(ctx, cqc::c_eqn_or_apu_element), p.eqn);
    c.set(at(ctx, cqc::log_page_size), p.log_page_size);
    c.set(at(ctx, cqc::page_offset), 0);
    return c;
}

prm::Cmd create_qp_cmd(const QpParams& p) {
    GV_REQUIRE(p.log_rq_stride >= 4, "receive WQE stride 2^" + std::to_string(p.log_rq_stride) +
                                         " bytes: expected at least 16 (one data segment)");
    Cmd c(create_qp_in::kBits, "CREATE_QP");
    c.set(create_qp_in::opcode, kCmdCreateQp);
    c.set(create_qp_in::wq_umem_valid, 1);
    c.set(create_qp_in::wq_umem_id, p.wq_umem_id);
    c.set(create_qp_in::wq_umem_offset, p.wq_umem_offset);
    const Field q = create_qp_in::qpc;
    c.set(at(q, qpc::st), kQpcStRc);
    c.set(at(q, qpc::pm_state), kQpcPmStateMigrated);
    c.set(at(q, qpc::pd), p.pdn);
    c.set(at(q, qpc::uar_page), p.uar_page);
    c.set(at(q, qpc::cqn_snd), p.cqn_snd);
    c.set(at(q, qpc::cqn_rcv), p.cqn_rcv);
    c.set(at(q, qpc::log_sq_size), p.log_sq_size);
    c.set(at(q, qpc::log_rq_size), p.log_rq_size);
    c.set(at(q, qpc::log_rq_stride), p.log_rq_stride - 4);
    c.set(at(q, qpc::rq_type), 0);  // a regular receive queue (no SRQ)
    c.set(at(q, qpc::no_sq), 0);
    c.set(at(q, qpc::log_page_size), p.log_page_size);
    c.set(at(q, qpc::page_offset), 0);
    c.set(at(q, qpc::ts_format), p.ts_format);
    c.set(at(q, qpc::dbr_umem_valid), 1);
    c.set(at(q, qpc::dbr_umem_id), p.dbr_umem_id);
    GV_REQUIRE(p.dbr_offset % 8 == 0, "QP doorbell record offset " + hex(p.dbr_offset) + " is not 8-byte aligned");
    c.set(at(q, qpc::dbr_addr), p.dbr_offset);
    return c;
}

prm::Cmd rst2init_cmd(uint32_t qpn, const ibv_qp_attr& a) {
    Cmd c(rst2init_qp_in::kBits, "RST2INIT_QP");
    c.set(rst2init_qp_in::opcode, kCmdRst2InitQp);
    c.set(rst2init_qp_in::qpn, qpn);
    const Field q = rst2init_qp_in::qpc;
    const Field path = at(q, qpc::primary_address_path);
    c.set(at(q, qpc::pm_state), kQpcPmStateMigrated);
    c.set(at(path, ads::vhca_port_num), a.port_num);
    c.set(at(path, ads::pkey_index), a.pkey_index);
    const uint32_t acc = uint32_t(a.qp_access_flags);
    c.set(at(q, qpc::rre), (acc & IBV_ACCESS_REMOTE_READ) ? 1 : 0);
    c.set(at(q, qpc::rwe), (acc & IBV_ACCESS_REMOTE_WRITE) ? 1 : 0);
    c.set(at(q, qpc::rae), (acc & IBV_ACCESS_REMOTE_ATOMIC) ? 1 : 0);
    if (acc & IBV_ACCESS_REMOTE_ATOMIC) c.set(at(q, qpc::atomic_mode), kQpcAtomicModeUpTo8B);
    return c;
}

prm::Cmd init2rtr_cmd(uint32_t qpn, const ibv_qp_attr& a, const RoceExtra& roce, uint32_t log_msg_max) {
    Cmd c(init2rtr_qp_in::kBits, "INIT2RTR_QP");
    c.set(init2rtr_qp_in::opcode, kCmdInit2RtrQp);
    c.set(init2rtr_qp_in::qpn, qpn);
    c.set(init2rtr_qp_in::opt_param_mask, 0);
    const Field q = init2rtr_qp_in::qpc;
    const Field path = at(q, qpc::primary_address_path);
    c.set(at(q, qpc::mtu), uint32_t(a.path_mtu));
    c.set(at(q, qpc::log_msg_max), log_msg_max);
    c.set(at(q, qpc::remote_qpn), a.dest_qp_num);
    c.set(at(q, qpc::next_rcv_psn), a.rq_psn);
    c.set(at(q, qpc::log_rra_max), log_depth(a.max_dest_rd_atomic));
    c.set(at(q, qpc::min_rnr_nak), a.min_rnr_timer);
    const ibv_ah_attr& ah = a.ah_attr;
    c.set(at(path, ads::vhca_port_num), ah.port_num);
    if (roce.roce) {
        // RoCE: every packet carries a GRH; the destination is a GID and a MAC.
        GV_REQUIRE(ah.is_global, "RoCE INIT2RTR needs a GRH address vector (is_global)");
        c.set_bytes(at(path, ads::rgid_rip), ah.grh.dgid.raw, 16);
        c.set(at(path, ads::src_addr_index), ah.grh.sgid_index);
        c.set(at(path, ads::hop_limit), ah.grh.hop_limit);
        c.set(at(path, ads::tclass), ah.grh.traffic_class);
        c.set(at(path, ads::flow_label), ah.grh.flow_label);
        c.set(at(path, ads::eth_prio), ah.sl & 0x7);
        c.set(at(path, ads::rmac_47_32), (uint32_t(roce.dmac[0]) << 8) | roce.dmac[1]);
        c.set(at(path, ads::rmac_31_0), (uint32_t(roce.dmac[2]) << 24) | (uint32_t(roce.dmac[3]) << 16) |
                                            (uint32_t(roce.dmac[4]) << 8) | roce.dmac[5]);
        if (roce.v2) {
            c.set(at(path, ads::udp_sport), roce.udp_sport);
            c.set(at(path, ads::dscp), uint32_t(ah.grh.traffic_class) >> 2);
        }
    } else {
        // InfiniBand: a LID address; a GRH only when the vector has one.
        c.set(at(path, ads::rlid), ah.dlid);
        c.set(at(path, ads::mlid), ah.src_path_bits & 0x7f);
        c.set(at(path, ads::sl), ah.sl & 0xf);
        if (ah.is_global) {
            c.set(at(path, ads::grh), 1);
            c.set_bytes(at(path, ads::rgid_rip), ah.grh.dgid.raw, 16);
            c.set(at(path, ads::src_addr_index), ah.grh.sgid_index);
            c.set(at(path, ads::hop_limit), ah.grh.hop_limit);
            c.set(at(path, ads::tclass), ah.grh.traffic_class);
            c.set(at(path, ads::flow_label), ah.grh.flow_label);
        }
    }
    return c;
}

prm::Cmd rtr2rts_cmd(uint32_t qpn, const ibv_qp_attr& a) {
    Cmd c(rtr2rts_qp_in::kBits, "RTR2RTS_QP");
    c.set(rtr2rts_qp_in::opcode, kCmdRtr2RtsQp);
    c.set(rtr2rts_qp_in::qpn, qpn);
    c.set(rtr2rts_qp_in::opt_param_mask, 0);
    const Field q = rtr2rts_qp_in::qpc;
    c.set(at(q, qpc::next_send_psn), a.sq_psn);
    c.set(at(q, qpc::retry_count), a.retry_cnt);
    c.set(at(q, qpc::rnr_retry), a.rnr_retry);
    c.set(at(q, qpc::log_sra_max), log_depth(a.max_rd_atomic));
    c.set(at(q, qpc::log_ack_req_freq), 0);
    c.set(at(at(q, qpc::primary_address_path), ads::ack_timeout), a.timeout);
    return c;
}

prm::Cmd qp_2err_cmd(uint32_t qpn) {
    Cmd c(qp_2err_in::kBits, "2ERR_QP");
    c.set(qp_2err_in::opcode, kCmd2ErrQp);
    c.set(qp_2err_in::qpn, qpn);
    return c;
}

prm::Cmd qp_2rst_cmd(uint32_t qpn) {
    Cmd c(qp_2rst_in::kBits, "2RST_QP");
    c.set(qp_2rst_in::opcode, kCmd2RstQp);
    c.set(qp_2rst_in::qpn, qpn);
    return c;
}

prm::Cmd query_qp_cmd(uint32_t qpn) {
    Cmd c(query_qp_in::kBits, "QUERY_QP");
    c.set(query_qp_in::opcode, kCmdQueryQp);
    c.set(query_qp_in::qpn, qpn);
    return c;
}

uint32_t log_depth(uint32_t depth) {
    uint32_t l = 0;
    while (depth > 1) {
        depth >>= 1;
        ++l;
    }
    return l;
}

QpState qp_state_from_prm(uint32_t s) {
    switch (QpcState(s)) {
        case QpcState::Rst: return QpState::Reset;
        case QpcState::Init: return QpState::Init;
        case QpcState::Rtr: return QpState::Rtr;
        case QpcState::Rts: return QpState::Rts;
        case QpcState::Sqer: return QpState::Sqe;
        case QpcState::Sqd: return QpState::Sqd;
        case QpcState::Err: return QpState::Error;
    }
    return QpState::Error;  // a state outside the table (e.g. SUSPENDED): nothing executes
}

std::string cmd_status_text(const char* command, uint32_t status, uint32_t syndrome) {
    const char* name = "?";
    const char* hint = "";
    switch (status) {
        case 0x0: name = "OK"; break;
        case 0x1: name = "INTERNAL_ERR"; hint = "; the firmware failed: check dmesg"; break;
        case 0x2: name = "BAD_OP"; hint = "; the firmware does not know this command"; break;
        case 0x3: name = "BAD_PARAM"; hint = "; a field holds a value the device refuses (see the syndrome)"; break;
        case 0x4: name = "BAD_SYS_STATE"; break;
        case 0x5: name = "BAD_RESOURCE"; hint = "; an object named in the command (PD, CQ, UAR, umem) is not usable"; break;
        case 0x6: name = "RESOURCE_BUSY"; break;
        case 0x8: name = "EXCEED_LIM"; hint = "; a size exceeds the device's limit"; break;
        case 0x9: name = "BAD_RES_STATE"; hint = "; the object is not in a state that allows this command"; break;
        case 0xa: name = "BAD_INDEX"; break;
        case 0xf: name = "NO_RESOURCES"; break;
        case 0x10: name = "BAD_INPUT_LEN"; break;
        case 0x11: name = "BAD_OUTPUT_LEN"; break;
        case 0x40: name = "BAD_QP_STATE"; hint = "; the QP is not in the state this transition starts from"; break;
        case 0x41: name = "BAD_PKT"; break;
        case 0x50: name = "BAD_SIZE"; hint = "; a queue size the device refuses"; break;
        default: break;
    }
    return std::string(command) + " failed: status " + hex(status) + " (" + name + "), syndrome " + hex(syndrome) + hint;
}

}  // namespace gv::detail::mlx5be
