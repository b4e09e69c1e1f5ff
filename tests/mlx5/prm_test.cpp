// The PRM layouts (src/mlx5/prm.hpp) against the bit positions rdma-core documents, the
// checked setter against rdma-core's own DEVX_SET, and the commands the backend builds
// (src/mlx5/commands.hpp), field by field. No device needed.
//
// The oracle: rdma-core's providers/mlx5/mlx5_ifc.h (the QP context, the address path and the
// QP commands) and, for the CQ (which that header does not describe), the PRM structures of
// rdma-core's own DevX tests, tests/mlx5_prm_structs.py (SwCqc, CreateCqIn, CreateCqOut).
// Each row below is a field's bit offset and width as those files give them (for the Python
// one, the running sum of its field widths), written out here once.
#include <gtest/gtest.h>

#include <infiniband/mlx5dv.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpuverbs/errors.hpp"
#include "mlx5/commands.hpp"
#include "mlx5/prm.hpp"

using namespace gv::detail::prm;
namespace be = gv::detail::mlx5be;

namespace {

struct Row {
    const char* name;
    Field field;
    uint32_t bit;
    uint32_t width;
};

const Row kOracle[] = {
    {"cqc.status", cqc::status, 0x0, 0x4},  // mlx5_prm_structs.py
    {"cqc.dbr_umem_valid", cqc::dbr_umem_valid, 0x6, 0x1},  // mlx5_prm_structs.py
    {"cqc.cqe_sz", cqc::cqe_sz, 0x8, 0x3},  // mlx5_prm_structs.py
    {"cqc.cc", cqc::cc, 0xb, 0x1},  // mlx5_prm_structs.py
    {"cqc.scqe_break_moderation_en", cqc::scqe_break_moderation_en, 0xd, 0x1},  // mlx5_prm_structs.py
    {"cqc.oi", cqc::oi, 0xe, 0x1},  // mlx5_prm_structs.py
    {"cqc.cq_period_mode", cqc::cq_period_mode, 0xf, 0x2},  // mlx5_prm_structs.py
    {"cqc.cqe_comp_en", cqc::cqe_comp_en, 0x11, 0x1},  // mlx5_prm_structs.py (cqe_compression_en)
    {"cqc.mini_cqe_res_format", cqc::mini_cqe_res_format, 0x12, 0x2},  // mlx5_prm_structs.py
    {"cqc.st", cqc::st, 0x14, 0x4},  // mlx5_prm_structs.py
    {"cqc.dbr_umem_id", cqc::dbr_umem_id, 0x20, 0x20},  // mlx5_prm_structs.py
    {"cqc.page_offset", cqc::page_offset, 0x54, 0x6},  // mlx5_prm_structs.py
    {"cqc.log_cq_size", cqc::log_cq_size, 0x63, 0x5},  // mlx5_prm_structs.py
    {"cqc.uar_page", cqc::uar_page, 0x68, 0x18},  // mlx5_prm_structs.py
    {"cqc.cq_period", cqc::cq_period, 0x84, 0xc},  // mlx5_prm_structs.py
    {"cqc.cq_max_count", cqc::cq_max_count, 0x90, 0x10},  // mlx5_prm_structs.py
    {"cqc.log_page_size", cqc::log_page_size, 0xc3, 0x5},  // mlx5_prm_structs.py
    {"cqc.last_notified_index", cqc::last_notified_index, 0x108, 0x18},  // mlx5_prm_structs.py
    {"cqc.last_solicit_index", cqc::last_solicit_index, 0x128, 0x18},  // mlx5_prm_structs.py
    {"cqc.consumer_counter", cqc::consumer_counter, 0x148, 0x18},  // mlx5_prm_structs.py
    {"cqc.producer_counter", cqc::producer_counter, 0x168, 0x18},  // mlx5_prm_structs.py
    {"create_cq_in.opcode", create_cq_in::opcode, 0x0, 0x10},  // mlx5_prm_structs.py
    {"create_cq_in.uid", create_cq_in::uid, 0x10, 0x10},  // mlx5_prm_structs.py
    {"create_cq_in.op_mod", create_cq_in::op_mod, 0x30, 0x10},  // mlx5_prm_structs.py
    {"create_cq_in.cq_context", create_cq_in::cq_context, 0x80, 0x200},  // mlx5_prm_structs.py (sw_cqc)
    {"create_cq_in.cq_umem_offset", create_cq_in::cq_umem_offset, 0x280, 0x40},  // mlx5_prm_structs.py (e_mtt_pointer_or_cq_umem_offset)
    {"create_cq_in.cq_umem_id", create_cq_in::cq_umem_id, 0x2c0, 0x20},  // mlx5_prm_structs.py
    {"create_cq_in.cq_umem_valid", create_cq_in::cq_umem_valid, 0x2e0, 0x1},  // mlx5_prm_structs.py
    {"create_cq_out.status", create_cq_out::status, 0x0, 0x8},  // mlx5_prm_structs.py
    {"create_cq_out.syndrome", create_cq_out::syndrome, 0x20, 0x20},  // mlx5_prm_structs.py
    {"create_cq_out.cqn", create_cq_out::cqn, 0x48, 0x18},  // mlx5_prm_structs.py
    {"ads.fl", ads::fl, 0x0, 0x1},  // mlx5_ifc.h
    {"ads.free_ar", ads::free_ar, 0x1, 0x1},  // mlx5_ifc.h
    {"ads.pkey_index", ads::pkey_index, 0x10, 0x10},  // mlx5_ifc.h
    {"ads.grh", ads::grh, 0x28, 0x1},  // mlx5_ifc.h
    {"ads.mlid", ads::mlid, 0x29, 0x7},  // mlx5_ifc.h
    {"ads.rlid", ads::rlid, 0x30, 0x10},  // mlx5_ifc.h
    {"ads.ack_timeout", ads::ack_timeout, 0x40, 0x5},  // mlx5_ifc.h
    {"ads.src_addr_index", ads::src_addr_index, 0x48, 0x8},  // mlx5_ifc.h
    {"ads.stat_rate", ads::stat_rate, 0x54, 0x4},  // mlx5_ifc.h
    {"ads.hop_limit", ads::hop_limit, 0x58, 0x8},  // mlx5_ifc.h
    {"ads.tclass", ads::tclass, 0x64, 0x8},  // mlx5_ifc.h
    {"ads.flow_label", ads::flow_label, 0x6c, 0x14},  // mlx5_ifc.h
    {"ads.rgid_rip", ads::rgid_rip, 0x80, 0x80},  // mlx5_ifc.h
    {"ads.f_dscp", ads::f_dscp, 0x104, 0x1},  // mlx5_ifc.h
    {"ads.f_ecn", ads::f_ecn, 0x105, 0x1},  // mlx5_ifc.h
    {"ads.f_eth_prio", ads::f_eth_prio, 0x107, 0x1},  // mlx5_ifc.h
    {"ads.ecn", ads::ecn, 0x108, 0x2},  // mlx5_ifc.h
    {"ads.dscp", ads::dscp, 0x10a, 0x6},  // mlx5_ifc.h
    {"ads.udp_sport", ads::udp_sport, 0x110, 0x10},  // mlx5_ifc.h
    {"ads.dei_cfi", ads::dei_cfi, 0x120, 0x1},  // mlx5_ifc.h
    {"ads.eth_prio", ads::eth_prio, 0x121, 0x3},  // mlx5_ifc.h
    {"ads.sl", ads::sl, 0x124, 0x4},  // mlx5_ifc.h
    {"ads.vhca_port_num", ads::vhca_port_num, 0x128, 0x8},  // mlx5_ifc.h
    {"ads.rmac_47_32", ads::rmac_47_32, 0x130, 0x10},  // mlx5_ifc.h
    {"ads.rmac_31_0", ads::rmac_31_0, 0x140, 0x20},  // mlx5_ifc.h
    {"qpc.state", qpc::state, 0x0, 0x4},  // mlx5_ifc.h
    {"qpc.lag_tx_port_affinity", qpc::lag_tx_port_affinity, 0x4, 0x4},  // mlx5_ifc.h
    {"qpc.st", qpc::st, 0x8, 0x8},  // mlx5_ifc.h
    {"qpc.pm_state", qpc::pm_state, 0x13, 0x2},  // mlx5_ifc.h
    {"qpc.wq_signature", qpc::wq_signature, 0x20, 0x1},  // mlx5_ifc.h
    {"qpc.block_lb_mc", qpc::block_lb_mc, 0x21, 0x1},  // mlx5_ifc.h
    {"qpc.pd", qpc::pd, 0x28, 0x18},  // mlx5_ifc.h
    {"qpc.mtu", qpc::mtu, 0x40, 0x3},  // mlx5_ifc.h
    {"qpc.log_msg_max", qpc::log_msg_max, 0x43, 0x5},  // mlx5_ifc.h
    {"qpc.log_rq_size", qpc::log_rq_size, 0x49, 0x4},  // mlx5_ifc.h
    {"qpc.log_rq_stride", qpc::log_rq_stride, 0x4d, 0x3},  // mlx5_ifc.h
    {"qpc.no_sq", qpc::no_sq, 0x50, 0x1},  // mlx5_ifc.h
    {"qpc.log_sq_size", qpc::log_sq_size, 0x51, 0x4},  // mlx5_ifc.h
    {"qpc.ts_format", qpc::ts_format, 0x58, 0x2},  // mlx5_ifc.h
    {"qpc.rlky", qpc::rlky, 0x5b, 0x1},  // mlx5_ifc.h
    {"qpc.counter_set_id", qpc::counter_set_id, 0x60, 0x8},  // mlx5_ifc.h
    {"qpc.uar_page", qpc::uar_page, 0x68, 0x18},  // mlx5_ifc.h
    {"qpc.user_index", qpc::user_index, 0x88, 0x18},  // mlx5_ifc.h
    {"qpc.log_page_size", qpc::log_page_size, 0xa3, 0x5},  // mlx5_ifc.h
    {"qpc.remote_qpn", qpc::remote_qpn, 0xa8, 0x18},  // mlx5_ifc.h
    {"qpc.primary_address_path", qpc::primary_address_path, 0xc0, 0x160},  // mlx5_ifc.h
    {"qpc.secondary_address_path", qpc::secondary_address_path, 0x220, 0x160},  // mlx5_ifc.h
    {"qpc.log_ack_req_freq", qpc::log_ack_req_freq, 0x380, 0x4},  // mlx5_ifc.h
    {"qpc.log_sra_max", qpc::log_sra_max, 0x388, 0x3},  // mlx5_ifc.h
    {"qpc.retry_count", qpc::retry_count, 0x38d, 0x3},  // mlx5_ifc.h
    {"qpc.rnr_retry", qpc::rnr_retry, 0x390, 0x3},  // mlx5_ifc.h
    {"qpc.fre", qpc::fre, 0x394, 0x1},  // mlx5_ifc.h
    {"qpc.next_send_psn", qpc::next_send_psn, 0x3c8, 0x18},  // mlx5_ifc.h
    {"qpc.cqn_snd", qpc::cqn_snd, 0x3e8, 0x18},  // mlx5_ifc.h
    {"qpc.last_acked_psn", qpc::last_acked_psn, 0x448, 0x18},  // mlx5_ifc.h
    {"qpc.log_rra_max", qpc::log_rra_max, 0x488, 0x3},  // mlx5_ifc.h
    {"qpc.atomic_mode", qpc::atomic_mode, 0x48c, 0x4},  // mlx5_ifc.h
    {"qpc.rre", qpc::rre, 0x490, 0x1},  // mlx5_ifc.h
    {"qpc.rwe", qpc::rwe, 0x491, 0x1},  // mlx5_ifc.h
    {"qpc.rae", qpc::rae, 0x492, 0x1},  // mlx5_ifc.h
    {"qpc.page_offset", qpc::page_offset, 0x494, 0x6},  // mlx5_ifc.h
    {"qpc.min_rnr_nak", qpc::min_rnr_nak, 0x4a3, 0x5},  // mlx5_ifc.h
    {"qpc.next_rcv_psn", qpc::next_rcv_psn, 0x4a8, 0x18},  // mlx5_ifc.h
    {"qpc.cqn_rcv", qpc::cqn_rcv, 0x4e8, 0x18},  // mlx5_ifc.h
    {"qpc.dbr_addr", qpc::dbr_addr, 0x500, 0x40},  // mlx5_ifc.h
    {"qpc.q_key", qpc::q_key, 0x540, 0x20},  // mlx5_ifc.h
    {"qpc.rq_type", qpc::rq_type, 0x565, 0x3},  // mlx5_ifc.h
    {"qpc.srqn_rmpn_xrqn", qpc::srqn_rmpn_xrqn, 0x568, 0x18},  // mlx5_ifc.h
    {"qpc.hw_sq_wqebb_counter", qpc::hw_sq_wqebb_counter, 0x5a0, 0x10},  // mlx5_ifc.h
    {"qpc.sw_sq_wqebb_counter", qpc::sw_sq_wqebb_counter, 0x5b0, 0x10},  // mlx5_ifc.h
    {"qpc.hw_rq_counter", qpc::hw_rq_counter, 0x5c0, 0x20},  // mlx5_ifc.h
    {"qpc.sw_rq_counter", qpc::sw_rq_counter, 0x5e0, 0x20},  // mlx5_ifc.h
    {"qpc.cs_req", qpc::cs_req, 0x630, 0x8},  // mlx5_ifc.h
    {"qpc.cs_res", qpc::cs_res, 0x638, 0x8},  // mlx5_ifc.h
    {"qpc.dbr_umem_valid", qpc::dbr_umem_valid, 0x683, 0x1},  // mlx5_ifc.h
    {"qpc.dbr_umem_id", qpc::dbr_umem_id, 0x720, 0x20},  // mlx5_ifc.h
    {"create_qp_in.opcode", create_qp_in::opcode, 0x0, 0x10},  // mlx5_ifc.h
    {"create_qp_in.uid", create_qp_in::uid, 0x10, 0x10},  // mlx5_ifc.h
    {"create_qp_in.op_mod", create_qp_in::op_mod, 0x30, 0x10},  // mlx5_ifc.h
    {"create_qp_in.opt_param_mask", create_qp_in::opt_param_mask, 0x80, 0x20},  // mlx5_ifc.h
    {"create_qp_in.qpc", create_qp_in::qpc, 0xc0, 0x740},  // mlx5_ifc.h
    {"create_qp_in.wq_umem_id", create_qp_in::wq_umem_id, 0x840, 0x20},  // mlx5_ifc.h
    {"create_qp_in.wq_umem_valid", create_qp_in::wq_umem_valid, 0x860, 0x1},  // mlx5_ifc.h
    {"create_qp_out.status", create_qp_out::status, 0x0, 0x8},  // mlx5_ifc.h
    {"create_qp_out.syndrome", create_qp_out::syndrome, 0x20, 0x20},  // mlx5_ifc.h
    {"create_qp_out.qpn", create_qp_out::qpn, 0x48, 0x18},  // mlx5_ifc.h
    {"query_qp_out.status", query_qp_out::status, 0x0, 0x8},  // mlx5_ifc.h
    {"query_qp_out.syndrome", query_qp_out::syndrome, 0x20, 0x20},  // mlx5_ifc.h
    {"query_qp_out.opt_param_mask", query_qp_out::opt_param_mask, 0x80, 0x20},  // mlx5_ifc.h
    {"query_qp_out.qpc", query_qp_out::qpc, 0xc0, 0x740},  // mlx5_ifc.h
    {"rst2init_qp_in.opcode", rst2init_qp_in::opcode, 0x0, 0x10},  // mlx5_ifc.h
    {"rst2init_qp_in.uid", rst2init_qp_in::uid, 0x10, 0x10},  // mlx5_ifc.h
    {"rst2init_qp_in.op_mod", rst2init_qp_in::op_mod, 0x30, 0x10},  // mlx5_ifc.h
    {"rst2init_qp_in.qpn", rst2init_qp_in::qpn, 0x48, 0x18},  // mlx5_ifc.h
    {"rst2init_qp_in.opt_param_mask", rst2init_qp_in::opt_param_mask, 0x80, 0x20},  // mlx5_ifc.h
    {"rst2init_qp_in.qpc", rst2init_qp_in::qpc, 0xc0, 0x740},  // mlx5_ifc.h
    {"init2rtr_qp_in.opcode", init2rtr_qp_in::opcode, 0x0, 0x10},  // mlx5_ifc.h
    {"init2rtr_qp_in.uid", init2rtr_qp_in::uid, 0x10, 0x10},  // mlx5_ifc.h
    {"init2rtr_qp_in.op_mod", init2rtr_qp_in::op_mod, 0x30, 0x10},  // mlx5_ifc.h
    {"init2rtr_qp_in.qpn", init2rtr_qp_in::qpn, 0x48, 0x18},  // mlx5_ifc.h
    {"init2rtr_qp_in.opt_param_mask", init2rtr_qp_in::opt_param_mask, 0x80, 0x20},  // mlx5_ifc.h
    {"init2rtr_qp_in.qpc", init2rtr_qp_in::qpc, 0xc0, 0x740},  // mlx5_ifc.h
    {"rtr2rts_qp_in.opcode", rtr2rts_qp_in::opcode, 0x0, 0x10},  // mlx5_ifc.h
    {"rtr2rts_qp_in.uid", rtr2rts_qp_in::uid, 0x10, 0x10},  // mlx5_ifc.h
    {"rtr2rts_qp_in.op_mod", rtr2rts_qp_in::op_mod, 0x30, 0x10},  // mlx5_ifc.h
    {"rtr2rts_qp_in.qpn", rtr2rts_qp_in::qpn, 0x48, 0x18},  // mlx5_ifc.h
    {"rtr2rts_qp_in.opt_param_mask", rtr2rts_qp_in::opt_param_mask, 0x80, 0x20},  // mlx5_ifc.h
    {"rtr2rts_qp_in.qpc", rtr2rts_qp_in::qpc, 0xc0, 0x740},  // mlx5_ifc.h
    {"query_qp_in.opcode", query_qp_in::opcode, 0x0, 0x10},  // mlx5_ifc.h
    {"query_qp_in.op_mod", query_qp_in::op_mod, 0x30, 0x10},  // mlx5_ifc.h
    {"query_qp_in.qpn", query_qp_in::qpn, 0x48, 0x18},  // mlx5_ifc.h
};

}  // namespace

