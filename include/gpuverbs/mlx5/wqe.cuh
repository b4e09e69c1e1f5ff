// The mlx5 work-queue layer: one short inline function per step of posting.
//
// Segment layouts and constants come from rdma-core's <infiniband/mlx5dv.h>; nothing
// here is a hand-written copy of them. Every function is __host__ __device__ so that a
// CPU thread builds the very same bytes a CUDA thread does. rdma-core's
// mlx5dv_set_ctrl_seg / mlx5dv_set_data_seg are the oracle (tests/unit/mlx5_conformance).
#pragma once

#include <infiniband/mlx5dv.h>

#include <cstring>

#include "gpuverbs/config.hpp"
#include "gpuverbs/device/atomic.cuh"

namespace gv::mlx5 {

static_assert(sizeof(mlx5_wqe_ctrl_seg) == 16, "ctrl segment is 16 bytes");
static_assert(sizeof(mlx5_wqe_raddr_seg) == 16, "raddr segment is 16 bytes");
static_assert(sizeof(mlx5_wqe_data_seg) == 16, "data segment is 16 bytes");
static_assert(sizeof(mlx5_wqe_atomic_seg) == 16, "atomic segment is 16 bytes");
static_assert(sizeof(mlx5_wqe_inl_data_seg) == 4, "inline header is 4 bytes");

/// One WQE basic block (WQEBB): the unit of send-queue positions.
inline constexpr uint32_t kWqeBb = MLX5_SEND_WQE_BB;
/// One "ds": the 16-byte unit a ctrl segment counts the WQE size in.
inline constexpr uint32_t kDs = 16;
/// Largest WQE the layer builds (ds is 6 bits wide): 63 * 16 bytes, i.e. 16 WQEBBs.
inline constexpr uint32_t kMaxDs = 63;

// ---- byte order ---------------------------------------------------------------------
GV_HOST_DEVICE uint32_t bswap32(uint32_t x) {
#if GV_DEVICE_CODE
    return __byte_perm(x, 0, 0x0123);
#else
    return __builtin_bswap32(x);
#endif
}
GV_HOST_DEVICE uint16_t bswap16(uint16_t x) { return uint16_t((x >> 8) | (x << 8)); }
GV_HOST_DEVICE uint64_t bswap64(uint64_t x) {
    return (uint64_t(bswap32(uint32_t(x))) << 32) | bswap32(uint32_t(x >> 32));
}
// All mlx5 multi-byte fields are big-endian; hosts and GPUs here are little-endian.
GV_HOST_DEVICE uint32_t to_be32(uint32_t x) { return bswap32(x); }
GV_HOST_DEVICE uint16_t to_be16(uint16_t x) { return bswap16(x); }
GV_HOST_DEVICE uint64_t to_be64(uint64_t x) { return bswap64(x); }
GV_HOST_DEVICE uint32_t from_be32(uint32_t x) { return bswap32(x); }
GV_HOST_DEVICE uint16_t from_be16(uint16_t x) { return bswap16(x); }
GV_HOST_DEVICE uint64_t from_be64(uint64_t x) { return bswap64(x); }

// ---- segments -----------------------------------------------------------------------

/// One 16-byte unit of a WQE (a segment), built in registers and stored whole: a GPU thread
/// writes it with one 16-byte store, where field-by-field stores would be three or four (each
/// a separate write over PCIe when the ring is host memory or a NIC's).
struct alignas(16) Unit {
    uint32_t w[4];
};

/// Stores a unit at dst (16-byte aligned: WQE units are). One vector store on a GPU.
GV_HOST_DEVICE void store_unit(void* dst, const Unit& u) {
#if GV_DEVICE_CODE
    *static_cast<uint4*>(dst) = make_uint4(u.w[0], u.w[1], u.w[2], u.w[3]);
#else
    std::memcpy(dst, &u, sizeof u);
#endif
}

/// A big-endian 64-bit field at words i, i+1 of a unit.
GV_HOST_DEVICE void put_be64(Unit& u, uint32_t i, uint64_t x) {
    const uint64_t be = to_be64(x);
    u.w[i] = uint32_t(be);
    u.w[i + 1] = uint32_t(be >> 32);
}

/// A ctrl segment: the same bytes as mlx5dv_set_ctrl_seg(), plus a zeroed reserved field.
GV_HOST_DEVICE Unit ctrl_unit(uint16_t pi, uint8_t opcode, uint8_t opmod, uint32_t qpn, uint8_t fm_ce_se,
                              uint8_t ds, uint8_t signature, uint32_t imm_be) {
    Unit u;
    u.w[0] = to_be32((uint32_t(opmod) << 24) | (uint32_t(pi) << 8) | opcode);
    u.w[1] = to_be32((qpn << 8) | ds);
    // Little-endian word 2 = bytes {signature, dci_stream_channel_id (2), fm_ce_se}.
    u.w[2] = uint32_t(signature) | (uint32_t(fm_ce_se) << 24);
    u.w[3] = imm_be;  // the caller passes the immediate already in wire order, as rdma-core
    return u;
}

/// A data (scatter/gather) segment: the bytes of mlx5dv_set_data_seg().
GV_HOST_DEVICE Unit data_unit(uint32_t length, uint32_t lkey, uint64_t addr) {
    Unit u;
    u.w[0] = to_be32(length);
    u.w[1] = to_be32(lkey);
    put_be64(u, 2, addr);
    return u;
}

/// A remote-address segment (raddr, rkey, reserved 0).
GV_HOST_DEVICE Unit raddr_unit(uint64_t raddr, uint32_t rkey) {
    Unit u;
    put_be64(u, 0, raddr);
    u.w[2] = to_be32(rkey);
    u.w[3] = 0;
    return u;
}

/// An atomic segment (swap or add, compare).
GV_HOST_DEVICE Unit atomic_unit(uint64_t swap_add, uint64_t compare) {
    Unit u;
    put_be64(u, 0, swap_add);
    put_be64(u, 2, compare);
    return u;
}

/// Writes a ctrl segment (ctrl_unit) with one 16-byte store.
GV_HOST_DEVICE void set_ctrl_seg(mlx5_wqe_ctrl_seg* seg, uint16_t pi, uint8_t opcode,
                                 uint8_t opmod, uint32_t qpn, uint8_t fm_ce_se, uint8_t ds,
                                 uint8_t signature, uint32_t imm_be) {
    store_unit(seg, ctrl_unit(pi, opcode, opmod, qpn, fm_ce_se, ds, signature, imm_be));
}

/// Writes a data (scatter/gather) segment (data_unit).
GV_HOST_DEVICE void set_data_seg(mlx5_wqe_data_seg* seg, uint32_t length, uint32_t lkey,
                                 uint64_t addr) {
    store_unit(seg, data_unit(length, lkey, addr));
}

GV_HOST_DEVICE void set_raddr_seg(mlx5_wqe_raddr_seg* seg, uint64_t raddr, uint32_t rkey) {
    store_unit(seg, raddr_unit(raddr, rkey));
}

GV_HOST_DEVICE void set_atomic_seg(mlx5_wqe_atomic_seg* seg, uint64_t swap_add,
                                   uint64_t compare) {
    store_unit(seg, atomic_unit(swap_add, compare));
}

/// Inline data header; the payload follows it directly in the WQE.
GV_HOST_DEVICE void set_inline_hdr(mlx5_wqe_inl_data_seg* seg, uint32_t length) {
    seg->byte_count = to_be32(length | MLX5_INLINE_SEG);
}

/// ds count of an inline payload of `len` bytes (4-byte header + payload, 16-byte units).
GV_HOST_DEVICE uint32_t inline_ds(uint32_t len) { return (4 + len + kDs - 1) / kDs; }

/// Byte offset of the k-th 16-byte unit of the WQE at WQEBB position `pos_bb` in a send ring
/// of 2^log_bb WQEBBs. A WQE that runs past the ring's end continues at its start, as on
/// mlx5: positions count WQEBBs forever, and the ring's size (a power of two) masks them.
GV_HOST_DEVICE uint64_t wqe_offset(uint32_t log_bb, unsigned long long pos_bb, uint32_t k) {
    const uint64_t bytes = uint64_t(kWqeBb) << log_bb;
    return (pos_bb * kWqeBb + uint64_t(k) * kDs) & (bytes - 1);
}

/// Address of the k-th 16-byte unit of the WQE at WQEBB position `pos_bb` (wqe_offset).
GV_HOST_DEVICE uint8_t* wqe_seg(uint8_t* ring, uint32_t log_bb, unsigned long long pos_bb, uint32_t k) {
    return ring + wqe_offset(log_bb, pos_bb, k);
}
GV_HOST_DEVICE const uint8_t* wqe_seg(const uint8_t* ring, uint32_t log_bb, unsigned long long pos_bb,
                                      uint32_t k) {
    return ring + wqe_offset(log_bb, pos_bb, k);
}

/// Where the payload of an inline segment lies in the ring: it starts 4 bytes into unit k
/// (after the inline header) and may run past the ring's end, where it continues at the
/// ring's start. So it is up to two pieces: `first` bytes at ring offset `offset`, then
/// `second` bytes at offset 0. The one place both the builder and the reader of inline
/// WQEs take this from.
struct InlineLayout {
    uint64_t offset;
    uint32_t first;
    uint32_t second;
};

GV_HOST_DEVICE InlineLayout inline_layout(uint32_t log_bb, unsigned long long pos_bb, uint32_t k, uint32_t len) {
    const uint64_t bytes = uint64_t(kWqeBb) << log_bb;
    // The header is 4 bytes into a 16-byte unit, so offset + 4 never reaches the ring's end.
    const uint64_t off = wqe_offset(log_bb, pos_bb, k) + sizeof(mlx5_wqe_inl_data_seg);
    const uint64_t room = bytes - off;  // bytes before the ring's end
    const uint32_t first = len < room ? len : uint32_t(room);
    return {off, first, len - first};
}

/// WQEBBs a WQE of `ds` 16-byte units occupies.
GV_HOST_DEVICE uint32_t ds_to_bbs(uint32_t ds) { return (ds * kDs + kWqeBb - 1) / kWqeBb; }

// ---- decoding segments (a whole WQE: wqe_reader.cuh) --------------------------------
struct CtrlFields {
    uint8_t opcode;
    uint8_t opmod;
    uint16_t wqe_index;
    uint32_t qpn;
    uint8_t ds;
    uint8_t fm_ce_se;
    uint8_t signature;
    uint32_t imm_be;
};

GV_HOST_DEVICE CtrlFields read_ctrl_seg(const mlx5_wqe_ctrl_seg* seg) {
    const auto* w = reinterpret_cast<const uint32_t*>(seg);
    uint32_t w0 = from_be32(w[0]), w1 = from_be32(w[1]), w2 = w[2];
    CtrlFields c;
    c.opcode = uint8_t(w0 & 0xff);
    c.wqe_index = uint16_t((w0 >> 8) & 0xffff);
    c.opmod = uint8_t(w0 >> 24);
    c.qpn = w1 >> 8;
    c.ds = uint8_t(w1 & 0x3f);
    c.signature = uint8_t(w2 & 0xff);
    c.fm_ce_se = uint8_t(w2 >> 24);
    c.imm_be = w[3];
    return c;
}

struct RaddrFields {
    uint64_t raddr;
    uint32_t rkey;
};

struct AtomicFields {
    uint64_t swap_add;  ///< the value to add (fetch-add) or to store (compare-and-swap)
    uint64_t compare;
};

struct DataFields {
    uint64_t addr;
    uint32_t byte_count;  ///< as on the wire: 0 means 2 GiB (data_len), bit 31 marks inline
    uint32_t lkey;
};

/// Largest message (all data segments of one WQE together): 2 GiB.
inline constexpr uint64_t kMaxMessage = 0x80000000ull;

/// Bytes a data segment's byte_count describes: 0 means 2 GiB on mlx5.
GV_HOST_DEVICE uint64_t data_len(uint32_t byte_count) { return byte_count ? byte_count : kMaxMessage; }

GV_HOST_DEVICE RaddrFields read_raddr_seg(const mlx5_wqe_raddr_seg* seg) {
    return {from_be64(seg->raddr), from_be32(seg->rkey)};
}

GV_HOST_DEVICE AtomicFields read_atomic_seg(const mlx5_wqe_atomic_seg* seg) {
    return {from_be64(seg->swap_add), from_be64(seg->compare)};
}

/// Decodes a data segment of a send WQE or of a receive WQE's scatter list.
GV_HOST_DEVICE DataFields read_data_seg(const mlx5_wqe_data_seg* seg) {
    return {from_be64(seg->addr), from_be32(seg->byte_count), from_be32(seg->lkey)};
}

// ---- doorbells ----------------------------------------------------------------------

/// Publishes the send-queue producer index in the doorbell record (dbrec[MLX5_SND_DBR]).
/// Release: every WQE byte written before becomes visible to whoever reads the record
/// (the NIC fetches WQEs after reading it; the software device acquires it).
GV_HOST_DEVICE void update_sq_dbrec(uint32_t* dbrec, uint32_t pi, bool sys) {
    atom::store_release(&dbrec[MLX5_SND_DBR], to_be32(pi & 0xffff), sys);
}

/// Publishes the receive-queue producer index (dbrec[MLX5_RCV_DBR]).
GV_HOST_DEVICE void update_rq_dbrec(uint32_t* dbrec, uint32_t pi, bool sys) {
    atom::store_release(&dbrec[MLX5_RCV_DBR], to_be32(pi & 0xffff), sys);
}

GV_HOST_DEVICE uint32_t read_sq_dbrec(const uint32_t* dbrec, bool sys) {
    return from_be32(atom::load_acquire(&dbrec[MLX5_SND_DBR], sys)) & 0xffff;
}
GV_HOST_DEVICE uint32_t read_rq_dbrec(const uint32_t* dbrec, bool sys) {
    return from_be32(atom::load_acquire(&dbrec[MLX5_RCV_DBR], sys)) & 0xffff;
}

/// Moves a big-endian doorbell-record counter (the low `bits` bits of *rec) forward to
/// `want`, never backwards when several writers race: a value half the counter's range or
/// more behind is taken as already passed (rings are at most half the counter's range).
/// The acq_rel CAS makes everything the caller published before visible with the record.
/// `cur`: what the record is believed to hold (big-endian, as stored); a wrong belief costs one
/// failed CAS, which then tells the truth.
GV_HOST_DEVICE void advance_dbrec_believing(uint32_t* rec, uint32_t cur, uint32_t want, uint32_t bits, bool sys) {
    const uint32_t mask = (1u << bits) - 1, half = 1u << (bits - 1);
    want &= mask;
    for (;;) {
        uint32_t ahead = (want - (from_be32(cur) & mask)) & mask;
        if (ahead == 0 || ahead >= half) return;
        if (atom::cas(rec, cur, to_be32(want), sys)) return;
    }
}
GV_HOST_DEVICE void advance_dbrec(uint32_t* rec, uint32_t want, uint32_t bits, bool sys) {
    advance_dbrec_believing(rec, atom::load_relaxed(rec, sys), want, bits, sys);
}

/// advance_dbrec for a caller that knows what the record most likely holds (`from`: a poller
/// that just claimed consumer index `from` moves the record from there to `from + 1`): the
/// CAS is tried with that value first, without loading the record.
GV_HOST_DEVICE void advance_dbrec_from(uint32_t* rec, uint32_t from, uint32_t want, uint32_t bits, bool sys) {
    advance_dbrec_believing(rec, to_be32(from & ((1u << bits) - 1)), want, bits, sys);
}

/// Rings a ConnectX doorbell: the first 8 bytes of the last WQE's ctrl segment into the
/// UAR's BlueFlame register. The system-scope fence orders the doorbell record before
/// the MMIO write, as rdma-core's mmio_wc_start/udma_to_device_barrier do.
GV_HOST_DEVICE void ring_uar(uint64_t* uar, const mlx5_wqe_ctrl_seg* ctrl) {
    atom::fence_seq_cst(true);
    uint64_t v = *reinterpret_cast<const uint64_t*>(ctrl);
    atom::store_relaxed(uar, v, true);
    atom::fence_release(true);
}

}  // namespace gv::mlx5
