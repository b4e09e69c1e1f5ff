// The ConnectX PRM (programmer's reference manual) layouts the mlx5 backend writes through
// DevX: CREATE_CQ and its CQ context, CREATE_QP and its QP context with the address path,
// and the QP state changes (RST2INIT, INIT2RTR, RTR2RTS, 2ERR, 2RST, QUERY_QP). Written once,
// here, and nowhere else.
//
// Every field is named as in the PRM and in rdma-core's providers/mlx5/mlx5_ifc.h, with its
// bit offset from the start of its structure and its width in bits. Bit 0 is the most
// significant bit of byte 0: a structure is a sequence of big-endian 32-bit words, and a
// field of up to 32 bits lies inside one of them, as DEVX_SET (mlx5dv.h) assumes. Fields are
// set and read through one checked helper (Cmd::set / Cmd::get): a value wider than its field,
// or a field outside the buffer, is an error, never a silent truncation.
//
// The offsets are tested against the ones rdma-core documents (tests/mlx5/prm_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace gv::detail::prm {

/// One field of a PRM structure: where it starts (bits from the structure's start) and how
/// wide it is. `in` names the enclosing field when the field was placed inside another one
/// (at()), for error messages.
struct Field {
    uint32_t bit;
    uint32_t width;
    const char* name;
    const char* in = "";
};

/// A field of up to 32 bits stays inside one big-endian word; a wider one (64-bit addresses,
/// the 128-bit GID, a nested structure) starts on a word and covers whole words.
constexpr bool well_formed(Field f) {
    return f.width > 0 && (f.width <= 32 ? (f.bit % 32) + f.width <= 32 : f.bit % 32 == 0 && f.width % 32 == 0);
}

/// `inner`, a field of the structure that `outer` (a field holding a whole structure) holds,
/// as a field of the outer structure. A field that does not fit is a compile-time error when
/// used in a constant expression.
constexpr Field at(Field outer, Field inner) {
    return inner.bit + inner.width <= outer.width && well_formed(inner)
               ? Field{outer.bit + inner.bit, inner.width, inner.name, outer.name}
               : throw "PRM field outside its enclosing structure";
}

// ---- command opcodes and field values (mlx5_ifc.h) ------------------------------------
inline constexpr uint16_t kCmdCreateCq = 0x400;
inline constexpr uint16_t kCmdCreateQp = 0x500;
inline constexpr uint16_t kCmdRst2InitQp = 0x502;
inline constexpr uint16_t kCmdInit2RtrQp = 0x503;
inline constexpr uint16_t kCmdRtr2RtsQp = 0x504;
inline constexpr uint16_t kCmd2ErrQp = 0x507;
inline constexpr uint16_t kCmd2RstQp = 0x50a;
inline constexpr uint16_t kCmdQueryQp = 0x50b;

inline constexpr uint32_t kQpcStRc = 0x0;            ///< qpc.st: reliable connection
inline constexpr uint32_t kQpcPmStateMigrated = 0x3;  ///< qpc.pm_state: no path migration
inline constexpr uint32_t kQpcAtomicModeUpTo8B = 0x3;  ///< qpc.atomic_mode: 8-byte IB atomics
inline constexpr uint32_t kQpcTsFormatFreeRunning = 0x0;
inline constexpr uint32_t kQpcTsFormatDefault = 0x1;
inline constexpr uint32_t kCqcCqeSz64 = 0x0;  ///< cqc.cqe_sz: 64-byte CQEs
/// log_page_size fields count from the adapter's 4 KiB page (MLX5_ADAPTER_PAGE_SHIFT).
inline constexpr uint32_t kAdapterPageShift = 12;

/// qpc.state values (QUERY_QP).
enum class QpcState : uint32_t { Rst = 0, Init = 1, Rtr = 2, Rts = 3, Sqer = 4, Sqd = 5, Err = 6 };

