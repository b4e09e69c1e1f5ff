// WQEs of one WQEBB (64 bytes: WRITE / READ / SEND with one data segment, atomics, NOP)
// built in registers and stored whole. Part of gpuverbs/device/queue_pair_device.cuh.
//
// Why: where the send ring is host memory (the verbs backend's pinned rings) or a NIC's
// queue, every store a GPU thread makes into it is a write over PCIe. Written field by field a
// WQE is ten stores of 4 or 8 bytes; as four 16-byte units it is four; and when a whole warp
// posts 32 consecutive WQEBBs on one QP (warp aggregation and block reservations hand out
// consecutive positions in lane order), the warp writes its 2 KiB as four stores of 512
// contiguous bytes each, which the GPU sends as whole 128-byte lines. `gv_post_rate` measures
// the three layouts as its same-run ceiling (docs/performance.md).
#pragma once

#include "gpuverbs/device/qp_ring.cuh"

namespace gv {
namespace dev {

/// One WQEBB in registers: four 16-byte units. Units past the WQE's ds are zero (the ds in
/// the ctrl segment says what a reader reads; storing the whole 64 bytes makes whole lines).
struct WqeBb {
    mlx5::Unit u[4];
};

/// u[(i) & 3] with i a run-time value, as selects (no indexed local memory).
GV_HOST_DEVICE mlx5::Unit pick_unit(const WqeBb& b, uint32_t i) {
    i &= 3;
    mlx5::Unit r;
    for (uint32_t k = 0; k < 4; ++k)
        r.w[k] = i == 0 ? b.u[0].w[k] : i == 1 ? b.u[1].w[k] : i == 2 ? b.u[2].w[k] : b.u[3].w[k];
    return r;
}

/// Stores the first `units` units of b at WQEBB position pos: one 16-byte store each. The
/// positional builders (build_sge_wqe, for the weak API and the tests) store the WQE's ds units
/// only, as rdma-core's helpers do; the strong posts store the whole WQEBB (store_wqebb).
GV_HOST_DEVICE void store_wqebb_at(const QpHandle& qp, unsigned long long pos, const WqeBb& b, uint32_t units = 4) {
    for (uint32_t k = 0; k < 4; ++k)
        if (k < units) mlx5::store_unit(sq_seg(qp, pos, k), b.u[k]);
}

#if GV_DEVICE_CODE
/// The warp's 32 WQEBBs (lane l's at WQEBB position p0 + l of the ring) stored as four
/// instructions of 512 contiguous bytes each. Store k writes WQEs 8k .. 8k+7; lane d writes
/// unit c = d / 8 of WQE 8k + d % 8. That unit lives in lane 8k + d % 8's registers, and a
/// shuffle reads one named register from its source lane, so a direct exchange would take
/// four shuffles per store (sixteen 16-byte shuffles). Instead each lane first rotates its
/// units by its own group g = lane / 8 (register j holds unit (j + g) & 3); then shuffle j
/// hands lane d the unit c of WQE 8((c - j) & 3) + d % 8, which store (c - j) & 3 writes:
/// four 16-byte shuffles in all, and each lane's four values cover the four stores.
__device__ __forceinline__ void store_warp_coalesced(const QpHandle& qp, unsigned long long p0, const WqeBb& b) {
    const uint32_t full = 0xffffffffu;
    uint32_t lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    const uint32_t c = lane >> 3, col = lane & 7;
    WqeBb rot;
    for (uint32_t j = 0; j < 4; ++j) rot.u[j] = pick_unit(b, j + c);
    WqeBb got;  // got.u[j]: unit c of WQE 8((c - j) & 3) + col
    for (uint32_t j = 0; j < 4; ++j) {
        const uint32_t src = 8 * ((c - j) & 3) + col;
        for (uint32_t w = 0; w < 4; ++w) got.u[j].w[w] = __shfl_sync(full, rot.u[j].w[w], src);
    }
    for (uint32_t k = 0; k < 4; ++k)
        mlx5::store_unit(sq_seg(qp, p0 + 8 * k + col, c), pick_unit(got, c - k));
}
#endif

/// Stores the calling thread's WQEBB b at its reserved position (when `mine`: it reserved one
/// and built b). When every lane of a converged warp posts one WQEBB on the same ring at
/// consecutive positions in lane order, the warp stores them together (store_warp_coalesced);
/// otherwise each thread stores its four units. Either way every store precedes the group's
/// publication (sq_publish_group: its barrier, then the leader's release).
GV_HOST_DEVICE void store_wqebb(const QpHandle& qp, const Reservation& res, const WqeBb& b, bool mine) {
#if GV_DEVICE_CODE
    const uint32_t full = 0xffffffffu;
    if (__activemask() == full) {
        uint32_t lane;
        asm("mov.u32 %0, %%laneid;" : "=r"(lane));
        const unsigned long long p0 = __shfl_sync(full, res.pos, 0);
        const auto ring0 = reinterpret_cast<unsigned long long>(
            __shfl_sync(full, reinterpret_cast<unsigned long long>(qp.q.sq), 0));
        const bool along = mine && res.pos == p0 + lane && reinterpret_cast<unsigned long long>(qp.q.sq) == ring0;
        if (__all_sync(full, along)) {
            store_warp_coalesced(qp, p0, b);
            return;
        }
    }
#endif
    if (mine) store_wqebb_at(qp, res.pos, b);
}

/// True for the gather-list opcodes that carry a remote-address segment (WRITE, WRITE_IMM,
/// READ); SEND and SEND_IMM carry none.
GV_HOST_DEVICE bool sge_has_raddr(uint8_t opcode) {
    return opcode == MLX5_OPCODE_RDMA_WRITE || opcode == MLX5_OPCODE_RDMA_WRITE_IMM || opcode == MLX5_OPCODE_RDMA_READ;
}

/// ds count of a WQE with a gather/scatter list (zero-length entries skipped, as rdma-core
/// does): ctrl, the remote address where the opcode has one, a data segment per entry.
GV_HOST_DEVICE uint32_t sge_wqe_ds(uint8_t opcode, const Sge* sg, uint32_t n) {
    uint32_t k = sge_has_raddr(opcode) ? 2 : 1;
    for (uint32_t i = 0; i < n; ++i) k += sg[i].length ? 1 : 0;
    return k;
}

/// A WRITE / WRITE_IMM / READ / SEND / SEND_IMM with one data segment (none when its length is
/// 0, as rdma-core skips zero-length entries): ctrl, [raddr,] [data].
GV_HOST_DEVICE WqeBb sge1_wqebb(const QpHandle& qp, unsigned long long pos, uint8_t opcode, uint32_t flags,
                                uint32_t imm_be, uint64_t raddr, uint32_t rkey, const Sge& s) {
    const bool rdma = sge_has_raddr(opcode);
    const mlx5::Unit zero{};
    const mlx5::Unit data = s.length ? mlx5::data_unit(s.length, s.lkey, s.addr) : zero;
    WqeBb b;
    if (rdma) {
        b.u[1] = mlx5::raddr_unit(raddr, rkey);
        b.u[2] = data;
    } else {
        b.u[1] = data;
        b.u[2] = zero;
    }
    b.u[3] = zero;
    const uint32_t ds = sge_wqe_ds(opcode, &s, 1);
    b.u[0] = mlx5::ctrl_unit(uint16_t(pos), opcode, 0, qp.q.qpn, fm_ce_se(flags), uint8_t(ds), 0, imm_be);
    return b;
}

/// An atomic (fetch-add or compare-and-swap): ctrl, raddr, atomic, data (8 bytes).
GV_HOST_DEVICE WqeBb atomic_wqebb(const QpHandle& qp, unsigned long long pos, uint8_t opcode, const void* laddr,
                                  uint32_t lkey, uint64_t raddr, uint32_t rkey, uint64_t swap_add, uint64_t compare,
                                  uint32_t flags) {
    WqeBb b;
    b.u[0] = mlx5::ctrl_unit(uint16_t(pos), opcode, 0, qp.q.qpn, fm_ce_se(flags), 4, 0, 0);
    b.u[1] = mlx5::raddr_unit(raddr, rkey);
    b.u[2] = mlx5::atomic_unit(swap_add, compare);
    b.u[3] = mlx5::data_unit(8, lkey, reinterpret_cast<uint64_t>(laddr));
    return b;
}

/// A NOP: its ctrl segment alone.
GV_HOST_DEVICE WqeBb nop_wqebb(const QpHandle& qp, unsigned long long pos, uint32_t flags) {
    const mlx5::Unit zero{};
    WqeBb b;
    b.u[0] = mlx5::ctrl_unit(uint16_t(pos), MLX5_OPCODE_NOP, 0, qp.q.qpn, fm_ce_se(flags), 1, 0, 0);
    b.u[1] = b.u[2] = b.u[3] = zero;
    return b;
}

}  // namespace dev
}  // namespace gv
