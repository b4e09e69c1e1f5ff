// Reading a posted WQE back: a view over one WQE of a send ring that decodes its segments
// and checks its structure the way a NIC does before it executes anything, saying which
// syndrome each violation gets. Whoever consumes WQEs uses it: the software device's
// executor, and a proxy that turns WQEs into verbs calls. Written once, __host__ __device__,
// on the segment decoders of wqe.cuh; tests/unit/mlx5_reader_test.cpp checks it against
// WQEs built by rdma-core's helpers.
#pragma once

#include "gpuverbs/mlx5/wqe.cuh"

namespace gv::mlx5 {

// ---- opcodes by segment layout -------------------------------------------------------

GV_HOST_DEVICE bool is_atomic(uint8_t op) {
    return op == MLX5_OPCODE_ATOMIC_CS || op == MLX5_OPCODE_ATOMIC_FA;
}
/// Opcodes whose ctrl segment is followed by a remote-address segment.
GV_HOST_DEVICE bool has_raddr(uint8_t op) {
    return op == MLX5_OPCODE_RDMA_WRITE || op == MLX5_OPCODE_RDMA_WRITE_IMM || op == MLX5_OPCODE_RDMA_READ ||
           is_atomic(op);
}
GV_HOST_DEVICE bool is_send(uint8_t op) { return op == MLX5_OPCODE_SEND || op == MLX5_OPCODE_SEND_IMM; }
/// Opcodes that consume a receive WQE on the responder.
GV_HOST_DEVICE bool consumes_receive(uint8_t op) { return op == MLX5_OPCODE_RDMA_WRITE_IMM || is_send(op); }
/// The opcodes this layer knows (any other is LOCAL_QP_OP_ERR).
GV_HOST_DEVICE bool opcode_known(uint8_t op) { return op == MLX5_OPCODE_NOP || has_raddr(op) || is_send(op); }

// ---- checks --------------------------------------------------------------------------

/// What a WQE is checked against: the QP it was posted to and that QP's send limits.
struct WqeLimits {
    uint32_t qpn;
    uint32_t max_inline;  ///< largest inline payload, bytes
    uint32_t max_sge;     ///< most data segments in one WQE
};

/// A structural violation: the syndrome of the error CQE it produces (0: none), and the
/// 16-byte unit where it was found (ds for a violation of the whole gather list: its total
/// length). A consumer that resolves data segments in order resolves those before `unit`
/// first, so a bad key earlier in the list reports before a malformed later segment.
struct Violation {
    uint8_t syndrome;
    uint8_t unit;
};

/// An inline payload as up to two pieces of the ring (the second at the ring's start).
struct InlinePayload {
    const uint8_t* first;
    uint32_t first_len;
    const uint8_t* second;
    uint32_t second_len;
    GV_HOST_DEVICE uint32_t length() const { return first_len + second_len; }
};

// ---- the reader ------------------------------------------------------------------------

/// A view over the WQE at WQEBB position `pos` of a send ring of 2^log_bb WQEBBs. Reads the
/// ring only, with plain loads: the caller acquired the WQE's publication first (the
/// doorbell record, or whatever published it).
class WqeReader {
  public:
    /// Loads the first WQEBB (ctrl, and the raddr and first data segments of most WQEs) in
    /// four independent 16-byte loads: no load waits for another's result, the latency of
    /// one. Later units are loaded when asked for.
    GV_HOST_DEVICE WqeReader(const uint8_t* ring, uint32_t log_bb, unsigned long long pos)
        : ring_(ring), pos_(pos), log_bb_(log_bb) {
        // A WQEBB never straddles the ring's end (the ring is whole WQEBBs).
        const auto* first = reinterpret_cast<const Unit*>(wqe_seg(ring, log_bb, pos, 0));
        for (int i = 0; i < 4; ++i) bb_[i] = first[i];
        c_ = read_ctrl_seg(reinterpret_cast<const mlx5_wqe_ctrl_seg*>(&bb_[0]));
    }
    /// The same, with the first WQEBB read from `first_bb`: a copy of the ring's WQEBB at pos
    /// (an executor's staging buffer, filled in one parallel read from a ring in host memory).
    GV_HOST_DEVICE WqeReader(const uint8_t* ring, uint32_t log_bb, unsigned long long pos, const void* first_bb)
        : ring_(ring), pos_(pos), log_bb_(log_bb) {
        const auto* first = static_cast<const Unit*>(first_bb);
        for (int i = 0; i < 4; ++i) bb_[i] = first[i];
        c_ = read_ctrl_seg(reinterpret_cast<const mlx5_wqe_ctrl_seg*>(&bb_[0]));
    }

    GV_HOST_DEVICE const CtrlFields& ctrl() const { return c_; }
    GV_HOST_DEVICE uint8_t opcode() const { return c_.opcode; }
    GV_HOST_DEVICE uint32_t ds() const { return c_.ds; }
    /// WQEBBs the WQE occupies (a ds of 0, itself invalid, counts as one).
    GV_HOST_DEVICE uint32_t bbs() const { return c_.ds ? ds_to_bbs(c_.ds) : 1; }
    GV_HOST_DEVICE bool signaled() const { return (c_.fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) != 0; }
    /// The unit of the first data (or inline) segment: after ctrl, raddr and atomic segments.
    GV_HOST_DEVICE uint32_t first_data() const {
        return is_atomic(c_.opcode) ? 3 : has_raddr(c_.opcode) ? 2 : 1;
    }