// ---- CQ -------------------------------------------------------------------------------
/// The CQ context (mlx5_ifc_cqc_bits).
namespace cqc {
inline constexpr uint32_t kBits = 0x200;
inline constexpr Field status{0x0, 0x4, "cqc.status"};
inline constexpr Field dbr_umem_valid{0x6, 0x1, "cqc.dbr_umem_valid"};
inline constexpr Field cqe_sz{0x8, 0x3, "cqc.cqe_sz"};
inline constexpr Field cc{0xb, 0x1, "cqc.cc"};
inline constexpr Field scqe_break_moderation_en{0xd, 0x1, "cqc.scqe_break_moderation_en"};
inline constexpr Field oi{0xe, 0x1, "cqc.oi"};
inline constexpr Field cq_period_mode{0xf, 0x2, "cqc.cq_period_mode"};
inline constexpr Field cqe_comp_en{0x11, 0x1, "cqc.cqe_comp_en"};
inline constexpr Field mini_cqe_res_format{0x12, 0x2, "cqc.mini_cqe_res_format"};
inline constexpr Field st{0x14, 0x4, "cqc.st"};
inline constexpr Field dbr_umem_id{0x20, 0x20, "cqc.dbr_umem_id"};
inline constexpr Field page_offset{0x54, 0x6, "cqc.page_offset"};
inline constexpr Field log_cq_size{0x63, 0x5, "cqc.log_cq_size"};
inline constexpr Field uar_page{0x68, 0x18, "cqc.uar_page"};
inline constexpr Field cq_period{0x84, 0xc, "cqc.cq_period"};
inline constexpr Field cq_max_count{0x90, 0x10, "cqc.cq_max_count"};
/// The EQ completions are reported to. Older layouts name only its low byte (c_eqn at 0xb8,
/// 8 bits; the word's upper 24 bits reserved): the same bytes for every EQ number < 256.
inline constexpr Field c_eqn_or_apu_element{0xa0, 0x20, "cqc.c_eqn_or_apu_element"};
inline constexpr Field log_page_size{0xc3, 0x5, "cqc.log_page_size"};
inline constexpr Field last_notified_index{0x108, 0x18, "cqc.last_notified_index"};
inline constexpr Field last_solicit_index{0x128, 0x18, "cqc.last_solicit_index"};
inline constexpr Field consumer_counter{0x148, 0x18, "cqc.consumer_counter"};
inline constexpr Field producer_counter{0x168, 0x18, "cqc.producer_counter"};
/// The doorbell record's address; with dbr_umem_valid, its byte offset in umem dbr_umem_id
/// (8-byte aligned: the low 3 bits are reserved).
inline constexpr Field dbr_addr{0x1c0, 0x40, "cqc.dbr_addr"};
}  // namespace cqc

namespace create_cq_in {
inline constexpr uint32_t kBits = 0x880;  ///< without the page list (pas), unused with a umem
inline constexpr Field opcode{0x0, 0x10, "create_cq_in.opcode"};
inline constexpr Field uid{0x10, 0x10, "create_cq_in.uid"};
inline constexpr Field op_mod{0x30, 0x10, "create_cq_in.op_mod"};
inline constexpr Field cq_context{0x80, cqc::kBits, "create_cq_in.cq_context"};
inline constexpr Field cq_umem_offset{0x280, 0x40, "create_cq_in.cq_umem_offset"};
inline constexpr Field cq_umem_id{0x2c0, 0x20, "create_cq_in.cq_umem_id"};
inline constexpr Field cq_umem_valid{0x2e0, 0x1, "create_cq_in.cq_umem_valid"};
}  // namespace create_cq_in

namespace create_cq_out {
inline constexpr uint32_t kBits = 0x80;
inline constexpr Field status{0x0, 0x8, "create_cq_out.status"};
inline constexpr Field syndrome{0x20, 0x20, "create_cq_out.syndrome"};
inline constexpr Field cqn{0x48, 0x18, "create_cq_out.cqn"};
}  // namespace create_cq_out