TEST(Mlx5Prm, FieldsSitWhereRdmaCoreSaysTheyDo) {
    for (const Row& r : kOracle) {
        EXPECT_EQ(r.field.bit, r.bit) << r.name << ": bit offset";
        EXPECT_EQ(r.field.width, r.width) << r.name << ": width";
        EXPECT_TRUE(well_formed(r.field)) << r.name;
        EXPECT_EQ(std::string(r.field.name), r.name);
    }
}

TEST(Mlx5Prm, StructureSizes) {
    // mlx5_ifc.h: sizeof(struct mlx5_ifc_*_bits) in bits (the commands without their page list).
    EXPECT_EQ(qpc::kBits, 0x740u);
    EXPECT_EQ(ads::kBits, 0x160u);
    EXPECT_EQ(create_qp_in::kBits, 0x880u);
    EXPECT_EQ(create_qp_out::kBits, 0x80u);
    EXPECT_EQ(rst2init_qp_in::kBits, 0x880u);
    EXPECT_EQ(init2rtr_qp_in::kBits, 0x880u);
    EXPECT_EQ(rtr2rts_qp_in::kBits, 0x880u);
    EXPECT_EQ(query_qp_in::kBits, 0x80u);
    EXPECT_EQ(query_qp_out::kBits, 0x880u);
    // mlx5_prm_structs.py: SwCqc is 0x200 bits; CreateCqIn's page list starts at 0x880.
    EXPECT_EQ(cqc::kBits, 0x200u);
    EXPECT_EQ(create_cq_in::kBits, 0x880u);
    EXPECT_EQ(create_cq_out::kBits, 0x80u);
    // Every field of every structure lies inside it.
    for (const Row& r : kOracle) EXPECT_LE(r.field.bit + r.field.width, 0x880u) << r.name;
}

