// The verbs proxy's translation, as pure functions (no device, no thread): one published mlx5
// WQE into an ibv_send_wr, one receive WQE into an ibv_recv_wr, an ibv_wc back into the mlx5
// CQE fields the software device would write. The proxy loop (proxy.cpp) calls them; the unit
// tests (tests/verbs/proxy_translate_test.cpp) check every opcode and flag. docs/verbs.md has
// the table.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "gpuverbs/mlx5/cqe.cuh"
#include "gpuverbs/mlx5/wqe_reader.cuh"

namespace gv::detail::verbs {

/// Most data segments one send WQE carries (the software device's limit, 8, and the most a
/// WQE of 16 WQEBBs could hold are both above what any QP asks for; the QP's granted
/// max_send_sge is what is checked).
inline constexpr uint32_t kMaxSendSge = 16;
/// Most scatter entries one receive WQE carries (stride / 16 of the largest stride).
inline constexpr uint32_t kMaxRecvSge = 16;
/// Largest inline payload the translation copies out of the ring (an mlx5 WQE of 63 ds
/// holds at most 63 * 16 - 16 - 16 - 4 bytes of it).
inline constexpr uint32_t kMaxInlineCopy = 1024;

// ---- wr_id ------------------------------------------------------------------------------
//
// A work request's wr_id says what it came from, so a completion needs no lookup table:
//   bit 63      a receive (else a send)
//   bit 62      the WQE asked for a completion (CQ_UPDATE); else, if signaled at all, the
//               proxy signaled it internally (its completion makes no user CQE)
//   bits 0..47  the WQE's position: the WQEBB position of a send WQE, the index of a
//               receive WQE (counted forever, not modulo the ring)
inline constexpr uint64_t kWrRecv = 1ull << 63;
inline constexpr uint64_t kWrUserSignaled = 1ull << 62;
inline constexpr uint64_t kWrPosMask = (1ull << 48) - 1;

inline uint64_t send_wr_id(uint64_t pos, bool user_signaled) {
    return (pos & kWrPosMask) | (user_signaled ? kWrUserSignaled : 0);
}
inline uint64_t recv_wr_id(uint64_t index) { return (index & kWrPosMask) | kWrRecv; }
inline bool wr_is_recv(uint64_t wr_id) { return (wr_id & kWrRecv) != 0; }
inline bool wr_user_signaled(uint64_t wr_id) { return (wr_id & kWrUserSignaled) != 0; }
inline uint64_t wr_pos(uint64_t wr_id) { return wr_id & kWrPosMask; }
/// The full position of a completion whose wr_id carries the low 48 bits of it, given a
/// position `near` known to lie within 2^47 of it (the proxy's read position).
inline uint64_t wr_pos_near(uint64_t wr_id, uint64_t near) {
    const uint64_t lo = wr_pos(wr_id);
    uint64_t p = (near & ~kWrPosMask) | lo;
    if (p > near + (1ull << 47)) p -= 1ull << 48;
    else if (p + (1ull << 47) < near) p += 1ull << 48;
    return p;
}

// ---- send WQEs ---------------------------------------------------------------------------

/// One work request with its own scatter/gather array (a slot of the proxy's fixed batch).
struct SendSlot {
    ibv_send_wr wr;
    ibv_sge sge[kMaxSendSge];
};
struct RecvSlot {
    ibv_recv_wr wr;
    ibv_sge sge[kMaxRecvSge];
};

/// What a WQE is checked against: the QP, its limits (what the device code was told for
/// inline, what the verbs QP was granted for SGEs), and how many WQEBBs are published at it.
struct SendLimits {
    uint32_t qpn;
    uint32_t max_inline;
    uint32_t max_sge;
};

enum class SendKind : uint8_t {
    Post,       ///< a work request to post (`slot` filled)
    Nop,        ///< an mlx5 NOP: completed by the proxy, in order, without a work request
    Malformed,  ///< the reader's checks failed: completed by the proxy with `syndrome`
};

/// What translating one WQE gave.
struct SendTranslation {
    SendKind kind;
    uint8_t syndrome;    ///< Malformed: the requester syndrome (mlx5::WqeReader's checks)
    uint8_t opcode;      ///< the WQE's opcode (what its CQE reports)
    bool user_signaled;  ///< CQ_UPDATE was set
    bool oversize;       ///< Malformed: larger than what is published (reported so even in ERROR)
    uint32_t bbs;        ///< WQEBBs to pass (1 for a WQE larger than what is published)
    uint32_t byte_len;   ///< what the success CQE reports (the software device's byte count)
};

/// Translates the WQE at WQEBB position `pos` of a send ring of 2^log_bb WQEBBs, of which
/// `published` (>= 1) are published from pos on. Post: `out` holds the work request (wr_id,
/// opcode, flags, immediate, remote address, atomic operands, gather list; `next` null). An
/// inline payload is copied into `inline_buf` (kMaxInlineCopy bytes; the payload may wrap
/// the ring) and posted with IBV_SEND_INLINE from there. IBV_SEND_SIGNALED is set when the
/// WQE asks for a completion; the proxy may add it (internal signaling). Only the fields an RC
/// work request uses are written: `out` must have been zeroed once (value-initialized).
SendTranslation translate_send(const uint8_t* ring, uint32_t log_bb, uint64_t pos, uint32_t published,
                               const SendLimits& lim, SendSlot& out, uint8_t* inline_buf);

/// translate_send's general path alone, on a reader of the WQE at `pos`: every check in the
/// NIC's order, then the body entry by entry. translate_send takes the common WQE (one WQEBB,
/// one data segment or one inline payload) on a path of one pass first; the tests check
/// that both give the same.
SendTranslation translate_send_general(const mlx5::WqeReader& w, uint64_t pos, uint32_t published,
                                       const SendLimits& lim, SendSlot& out, uint8_t* inline_buf);

/// The ibv_wr_opcode of an mlx5 opcode that is posted (IBV_WR_SEND for others; check first).
ibv_wr_opcode wr_opcode_of(uint8_t mlx5_opcode);
/// The mlx5 opcode of an ibv_wr_opcode the proxy posts (0xff for others).
uint8_t mlx5_opcode_of(ibv_wr_opcode op);

// ---- receive WQEs ------------------------------------------------------------------------

/// Translates the receive WQE of index `index` at `wqe` (a stride of `stride` bytes): its data
/// segments up to the first MLX5_INVALID_LKEY or the stride's end. Returns false when it holds
/// more than max_sge entries (the verbs QP cannot take it); `out.wr.next` is null.
bool translate_recv(const uint8_t* wqe, uint32_t stride, uint64_t index, uint32_t max_sge, RecvSlot& out);

// ---- completions -------------------------------------------------------------------------

/// The CQE of a send work request's completion: REQ with the WQE's opcode and the byte
/// count the proxy kept (ibv_wc leaves byte_len undefined for sends), or REQ_ERR with the
/// status's syndrome. `vendor_err` carries the ibv_wc_status itself when the syndrome is not
/// its exact twin (docs/verbs.md), else the wc's vendor_err.
mlx5::CqeFields send_cqe(const ibv_wc& wc, uint32_t qpn, uint64_t pos, uint8_t opcode, uint32_t byte_len);
/// The CQE of a receive's completion: RESP_SEND / RESP_SEND_IMM / RESP_WR_IMM with the byte
/// count, the immediate (wire order, as the software device writes it) and the sender's QP;
/// RESP_ERR with the syndrome.
mlx5::CqeFields recv_cqe(const ibv_wc& wc, uint32_t qpn, uint64_t index);
/// A CQE the proxy writes itself: success of a NOP, a malformed WQE's error, or a flush.
mlx5::CqeFields local_send_cqe(uint32_t qpn, uint64_t pos, uint8_t opcode, uint8_t syndrome);
mlx5::CqeFields local_recv_flush_cqe(uint32_t qpn, uint64_t index);

}  // namespace gv::detail::verbs