// ---- QP -------------------------------------------------------------------------------
/// An address path (mlx5_ifc_ads_bits): where the QP's packets go.
namespace ads {
inline constexpr uint32_t kBits = 0x160;
inline constexpr Field fl{0x0, 0x1, "ads.fl"};  ///< force loopback
inline constexpr Field free_ar{0x1, 0x1, "ads.free_ar"};
inline constexpr Field pkey_index{0x10, 0x10, "ads.pkey_index"};
inline constexpr Field grh{0x28, 0x1, "ads.grh"};
inline constexpr Field mlid{0x29, 0x7, "ads.mlid"};
inline constexpr Field rlid{0x30, 0x10, "ads.rlid"};
inline constexpr Field ack_timeout{0x40, 0x5, "ads.ack_timeout"};
inline constexpr Field src_addr_index{0x48, 0x8, "ads.src_addr_index"};  ///< the source GID index
inline constexpr Field stat_rate{0x54, 0x4, "ads.stat_rate"};
inline constexpr Field hop_limit{0x58, 0x8, "ads.hop_limit"};
inline constexpr Field tclass{0x64, 0x8, "ads.tclass"};
inline constexpr Field flow_label{0x6c, 0x14, "ads.flow_label"};
inline constexpr Field rgid_rip{0x80, 0x80, "ads.rgid_rip"};  ///< the destination GID (16 bytes)
inline constexpr Field f_dscp{0x104, 0x1, "ads.f_dscp"};
inline constexpr Field f_ecn{0x105, 0x1, "ads.f_ecn"};
inline constexpr Field f_eth_prio{0x107, 0x1, "ads.f_eth_prio"};
inline constexpr Field ecn{0x108, 0x2, "ads.ecn"};
inline constexpr Field dscp{0x10a, 0x6, "ads.dscp"};
inline constexpr Field udp_sport{0x110, 0x10, "ads.udp_sport"};
inline constexpr Field dei_cfi{0x120, 0x1, "ads.dei_cfi"};
inline constexpr Field eth_prio{0x121, 0x3, "ads.eth_prio"};
inline constexpr Field sl{0x124, 0x4, "ads.sl"};
inline constexpr Field vhca_port_num{0x128, 0x8, "ads.vhca_port_num"};
inline constexpr Field rmac_47_32{0x130, 0x10, "ads.rmac_47_32"};
inline constexpr Field rmac_31_0{0x140, 0x20, "ads.rmac_31_0"};
}  // namespace ads

/// The QP context (mlx5_ifc_qpc_bits).
namespace qpc {
inline constexpr uint32_t kBits = 0x740;
inline constexpr Field state{0x0, 0x4, "qpc.state"};
inline constexpr Field lag_tx_port_affinity{0x4, 0x4, "qpc.lag_tx_port_affinity"};
inline constexpr Field st{0x8, 0x8, "qpc.st"};
inline constexpr Field pm_state{0x13, 0x2, "qpc.pm_state"};
inline constexpr Field wq_signature{0x20, 0x1, "qpc.wq_signature"};
inline constexpr Field block_lb_mc{0x21, 0x1, "qpc.block_lb_mc"};
inline constexpr Field pd{0x28, 0x18, "qpc.pd"};
inline constexpr Field mtu{0x40, 0x3, "qpc.mtu"};  ///< IB MTU code (IBV_MTU_*: 1 = 256 .. 5 = 4096)
inline constexpr Field log_msg_max{0x43, 0x5, "qpc.log_msg_max"};
inline constexpr Field log_rq_size{0x49, 0x4, "qpc.log_rq_size"};
inline constexpr Field log_rq_stride{0x4d, 0x3, "qpc.log_rq_stride"};  ///< log2(stride) - 4
inline constexpr Field no_sq{0x50, 0x1, "qpc.no_sq"};
inline constexpr Field log_sq_size{0x51, 0x4, "qpc.log_sq_size"};  ///< log2 of WQEBBs
inline constexpr Field ts_format{0x58, 0x2, "qpc.ts_format"};
inline constexpr Field rlky{0x5b, 0x1, "qpc.rlky"};
inline constexpr Field counter_set_id{0x60, 0x8, "qpc.counter_set_id"};
inline constexpr Field uar_page{0x68, 0x18, "qpc.uar_page"};
inline constexpr Field user_index{0x88, 0x18, "qpc.user_index"};
inline constexpr Field log_page_size{0xa3, 0x5, "qpc.log_page_size"};
inline constexpr Field remote_qpn{0xa8, 0x18, "qpc.remote_qpn"};
inline constexpr Field primary_address_path{0xc0, ads::kBits, "qpc.primary_address_path"};
inline constexpr Field secondary_address_path{0x220, ads::kBits, "qpc.secondary_address_path"};
inline constexpr Field log_ack_req_freq{0x380, 0x4, "qpc.log_ack_req_freq"};
inline constexpr Field log_sra_max{0x388, 0x3, "qpc.log_sra_max"};  ///< log2 of outgoing READ/atomic depth
inline constexpr Field retry_count{0x38d, 0x3, "qpc.retry_count"};
inline constexpr Field rnr_retry{0x390, 0x3, "qpc.rnr_retry"};
inline constexpr Field fre{0x394, 0x1, "qpc.fre"};
inline constexpr Field next_send_psn{0x3c8, 0x18, "qpc.next_send_psn"};
inline constexpr Field cqn_snd{0x3e8, 0x18, "qpc.cqn_snd"};
inline constexpr Field last_acked_psn{0x448, 0x18, "qpc.last_acked_psn"};
inline constexpr Field log_rra_max{0x488, 0x3, "qpc.log_rra_max"};  ///< log2 of incoming READ/atomic depth
inline constexpr Field atomic_mode{0x48c, 0x4, "qpc.atomic_mode"};
inline constexpr Field rre{0x490, 0x1, "qpc.rre"};  ///< remote read enable
inline constexpr Field rwe{0x491, 0x1, "qpc.rwe"};  ///< remote write enable
inline constexpr Field rae{0x492, 0x1, "qpc.rae"};  ///< remote atomic enable
inline constexpr Field page_offset{0x494, 0x6, "qpc.page_offset"};
inline constexpr Field min_rnr_nak{0x4a3, 0x5, "qpc.min_rnr_nak"};
inline constexpr Field next_rcv_psn{0x4a8, 0x18, "qpc.next_rcv_psn"};
inline constexpr Field cqn_rcv{0x4e8, 0x18, "qpc.cqn_rcv"};
/// The doorbell record's address; with dbr_umem_valid, its byte offset in umem dbr_umem_id.
inline constexpr Field dbr_addr{0x500, 0x40, "qpc.dbr_addr"};
inline constexpr Field q_key{0x540, 0x20, "qpc.q_key"};
inline constexpr Field rq_type{0x565, 0x3, "qpc.rq_type"};
inline constexpr Field srqn_rmpn_xrqn{0x568, 0x18, "qpc.srqn_rmpn_xrqn"};
inline constexpr Field hw_sq_wqebb_counter{0x5a0, 0x10, "qpc.hw_sq_wqebb_counter"};
inline constexpr Field sw_sq_wqebb_counter{0x5b0, 0x10, "qpc.sw_sq_wqebb_counter"};
inline constexpr Field hw_rq_counter{0x5c0, 0x20, "qpc.hw_rq_counter"};
inline constexpr Field sw_rq_counter{0x5e0, 0x20, "qpc.sw_rq_counter"};
inline constexpr Field cs_req{0x630, 0x8, "qpc.cs_req"};
inline constexpr Field cs_res{0x638, 0x8, "qpc.cs_res"};
inline constexpr Field dbr_umem_valid{0x683, 0x1, "qpc.dbr_umem_valid"};
inline constexpr Field dbr_umem_id{0x720, 0x20, "qpc.dbr_umem_id"};
}  // namespace qpc