TEST(Mlx5Prm, FieldsTheOracleNamesDifferently) {
    // create_qp_in.wq_umem_offset: reserved_at_800[0x40] in mlx5_ifc.h,
    // e_mtt_pointer_or_wq_umem_offset (0x800, 64 bits) in mlx5_prm_structs.py.
    EXPECT_EQ(create_qp_in::wq_umem_offset.bit, 0x800u);
    EXPECT_EQ(create_qp_in::wq_umem_offset.width, 0x40u);
    // cqc.dbr_addr: db_record_addr_63_32 (0x1c0, 32 bits) and db_record_addr_31_3 (0x1e0, 29
    // bits, then 3 reserved) in mlx5_prm_structs.py: one 64-bit field whose low 3 bits are 0.
    EXPECT_EQ(cqc::dbr_addr.bit, 0x1c0u);
    EXPECT_EQ(cqc::dbr_addr.width, 0x40u);
    // cqc.c_eqn_or_apu_element: mlx5_prm_structs.py has 24 reserved bits then c_eqn (0xb8, 8
    // bits): the same word, and the same bytes for an EQ number below 256.
    EXPECT_EQ(cqc::c_eqn_or_apu_element.bit, 0xa0u);
    EXPECT_EQ(cqc::c_eqn_or_apu_element.width, 0x20u);
    Cmd c(cqc::kBits, "cqc");
    c.set(cqc::c_eqn_or_apu_element, 0x17);
    EXPECT_EQ(c.get(Field{0xb8, 8, "c_eqn"}), 0x17u);
    EXPECT_EQ(static_cast<const uint8_t*>(c.data())[0xb8 / 8], 0x17);
    // The modify commands name their QP context at the same place as CREATE_QP's.
    EXPECT_EQ(at(init2rtr_qp_in::qpc, qpc::mtu).bit, 0xc0u + 0x40u);
    EXPECT_EQ(at(at(create_qp_in::qpc, qpc::primary_address_path), ads::rgid_rip).bit, 0xc0u + 0xc0u + 0x80u);
}