    /// The k-th 16-byte unit: for k < 4 in this reader's copy of the first WQEBB (valid
    /// while the reader lives), else in the ring.
    GV_HOST_DEVICE const uint8_t* unit(uint32_t k) const {
        return k < 4 ? reinterpret_cast<const uint8_t*>(&bb_[k]) : wqe_seg(ring_, log_bb_, pos_, k);
    }
    /// The remote-address segment (unit 1) of a WQE with has_raddr(opcode).
    GV_HOST_DEVICE RaddrFields raddr() const {
        return read_raddr_seg(reinterpret_cast<const mlx5_wqe_raddr_seg*>(unit(1)));
    }
    /// The atomic segment (unit 2) of an atomic WQE.
    GV_HOST_DEVICE AtomicFields atomic() const {
        return read_atomic_seg(reinterpret_cast<const mlx5_wqe_atomic_seg*>(unit(2)));
    }
    /// The data segment at unit k.
    GV_HOST_DEVICE DataFields data(uint32_t k) const {
        return read_data_seg(reinterpret_cast<const mlx5_wqe_data_seg*>(unit(k)));
    }
    /// byte_count of the data or inline segment at unit k, host order.
    GV_HOST_DEVICE uint32_t byte_count(uint32_t k) const {
        return from_be32(reinterpret_cast<const mlx5_wqe_data_seg*>(unit(k))->byte_count);
    }
    GV_HOST_DEVICE bool is_inline(uint32_t k) const { return (byte_count(k) & MLX5_INLINE_SEG) != 0; }
    /// The payload of the inline segment at unit k (check_body accepted its length).
    GV_HOST_DEVICE InlinePayload inline_payload(uint32_t k) const {
        const uint32_t len = byte_count(k) & ~uint32_t(MLX5_INLINE_SEG);
        const InlineLayout l = inline_layout(log_bb_, pos_, k, len);
        return {ring_ + l.offset, l.first, ring_, l.second};
    }

    // The checks, each in the order a NIC applies them. validate() runs them all; a
    // consumer with checks of its own between them (the software device flushes in ERROR
    // after the size check, and checks the peer before the body) calls them one by one.

    /// The WQE lies within the `published` WQEBBs the doorbell record covers.
    GV_HOST_DEVICE bool fits(uint32_t published) const { return bbs() <= published; }

    /// The ctrl segment: it names its own position (`expect_index`, the position's low 16
    /// bits) and QP, a non-zero size and a known opcode. Returns the syndrome, or 0.
    GV_HOST_DEVICE uint8_t check_ctrl(uint16_t expect_index, uint32_t qpn) const {
        if (c_.wqe_index != expect_index || c_.qpn != qpn || c_.ds == 0 || !opcode_known(c_.opcode))
            return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
        return 0;
    }

    /// The segments after ctrl, per opcode: RDMA operations need a raddr segment; an atomic
    /// is exactly raddr, atomic and one 8-byte local data segment (ds 4); then either data
    /// segments (at most max_sge, 2 GiB in all) or one inline payload, alone, that fits both
    /// max_inline and the WQE's size (a READ has nothing to inline: it writes locally).
    GV_HOST_DEVICE Violation check_body(uint32_t max_inline, uint32_t max_sge) const {
        const uint8_t op = c_.opcode;
        if (op == MLX5_OPCODE_NOP) return {0, 0};
        if (has_raddr(op) && c_.ds < 2) return {MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, 1};
        if (is_atomic(op)) {
            if (c_.ds != 4) return {MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, 2};
            if (byte_count(3) != 8) return {MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, 3};
            return {0, 0};
        }
        uint32_t n = 0;
        uint64_t total = 0;
        for (uint32_t k = first_data(); k < c_.ds; ++k) {
            const uint32_t bc = byte_count(k);
            if (bc & MLX5_INLINE_SEG) {
                const uint8_t at = uint8_t(k);
                if (op == MLX5_OPCODE_RDMA_READ || n) return {MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, at};
                const uint32_t len = bc & ~uint32_t(MLX5_INLINE_SEG);
                if (len > max_inline) return {MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, at};
                if (inline_ds(len) > c_.ds - k) return {MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, at};
                return {0, 0};  // the payload fills the rest of the WQE; len < 2^31
            }
            if (n >= max_sge) return {MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, uint8_t(k)};
            ++n;
            total += data_len(bc);
        }
        if (total > kMaxMessage) return {MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, c_.ds};
        return {0, 0};
    }

    /// Every check, in order: size against the published WQEBBs, ctrl, body. A violation
    /// of the size or of ctrl is reported at unit 0.
    GV_HOST_DEVICE Violation validate(uint16_t expect_index, uint32_t published, const WqeLimits& lim) const {
        if (!fits(published)) return {MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, 0};
        if (uint8_t s = check_ctrl(expect_index, lim.qpn)) return {s, 0};
        return check_body(lim.max_inline, lim.max_sge);
    }

  private:
    struct Unit {
        uint64_t a, b;
    };
    static_assert(sizeof(Unit) == kDs, "one unit is one ds");
    Unit bb_[4];
    CtrlFields c_;
    const uint8_t* ring_;
    unsigned long long pos_;
    uint32_t log_bb_;
};

}  // namespace gv::mlx5