namespace create_qp_in {
inline constexpr uint32_t kBits = 0x880;  ///< without the page list (pas), unused with a umem
inline constexpr Field opcode{0x0, 0x10, "create_qp_in.opcode"};
inline constexpr Field uid{0x10, 0x10, "create_qp_in.uid"};
inline constexpr Field op_mod{0x30, 0x10, "create_qp_in.op_mod"};
inline constexpr Field opt_param_mask{0x80, 0x20, "create_qp_in.opt_param_mask"};
inline constexpr Field qpc{0xc0, qpc::kBits, "create_qp_in.qpc"};
/// Byte offset of the work queue in umem wq_umem_id (rdma-core's mlx5_ifc.h leaves these 64
/// bits unnamed, reserved_at_800; its PRM test structures call them
/// e_mtt_pointer_or_wq_umem_offset).
inline constexpr Field wq_umem_offset{0x800, 0x40, "create_qp_in.wq_umem_offset"};
inline constexpr Field wq_umem_id{0x840, 0x20, "create_qp_in.wq_umem_id"};
inline constexpr Field wq_umem_valid{0x860, 0x1, "create_qp_in.wq_umem_valid"};
}  // namespace create_qp_in

namespace create_qp_out {
inline constexpr uint32_t kBits = 0x80;
inline constexpr Field status{0x0, 0x8, "create_qp_out.status"};
inline constexpr Field syndrome{0x20, 0x20, "create_qp_out.syndrome"};
inline constexpr Field qpn{0x48, 0x18, "create_qp_out.qpn"};
}  // namespace create_qp_out