// ---- the setter against rdma-core's DEVX_SET ---------------------------------------------

// A structure in mlx5_ifc.h's notation, so that mlx5dv.h's DEVX_SET / DEVX_SET64 can write
// it: fields of every shape the backend uses (word-aligned and not, 1 to 32 bits, 64 bits).
struct mlx5_ifc_gvtest_bits {
    uint8_t state[0x4];
    uint8_t lag[0x4];
    uint8_t st[0x8];
    uint8_t r0[0x3];
    uint8_t pm_state[0x2];
    uint8_t r1[0x3];
    uint8_t b8[0x8];
    uint8_t one[0x1];
    uint8_t r2[0x7];
    uint8_t pd[0x18];
    uint8_t full[0x20];
    uint8_t r3[0x3];
    uint8_t log5[0x5];
    uint8_t qpn[0x18];
    uint8_t addr[0x40];
};

TEST(Mlx5Prm, SetterWritesWhatDevxSetWrites) {
    constexpr Field f_state{0x0, 4, "state"}, f_lag{0x4, 4, "lag"}, f_st{0x8, 8, "st"},
        f_pm{0x13, 2, "pm"}, f_b8{0x18, 8, "b8"}, f_one{0x20, 1, "one"}, f_pd{0x28, 0x18, "pd"},
        f_full{0x40, 0x20, "full"}, f_log5{0x63, 5, "log5"}, f_qpn{0x68, 0x18, "qpn"},
        f_addr{0x80, 0x40, "addr"};
    static_assert(sizeof(mlx5_ifc_gvtest_bits) == 0xc0, "0xc0 bits");
    const uint64_t values[][11] = {
        {0x5, 0xa, 0xc3, 0x3, 0x7e, 1, 0xabcdef, 0xdeadbeef, 0x1f, 0x123456, 0x0123456789abcdefull},
        {0xf, 0x0, 0x01, 0x1, 0xff, 0, 0x000001, 0x80000001, 0x01, 0xffffff, 0xfedcba9876543210ull},
    };
    for (const auto& v : values) {
        uint8_t ours[0xc0 / 8] = {}, theirs[0xc0 / 8] = {};
        const Field fs[] = {f_state, f_lag, f_st, f_pm, f_b8, f_one, f_pd, f_full, f_log5, f_qpn, f_addr};
        for (int i = 0; i < 11; ++i) set_field(ours, sizeof ours, fs[i], v[i]);
        DEVX_SET(gvtest, theirs, state, v[0]);
        DEVX_SET(gvtest, theirs, lag, v[1]);
        DEVX_SET(gvtest, theirs, st, v[2]);
        DEVX_SET(gvtest, theirs, pm_state, v[3]);
        DEVX_SET(gvtest, theirs, b8, v[4]);
        DEVX_SET(gvtest, theirs, one, v[5]);
        DEVX_SET(gvtest, theirs, pd, v[6]);
        DEVX_SET(gvtest, theirs, full, v[7]);
        DEVX_SET(gvtest, theirs, log5, v[8]);
        DEVX_SET(gvtest, theirs, qpn, v[9]);
        DEVX_SET64(gvtest, theirs, addr, v[10]);
        EXPECT_EQ(0, std::memcmp(ours, theirs, sizeof ours));
        for (int i = 0; i < 11; ++i) EXPECT_EQ(get_field(ours, sizeof ours, fs[i]), v[i]) << fs[i].name;
        EXPECT_EQ(DEVX_GET(gvtest, ours, pd), v[6]);
        EXPECT_EQ(DEVX_GET64(gvtest, ours, addr), v[10]);
    }
}

