#include "verbs/translate.hpp"

#include <cstring>

#include "verbs/status.hpp"

namespace gv::detail::verbs {

namespace {
constexpr uint8_t kFenceModeMask = 0xe0;  // fm: bits 7..5 of fm_ce_se (any fence mode)
}  // namespace

ibv_wr_opcode wr_opcode_of(uint8_t op) {
    switch (op) {
        case MLX5_OPCODE_RDMA_WRITE: return IBV_WR_RDMA_WRITE;
        case MLX5_OPCODE_RDMA_WRITE_IMM: return IBV_WR_RDMA_WRITE_WITH_IMM;
        case MLX5_OPCODE_RDMA_READ: return IBV_WR_RDMA_READ;
        case MLX5_OPCODE_SEND: return IBV_WR_SEND;
        case MLX5_OPCODE_SEND_IMM: return IBV_WR_SEND_WITH_IMM;
        case MLX5_OPCODE_ATOMIC_FA: return IBV_WR_ATOMIC_FETCH_AND_ADD;
        case MLX5_OPCODE_ATOMIC_CS: return IBV_WR_ATOMIC_CMP_AND_SWP;
        default: return IBV_WR_SEND;
    }
}

uint8_t mlx5_opcode_of(ibv_wr_opcode op) {
    switch (op) {
        case IBV_WR_RDMA_WRITE: return MLX5_OPCODE_RDMA_WRITE;
        case IBV_WR_RDMA_WRITE_WITH_IMM: return MLX5_OPCODE_RDMA_WRITE_IMM;
        case IBV_WR_RDMA_READ: return MLX5_OPCODE_RDMA_READ;
        case IBV_WR_SEND: return MLX5_OPCODE_SEND;
        case IBV_WR_SEND_WITH_IMM: return MLX5_OPCODE_SEND_IMM;
        case IBV_WR_ATOMIC_FETCH_AND_ADD: return MLX5_OPCODE_ATOMIC_FA;
        case IBV_WR_ATOMIC_CMP_AND_SWP: return MLX5_OPCODE_ATOMIC_CS;
        default: return 0xff;
    }
}

namespace {

/// The header of the work request both paths below write: the fields an RC work request uses,
/// each set (a memset of the whole struct, 128 bytes with its UD/MW/TSO unions, was a third of
/// the translation's time); the rest stays as the slot was made (zeroed once).
void begin_wr(const mlx5::WqeReader& w, uint64_t pos, bool user_signaled, SendSlot& out) {
    ibv_send_wr& wr = out.wr;
    const uint8_t op = w.opcode();
    wr.next = nullptr;
    wr.imm_data = 0;
    wr.wr.atomic.remote_addr = 0;
    wr.wr.atomic.compare_add = 0;
    wr.wr.atomic.swap = 0;
    wr.wr.atomic.rkey = 0;
    wr.wr_id = send_wr_id(pos, user_signaled);
    wr.opcode = wr_opcode_of(op);
    wr.sg_list = out.sge;
    const uint8_t f = w.ctrl().fm_ce_se;
    unsigned flags = 0;
    if (f & MLX5_WQE_CTRL_CQ_UPDATE) flags |= IBV_SEND_SIGNALED;
    if (f & kFenceModeMask) flags |= IBV_SEND_FENCE;
    if (f & MLX5_WQE_CTRL_SOLICITED) flags |= IBV_SEND_SOLICITED;
    wr.send_flags = flags;
    // The immediate is in wire order in both formats (ctrl.imm and ibv_send_wr.imm_data).
    if (op == MLX5_OPCODE_RDMA_WRITE_IMM || op == MLX5_OPCODE_SEND_IMM) wr.imm_data = w.ctrl().imm_be;
}

/// Copies an inline payload out of the ring (it may run past the ring's end: two pieces) and
/// points the work request's one entry at the copy (the provider copies it again during
/// ibv_post_send, so the buffer is free after). Returns the payload's length.
uint32_t take_inline(const mlx5::WqeReader& w, uint32_t k, SendSlot& out, uint8_t* inline_buf) {
    const mlx5::InlinePayload in = w.inline_payload(k);
    std::memcpy(inline_buf, in.first, in.first_len);
    if (in.second_len) std::memcpy(inline_buf + in.first_len, in.second, in.second_len);
    out.sge[0] = {reinterpret_cast<uint64_t>(inline_buf), in.length(), 0};
    out.wr.num_sge = 1;
    out.wr.send_flags |= IBV_SEND_INLINE;
    return in.length();
}

/// The WQE nearly every poster posts, in one pass: one WQEBB (ds <= 4) whose ctrl names its
/// own position and QP, a WRITE, WRITE_IMM, READ, SEND or SEND_IMM with exactly one data
/// segment, or a WRITE / SEND (with or without immediate) with one inline payload within
/// max_inline. Every check of the general path holds for such a WQE: one WQEBB fits any
/// published count (>= 1), its one segment is at most 2 GiB and within any granted max_sge
/// (>= 1), and its payload ends inside the WQE; so it translates to the same work request
/// (tests/verbs/proxy_translate_test.cpp, ProxyTranslate.OnePassMatchesTheGeneralPath, checks
/// them against each other). The general path reads the ctrl's fields, then the body twice
/// (checks, then the entries); this reads each once: 209 instructions a WQE instead of 327
/// (callgrind, gv_proxy_rate --sink --posters prefill, 8-byte WRITEs).
/// False (nothing written): not such a WQE.
bool translate_one_pass(const mlx5::WqeReader& w, uint64_t pos, const SendLimits& lim, SendSlot& out,
                        uint8_t* inline_buf, SendTranslation& t) {
    const mlx5::CtrlFields& c = w.ctrl();
    uint32_t k;  // the unit of the one data (or inline) segment
    switch (c.opcode) {
        case MLX5_OPCODE_RDMA_WRITE:
        case MLX5_OPCODE_RDMA_WRITE_IMM:
        case MLX5_OPCODE_RDMA_READ: k = 2; break;
        case MLX5_OPCODE_SEND:
        case MLX5_OPCODE_SEND_IMM: k = 1; break;
        default: return false;
    }
    if (c.ds <= k || c.ds > 4 || c.wqe_index != uint16_t(pos) || c.qpn != lim.qpn || lim.max_sge == 0) return false;
    const mlx5::DataFields d = w.data(k);
    const bool inl = (d.byte_count & MLX5_INLINE_SEG) != 0;
    if (inl) {
        const uint32_t len = d.byte_count & ~uint32_t(MLX5_INLINE_SEG);
        if (c.opcode == MLX5_OPCODE_RDMA_READ || len > lim.max_inline || mlx5::inline_ds(len) > c.ds - k) return false;
    } else if (c.ds != k + 1) {
        return false;  // more than one entry
    }
    begin_wr(w, pos, t.user_signaled, out);
    if (k == 2) {
        const mlx5::RaddrFields ra = w.raddr();
        out.wr.wr.rdma.remote_addr = ra.raddr;
        out.wr.wr.rdma.rkey = ra.rkey;
    }
    if (inl) {
        t.byte_len = take_inline(w, k, out, inline_buf);
    } else {
        // mlx5 reads a byte count of 0 as 2 GiB (mlx5::data_len); an ibv_sge says so with
        // 0x80000000 (0 would be an empty segment).
        const uint32_t len = uint32_t(mlx5::data_len(d.byte_count));
        out.sge[0] = {d.addr, len, d.lkey};
        out.wr.num_sge = 1;
        t.byte_len = len;
    }
    t.kind = SendKind::Post;
    return true;
}

/// What every translation reports whatever it finds: the opcode, CQ_UPDATE, the WQEBBs to pass.
SendTranslation translation_of(const mlx5::WqeReader& w) {
    SendTranslation t{};
    t.opcode = w.opcode();
    t.user_signaled = w.signaled();
    t.bbs = w.bbs();
    return t;
}

/// The general path, on a translation_of(w) already made: every check in the NIC's order,
/// then the body entry by entry.
SendTranslation translate_general(const mlx5::WqeReader& w, uint64_t pos, uint32_t published, const SendLimits& lim,
                                  SendSlot& out, uint8_t* inline_buf, SendTranslation t) {
    // The NIC's checks, in its order (mlx5::WqeReader): size against what is published, the
    // ctrl segment (its own index and QP, a size, a known opcode), then the body.
    if (!w.fits(published)) {
        t.kind = SendKind::Malformed;
        t.syndrome = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
        t.oversize = true;
        t.bbs = 1;  // its size is not to be trusted: pass the ctrl's WQEBB only, as the device does
        return t;
    }
    if (uint8_t s = w.check_ctrl(uint16_t(pos), lim.qpn)) {
        t.kind = SendKind::Malformed;
        t.syndrome = s;
        return t;
    }
    const uint8_t op = w.opcode();
    if (op == MLX5_OPCODE_NOP) {
        t.kind = SendKind::Nop;
        return t;
    }
    const mlx5::Violation v = w.check_body(lim.max_inline, lim.max_sge);
    if (v.syndrome) {
        t.kind = SendKind::Malformed;
        t.syndrome = v.syndrome;
        return t;
    }

    begin_wr(w, pos, t.user_signaled, out);
    ibv_send_wr& wr = out.wr;
    if (mlx5::is_atomic(op)) {
        const mlx5::RaddrFields ra = w.raddr();
        const mlx5::AtomicFields at = w.atomic();
        const mlx5::DataFields d = w.data(3);  // check_body: exactly one 8-byte segment
        wr.wr.atomic.remote_addr = ra.raddr;
        wr.wr.atomic.rkey = ra.rkey;
        if (op == MLX5_OPCODE_ATOMIC_FA) {
            wr.wr.atomic.compare_add = at.swap_add;
        } else {
            wr.wr.atomic.compare_add = at.compare;
            wr.wr.atomic.swap = at.swap_add;
        }
        out.sge[0] = {d.addr, 8, d.lkey};
        wr.num_sge = 1;
        t.byte_len = 8;
        t.kind = SendKind::Post;
        return t;
    }
    if (mlx5::has_raddr(op)) {
        const mlx5::RaddrFields ra = w.raddr();
        wr.wr.rdma.remote_addr = ra.raddr;
        wr.wr.rdma.rkey = ra.rkey;
    }
    uint64_t total = 0;
    int n = 0;
    for (uint32_t k = w.first_data(); k < w.ds(); ++k) {
        const mlx5::DataFields d = w.data(k);
        if (d.byte_count & MLX5_INLINE_SEG) {
            // check_body accepted it: alone, within max_inline and within the WQE.
            t.byte_len = take_inline(w, k, out, inline_buf);
            t.kind = SendKind::Post;
            return t;
        }
        // A byte count of 0 is 2 GiB, as in translate_one_pass.
        out.sge[n++] = {d.addr, uint32_t(mlx5::data_len(d.byte_count)), d.lkey};
        total += mlx5::data_len(d.byte_count);
    }
    wr.num_sge = n;
    t.byte_len = uint32_t(total);
    t.kind = SendKind::Post;
    return t;
}

}  // namespace

SendTranslation translate_send(const uint8_t* ring, uint32_t log_bb, uint64_t pos, uint32_t published,
                               const SendLimits& lim, SendSlot& out, uint8_t* inline_buf) {
    const mlx5::WqeReader w(ring, log_bb, pos);
    SendTranslation t = translation_of(w);
    if (translate_one_pass(w, pos, lim, out, inline_buf, t)) return t;
    return translate_general(w, pos, published, lim, out, inline_buf, t);
}

SendTranslation translate_send_general(const mlx5::WqeReader& w, uint64_t pos, uint32_t published,
                                       const SendLimits& lim, SendSlot& out, uint8_t* inline_buf) {
    return translate_general(w, pos, published, lim, out, inline_buf, translation_of(w));
}

bool translate_recv(const uint8_t* wqe, uint32_t stride, uint64_t index, uint32_t max_sge, RecvSlot& out) {
    ibv_recv_wr& wr = out.wr;
    std::memset(&wr, 0, sizeof wr);
    wr.wr_id = recv_wr_id(index);
    wr.sg_list = out.sge;
    const auto* seg = reinterpret_cast<const mlx5_wqe_data_seg*>(wqe);
    const uint32_t cap = stride / 16;
    int n = 0;
    for (uint32_t i = 0; i < cap; ++i) {
        const mlx5::DataFields d = mlx5::read_data_seg(&seg[i]);
        if (d.lkey == MLX5_INVALID_LKEY) break;  // the list's end marker (a short list)
        if (uint32_t(n) >= max_sge || uint32_t(n) >= kMaxRecvSge) return false;
        out.sge[n++] = {d.addr, uint32_t(mlx5::data_len(d.byte_count)), d.lkey};
    }
    wr.num_sge = n;
    return true;
}

namespace {
/// An error CQE's syndrome and vendor byte for a status: the exact twin where mlx5 has one,
/// else the nearest class with the ibv_wc_status itself in the vendor byte.
void error_fields(const ibv_wc& wc, mlx5::CqeFields& f) {
    f.syndrome = wc_status_to_syndrome(wc.status);
    f.vendor_err = wc_status_exact(wc.status) ? uint8_t(wc.vendor_err) : uint8_t(wc.status);
}
}  // namespace

mlx5::CqeFields send_cqe(const ibv_wc& wc, uint32_t qpn, uint64_t pos, uint8_t opcode, uint32_t byte_len) {
    mlx5::CqeFields f{};
    f.qpn = qpn;
    f.wqe_counter = uint16_t(pos);
    f.wqe_opcode = opcode;
    if (wc.status == IBV_WC_SUCCESS) {
        f.cqe_opcode = MLX5_CQE_REQ;
        f.byte_cnt = byte_len;
    } else {
        f.cqe_opcode = MLX5_CQE_REQ_ERR;
        error_fields(wc, f);
    }
    return f;
}

mlx5::CqeFields recv_cqe(const ibv_wc& wc, uint32_t qpn, uint64_t index) {
    mlx5::CqeFields f{};
    f.qpn = qpn;
    f.wqe_counter = uint16_t(index);
    if (wc.status != IBV_WC_SUCCESS) {
        f.cqe_opcode = MLX5_CQE_RESP_ERR;
        error_fields(wc, f);
        return f;
    }
    if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) f.cqe_opcode = MLX5_CQE_RESP_WR_IMM;
    else if (wc.wc_flags & IBV_WC_WITH_IMM) f.cqe_opcode = MLX5_CQE_RESP_SEND_IMM;
    else f.cqe_opcode = MLX5_CQE_RESP_SEND;
    f.byte_cnt = wc.byte_len;
    // ibv_wc.imm_data is in network order, as the WQE carried it: the CQE takes it as is.
    if (wc.wc_flags & IBV_WC_WITH_IMM) f.imm_be = wc.imm_data;
    f.rqpn = wc.src_qp;
    return f;
}

mlx5::CqeFields local_send_cqe(uint32_t qpn, uint64_t pos, uint8_t opcode, uint8_t syndrome) {
    mlx5::CqeFields f{};
    f.qpn = qpn;
    f.wqe_counter = uint16_t(pos);
    f.wqe_opcode = opcode;
    f.cqe_opcode = syndrome ? MLX5_CQE_REQ_ERR : MLX5_CQE_REQ;
    f.syndrome = syndrome;
    return f;
}

mlx5::CqeFields local_recv_flush_cqe(uint32_t qpn, uint64_t index) {
    mlx5::CqeFields f{};
    f.qpn = qpn;
    f.wqe_counter = uint16_t(index);
    f.cqe_opcode = MLX5_CQE_RESP_ERR;
    f.syndrome = MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
    return f;
}

}  // namespace gv::detail::verbs