/// RST2INIT_QP, INIT2RTR_QP and RTR2RTS_QP share one layout (three structures of
/// mlx5_ifc.h with the same fields at the same places); named once per command all the same,
/// so the code says which transition it builds.
#define GV_PRM_QP_MODIFY_IN(ns)                                                  \
    namespace ns {                                                               \
    inline constexpr uint32_t kBits = 0x880;                                     \
    inline constexpr Field opcode{0x0, 0x10, #ns ".opcode"};                     \
    inline constexpr Field uid{0x10, 0x10, #ns ".uid"};                          \
    inline constexpr Field op_mod{0x30, 0x10, #ns ".op_mod"};                    \
    inline constexpr Field qpn{0x48, 0x18, #ns ".qpn"};                          \
    inline constexpr Field opt_param_mask{0x80, 0x20, #ns ".opt_param_mask"};    \
    inline constexpr Field qpc{0xc0, qpc::kBits, #ns ".qpc"};                    \
    }
GV_PRM_QP_MODIFY_IN(rst2init_qp_in)
GV_PRM_QP_MODIFY_IN(init2rtr_qp_in)
GV_PRM_QP_MODIFY_IN(rtr2rts_qp_in)
#undef GV_PRM_QP_MODIFY_IN

/// 2ERR_QP and 2RST_QP: the QP number alone (the Linux kernel's qp_2err_in / qp_2rst_in;
/// the same first words as every QP command).
#define GV_PRM_QP_QPN_IN(ns)                                 \
    namespace ns {                                           \
    inline constexpr uint32_t kBits = 0x80;                  \
    inline constexpr Field opcode{0x0, 0x10, #ns ".opcode"}; \
    inline constexpr Field uid{0x10, 0x10, #ns ".uid"};      \
    inline constexpr Field op_mod{0x30, 0x10, #ns ".op_mod"}; \
    inline constexpr Field qpn{0x48, 0x18, #ns ".qpn"};      \
    }
GV_PRM_QP_QPN_IN(qp_2err_in)
GV_PRM_QP_QPN_IN(qp_2rst_in)
GV_PRM_QP_QPN_IN(query_qp_in)
#undef GV_PRM_QP_QPN_IN

namespace query_qp_out {
inline constexpr uint32_t kBits = 0x880;
inline constexpr Field status{0x0, 0x8, "query_qp_out.status"};
inline constexpr Field syndrome{0x20, 0x20, "query_qp_out.syndrome"};
inline constexpr Field opt_param_mask{0x80, 0x20, "query_qp_out.opt_param_mask"};
inline constexpr Field qpc{0xc0, qpc::kBits, "query_qp_out.qpc"};
}  // namespace query_qp_out

/// The first two words of every command's output.
namespace cmd_out {
inline constexpr uint32_t kBits = 0x80;
inline constexpr Field status{0x0, 0x8, "out.status"};
inline constexpr Field syndrome{0x20, 0x20, "out.syndrome"};
}  // namespace cmd_out

// ---- the checked setter ----------------------------------------------------------------

/// "qpc.log_sq_size" or "create_qp_in.qpc/qpc.log_sq_size".
std::string field_name(const Field& f);

/// A PRM command or structure image: `bits` bits of big-endian words, zeroed. set() and get()
/// are the one way fields are written and read (DEVX_SET / DEVX_GET semantics, checked).
class Cmd {
public:
    Cmd(uint32_t bits, const char* what);
    /// Writes v into f. InvalidUsage when v does not fit f's width, when f lies outside the
    /// buffer or is not a well-formed field.
    void set(const Field& f, uint64_t v);
    uint64_t get(const Field& f) const;
    /// Copies n bytes into a byte-aligned field of exactly n bytes (the 16-byte GID).
    void set_bytes(const Field& f, const void* src, size_t n);
    void get_bytes(const Field& f, void* dst, size_t n) const;

    void* data() { return words_.data(); }
    const void* data() const { return words_.data(); }
    size_t bytes() const { return words_.size() * 4; }
    const char* what() const { return what_; }

private:
    void check(const Field& f) const;
    std::vector<uint32_t> words_;
    const char* what_;
};

/// The same checks and writes on a caller's buffer (what Cmd uses).
void set_field(void* buf, size_t buf_bytes, const Field& f, uint64_t v);
uint64_t get_field(const void* buf, size_t buf_bytes, const Field& f);

}  // namespace gv::detail::prm