TEST(Mlx5Prm, SetterLeavesNeighboursAlone) {
    Cmd c(qpc::kBits, "qpc");
    std::memset(c.data(), 0xff, c.bytes());
    c.set(qpc::log_sq_size, 0);
    // log_sq_size is bits 0x51..0x54: in word 2, the 4 bits after no_sq (0x50).
    EXPECT_EQ(c.get(qpc::no_sq), 1u);
    EXPECT_EQ(c.get(Field{0x55, 3, "after"}), 7u);
    EXPECT_EQ(c.get(qpc::log_sq_size), 0u);
    const uint8_t* b = static_cast<const uint8_t*>(c.data());
    EXPECT_EQ(b[0x50 / 8], 0x87);  // 1000 0111: no_sq, log_sq_size = 0, then reserved ones
}

TEST(Mlx5Prm, SetterRefusesWhatDoesNotFit) {
    Cmd c(qpc::kBits, "qpc");
    try {
        c.set(qpc::log_sq_size, 16);
        FAIL() << "16 in a 4-bit field";
    } catch (const gv::InvalidUsage& e) {
        EXPECT_NE(std::string(e.what()).find("qpc.log_sq_size is 4 bits wide"), std::string::npos) << e.what();
    }
    EXPECT_THROW(c.set(qpc::pd, 1u << 24), gv::InvalidUsage);
    EXPECT_NO_THROW(c.set(qpc::pd, (1u << 24) - 1));
    // A field past the buffer's end (an RTR field written into a 0x80-bit command).
    Cmd small(qp_2err_in::kBits, "2ERR_QP");
    EXPECT_THROW(small.set(at(init2rtr_qp_in::qpc, qpc::mtu), 5), gv::InvalidUsage);
    // A malformed field (crossing a word) is refused, never written.
    EXPECT_THROW(c.set(Field{0x1e, 4, "crossing"}, 1), gv::InvalidUsage);
    EXPECT_THROW(c.set(Field{0x10, 48, "odd width"}, 1), gv::InvalidUsage);
    // 128 bits go through set_bytes, of exactly their size.
    uint8_t gid[16];
    for (int i = 0; i < 16; ++i) gid[i] = uint8_t(i + 1);
    Cmd q(qpc::kBits, "qpc");
    const Field rgid = at(qpc::primary_address_path, ads::rgid_rip);
    EXPECT_THROW(q.set(rgid, 1), gv::InvalidUsage);
    EXPECT_THROW(q.set_bytes(rgid, gid, 8), gv::InvalidUsage);
    q.set_bytes(rgid, gid, 16);
    EXPECT_EQ(0, std::memcmp(static_cast<const uint8_t*>(q.data()) + (0xc0 + 0x80) / 8, gid, 16));
}

// ---- the commands ------------------------------------------------------------------------

namespace {
uint16_t be16_at(const Cmd& c, size_t byte) {
    const uint8_t* b = static_cast<const uint8_t*>(c.data());
    return uint16_t((b[byte] << 8) | b[byte + 1]);
}
}  // namespace

TEST(Mlx5Commands, CreateCq) {
    be::CqParams p;
    p.log_cq_size = 10;
    p.uar_page = 0x1234;
    p.eqn = 9;
    p.cq_umem_id = 0x77;
    p.cq_umem_offset = 0;
    p.dbr_umem_id = 0x78;
    p.dbr_offset = 0x40;
    Cmd c = be::create_cq_cmd(p);
    EXPECT_EQ(c.bytes(), 0x880u / 8);
    EXPECT_EQ(be16_at(c, 0), 0x400);  // opcode, big-endian in the first two bytes
    EXPECT_EQ(c.get(create_cq_in::cq_umem_valid), 1u);
    EXPECT_EQ(c.get(create_cq_in::cq_umem_id), 0x77u);
    const Field ctx = create_cq_in::cq_context;
    EXPECT_EQ(c.get(at(ctx, cqc::cqe_sz)), 0u);  // 64-byte CQEs
    EXPECT_EQ(c.get(at(ctx, cqc::cc)), 0u);
    EXPECT_EQ(c.get(at(ctx, cqc::oi)), 0u);
    EXPECT_EQ(c.get(at(ctx, cqc::log_cq_size)), 10u);
    EXPECT_EQ(c.get(at(ctx, cqc::uar_page)), 0x1234u);
    EXPECT_EQ(c.get(at(ctx, cqc::c_eqn_or_apu_element)), 9u);
    EXPECT_EQ(c.get(at(ctx, cqc::dbr_umem_valid)), 1u);
    EXPECT_EQ(c.get(at(ctx, cqc::dbr_umem_id)), 0x78u);
    EXPECT_EQ(c.get(at(ctx, cqc::dbr_addr)), 0x40u);
    p.dbr_offset = 0x44;
    EXPECT_THROW(be::create_cq_cmd(p), gv::InvalidUsage);  // not 8-byte aligned
    p.dbr_offset = 0;
    p.log_cq_size = 32;
    EXPECT_THROW(be::create_cq_cmd(p), gv::InvalidUsage);  // 5-bit field
}

TEST(Mlx5Commands, CreateQp) {
    be::QpParams p;
    p.pdn = 0x42;
    p.uar_page = 0x99;
    p.cqn_snd = 0x400;
    p.cqn_rcv = 0x401;
    p.log_sq_size = 8;
    p.log_rq_size = 6;
    p.log_rq_stride = 5;  // 32-byte receive WQEs
    p.wq_umem_id = 3;
    p.wq_umem_offset = 0x1000;
    p.dbr_umem_id = 4;
    p.dbr_offset = 8;
    Cmd c = be::create_qp_cmd(p);
    EXPECT_EQ(be16_at(c, 0), 0x500);
    const Field q = create_qp_in::qpc;
    EXPECT_EQ(c.get(at(q, qpc::st)), kQpcStRc);
    EXPECT_EQ(c.get(at(q, qpc::pm_state)), kQpcPmStateMigrated);
    EXPECT_EQ(c.get(at(q, qpc::pd)), 0x42u);
    EXPECT_EQ(c.get(at(q, qpc::uar_page)), 0x99u);
    EXPECT_EQ(c.get(at(q, qpc::cqn_snd)), 0x400u);
    EXPECT_EQ(c.get(at(q, qpc::cqn_rcv)), 0x401u);
    EXPECT_EQ(c.get(at(q, qpc::log_sq_size)), 8u);
    EXPECT_EQ(c.get(at(q, qpc::log_rq_size)), 6u);
    EXPECT_EQ(c.get(at(q, qpc::log_rq_stride)), 1u);  // log2(stride) - 4
    EXPECT_EQ(c.get(at(q, qpc::dbr_umem_valid)), 1u);
    EXPECT_EQ(c.get(at(q, qpc::dbr_umem_id)), 4u);
    EXPECT_EQ(c.get(at(q, qpc::dbr_addr)), 8u);
    EXPECT_EQ(c.get(create_qp_in::wq_umem_valid), 1u);
    EXPECT_EQ(c.get(create_qp_in::wq_umem_id), 3u);
    EXPECT_EQ(c.get(create_qp_in::wq_umem_offset), 0x1000u);
    p.log_sq_size = 16;  // 4-bit field: at most 2^15 WQEBBs
    EXPECT_THROW(be::create_qp_cmd(p), gv::InvalidUsage);
    p.log_sq_size = 8;
    p.log_rq_stride = 3;
    EXPECT_THROW(be::create_qp_cmd(p), gv::InvalidUsage);
}

TEST(Mlx5Commands, Rst2Init) {
    ibv_qp_attr a{};
    a.port_num = 1;
    a.pkey_index = 0;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    Cmd c = be::rst2init_cmd(0x1a2b3c, a);
    EXPECT_EQ(be16_at(c, 0), 0x502);
    EXPECT_EQ(c.get(rst2init_qp_in::qpn), 0x1a2b3cu);
    const Field q = rst2init_qp_in::qpc;
    EXPECT_EQ(c.get(at(at(q, qpc::primary_address_path), ads::vhca_port_num)), 1u);
    EXPECT_EQ(c.get(at(q, qpc::rre)), 1u);
    EXPECT_EQ(c.get(at(q, qpc::rwe)), 1u);
    EXPECT_EQ(c.get(at(q, qpc::rae)), 1u);
    EXPECT_EQ(c.get(at(q, qpc::atomic_mode)), kQpcAtomicModeUpTo8B);
    a.qp_access_flags = IBV_ACCESS_REMOTE_READ;
    c = be::rst2init_cmd(5, a);
    EXPECT_EQ(c.get(at(q, qpc::rre)), 1u);
    EXPECT_EQ(c.get(at(q, qpc::rwe)), 0u);
    EXPECT_EQ(c.get(at(q, qpc::rae)), 0u);
    EXPECT_EQ(c.get(at(q, qpc::atomic_mode)), 0u);
}

TEST(Mlx5Commands, Init2RtrRoceV2) {
    ibv_qp_attr a{};
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = 0xabc;
    a.rq_psn = 0x123456;
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = 1;
    a.ah_attr.is_global = 1;
    for (int i = 0; i < 16; ++i) a.ah_attr.grh.dgid.raw[i] = uint8_t(0xf0 + i);
    a.ah_attr.grh.sgid_index = 3;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.traffic_class = 0x68;  // DSCP 26
    be::RoceExtra r;
    r.roce = true;
    r.v2 = true;
    r.dmac = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
    r.udp_sport = 0xc123;
    Cmd c = be::init2rtr_cmd(0x77, a, r);
    EXPECT_EQ(be16_at(c, 0), 0x503);
    EXPECT_EQ(c.get(init2rtr_qp_in::qpn), 0x77u);
    const Field q = init2rtr_qp_in::qpc, path = at(q, qpc::primary_address_path);
    EXPECT_EQ(c.get(at(q, qpc::mtu)), 5u);  // IBV_MTU_4096
    EXPECT_EQ(c.get(at(q, qpc::log_msg_max)), 30u);
    EXPECT_EQ(c.get(at(q, qpc::remote_qpn)), 0xabcu);
    EXPECT_EQ(c.get(at(q, qpc::next_rcv_psn)), 0x123456u);
    EXPECT_EQ(c.get(at(q, qpc::log_rra_max)), 4u);
    EXPECT_EQ(c.get(at(q, qpc::min_rnr_nak)), 12u);
    EXPECT_EQ(c.get(at(path, ads::src_addr_index)), 3u);
    EXPECT_EQ(c.get(at(path, ads::hop_limit)), 64u);
    EXPECT_EQ(c.get(at(path, ads::udp_sport)), 0xc123u);
    EXPECT_EQ(c.get(at(path, ads::dscp)), 26u);
    EXPECT_EQ(c.get(at(path, ads::grh)), 0u);  // RoCE: no IB GRH bit (every packet has one)
    uint8_t gid[16];
    c.get_bytes(at(path, ads::rgid_rip), gid, 16);
    EXPECT_EQ(0, std::memcmp(gid, a.ah_attr.grh.dgid.raw, 16));
    // The MAC in wire order across rmac_47_32 and rmac_31_0, as rdma-core's memcpy of 6
    // bytes at rmac_47_32 lays it.
    const uint8_t* b = static_cast<const uint8_t*>(c.data());
    const size_t mac_byte = (0xc0 + 0xc0 + 0x130) / 8;
    EXPECT_EQ(0, std::memcmp(b + mac_byte, r.dmac.data(), 6));
}

TEST(Mlx5Commands, Init2RtrInfiniBand) {
    ibv_qp_attr a{};
    a.path_mtu = IBV_MTU_2048;
    a.dest_qp_num = 0x10;
    a.max_dest_rd_atomic = 0;
    a.ah_attr.port_num = 2;
    a.ah_attr.dlid = 0x1234;
    a.ah_attr.sl = 3;
    Cmd c = be::init2rtr_cmd(0x11, a, be::RoceExtra{});
    const Field q = init2rtr_qp_in::qpc, path = at(q, qpc::primary_address_path);
    EXPECT_EQ(c.get(at(q, qpc::mtu)), 4u);
    EXPECT_EQ(c.get(at(q, qpc::log_rra_max)), 0u);
    EXPECT_EQ(c.get(at(path, ads::rlid)), 0x1234u);
    EXPECT_EQ(c.get(at(path, ads::sl)), 3u);
    EXPECT_EQ(c.get(at(path, ads::vhca_port_num)), 2u);
    EXPECT_EQ(c.get(at(path, ads::grh)), 0u);
    // RoCE without a GRH vector is refused.
    be::RoceExtra r;
    r.roce = true;
    EXPECT_THROW(be::init2rtr_cmd(0x11, a, r), gv::InvalidUsage);
}

TEST(Mlx5Commands, Rtr2RtsAndTheOthers) {
    ibv_qp_attr a{};
    a.sq_psn = 0xfedcba;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 6;
    a.max_rd_atomic = 8;
    Cmd c = be::rtr2rts_cmd(0x22, a);
    EXPECT_EQ(be16_at(c, 0), 0x504);
    const Field q = rtr2rts_qp_in::qpc;
    EXPECT_EQ(c.get(at(q, qpc::next_send_psn)), 0xfedcbau);
    EXPECT_EQ(c.get(at(q, qpc::retry_count)), 7u);
    EXPECT_EQ(c.get(at(q, qpc::rnr_retry)), 6u);
    EXPECT_EQ(c.get(at(q, qpc::log_sra_max)), 3u);
    EXPECT_EQ(c.get(at(at(q, qpc::primary_address_path), ads::ack_timeout)), 14u);
    Cmd e = be::qp_2err_cmd(0x22), r = be::qp_2rst_cmd(0x22), s = be::query_qp_cmd(0x22);
    EXPECT_EQ(be16_at(e, 0), 0x507);
    EXPECT_EQ(be16_at(r, 0), 0x50a);
    EXPECT_EQ(be16_at(s, 0), 0x50b);
    for (const Cmd* x : {&e, &r, &s}) {
        EXPECT_EQ(x->bytes(), 16u);
        EXPECT_EQ(x->get(qp_2err_in::qpn), 0x22u);
    }
}

TEST(Mlx5Commands, DepthsStatesAndStatus) {
    EXPECT_EQ(be::log_depth(0), 0u);
    EXPECT_EQ(be::log_depth(1), 0u);
    EXPECT_EQ(be::log_depth(2), 1u);
    EXPECT_EQ(be::log_depth(3), 1u);  // never above what was granted
    EXPECT_EQ(be::log_depth(16), 4u);
    EXPECT_EQ(be::qp_state_from_prm(0), gv::QpState::Reset);
    EXPECT_EQ(be::qp_state_from_prm(3), gv::QpState::Rts);
    EXPECT_EQ(be::qp_state_from_prm(4), gv::QpState::Sqe);
    EXPECT_EQ(be::qp_state_from_prm(5), gv::QpState::Sqd);
    EXPECT_EQ(be::qp_state_from_prm(6), gv::QpState::Error);
    EXPECT_EQ(be::qp_state_from_prm(9), gv::QpState::Error);
    std::string s = be::cmd_status_text("CREATE_QP", 3, 0x1234abcd);
    EXPECT_NE(s.find("BAD_PARAM"), std::string::npos) << s;
    EXPECT_NE(s.find("0x1234abcd"), std::string::npos) << s;
}
