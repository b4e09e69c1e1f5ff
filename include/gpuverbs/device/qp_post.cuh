// WQE builders (WRITE, WRITE_IMM, READ, SEND, SEND_IMM, NOP, inline, atomics, put-with-signal)
// that write one WQE at a reserved position. Part of gpuverbs/device/queue_pair_device.cuh.
#pragma once

#include "gpuverbs/detail/soft/direct.cuh"
#include "gpuverbs/device/qp_wqebb.cuh"

namespace gv {
namespace dev {

template <Scope S>
GV_HOST_DEVICE Status commit(const QpHandle& qp);  // qp_doorbell.cuh

/// commit<S>, out of line: on the software device a commit holds a whole drain, and the kCommit
/// flag's commit (commit_if) sits in every post, so inlined it put one drain per post call site
/// into every kernel that posts with run-time flags (the traffic suite's script kernel: spills,
/// and its translation unit compiled over three times longer).
template <Scope S>
GV_HOST_DEVICE_NOINLINE Status commit_outlined(const QpHandle& qp) {
    return commit<S>(qp);
}

/// The kCommit flag's part of a post: commit<S> after it (collective as the post: every member
/// calls, whatever its own post returned). Returns the post's status when it failed, else
/// the commit's.
template <Scope S>
GV_HOST_DEVICE Status commit_if(const QpHandle& qp, Status posted, uint32_t flags) {
    if (!(flags & kCommit)) return posted;
    const Status cs = commit_outlined<S>(qp);
    return posted != Status::Ok ? posted : cs;
}

/// True when a thread-scope post with kCommit may take the software device's direct path
/// (detail/soft/direct.cuh): one data segment of 1 .. kFastBytes bytes, a WRITE or a READ, no
/// timeout, and an executor this thread may run (a CPU thread on a GPU device rings by launch).
GV_HOST_DEVICE bool direct_ok(const QpHandle& qp, uint8_t opcode, const Sge* sg, uint32_t n, uint32_t flags,
                              uint64_t timeout_ns) {
    if (!(flags & kCommit) || qp.backend != Backend::Soft || qp.soft.ctx == nullptr || qp.q.ctr == nullptr) return false;
#if !GV_DEVICE_CODE
    if (qp.soft.host_doorbell || !qp.q.host_reachable) return false;
#endif
    return n == 1 && n <= qp.q.max_send_sge && timeout_ns == kWaitForever &&
           (opcode == MLX5_OPCODE_RDMA_WRITE || opcode == MLX5_OPCODE_RDMA_READ) && sg[0].length != 0 &&
           sg[0].length <= detail::soft::kFastBytes;
}

// ---- WQE builders (write one WQE at a reserved position) -------------------------------

/// RDMA WRITE / WRITE_IMM / READ / SEND / SEND_IMM with a gather (scatter for READ) list.
/// Returns the ds count. Zero-length entries are skipped, as rdma-core does.
GV_HOST_DEVICE uint32_t build_sge_wqe(const QpHandle& qp, unsigned long long pos, uint8_t opcode,
                                      uint32_t flags, uint32_t imm_be, uint64_t raddr,
                                      uint32_t rkey, const Sge* sg, uint32_t n) {
    if (n == 1) {  // one WQEBB, stored whole (qp_wqebb.cuh)
        const uint32_t ds = sge_wqe_ds(opcode, sg, 1);
        store_wqebb_at(qp, pos, sge1_wqebb(qp, pos, opcode, flags, imm_be, raddr, rkey, sg[0]), ds);
        return ds;
    }
    const bool rdma = sge_has_raddr(opcode);
    uint32_t k = 1;
    if (rdma) mlx5::set_raddr_seg(reinterpret_cast<mlx5_wqe_raddr_seg*>(sq_seg(qp, pos, k++)), raddr, rkey);
    for (uint32_t i = 0; i < n; ++i) {
        if (!sg[i].length) continue;
        mlx5::set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(sq_seg(qp, pos, k++)), sg[i].length,
                           sg[i].lkey, sg[i].addr);
    }
    mlx5::set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(sq_seg(qp, pos, 0)), uint16_t(pos), opcode,
                       0, qp.q.qpn, fm_ce_se(flags), uint8_t(k), 0, imm_be);
    return k;
}

/// Posts one WQE with a gather/scatter list (strong form: the library reserves its
/// position). Scope as in sq_reserve_group: Thread (any threads, any time), Warp (every
/// lane of the warp calls, one WQE each), Block (every thread of the block calls). Invalid
/// arguments return InvalidArgument to the caller only; collective calls stay collective.
/// With kCommit in flags it also commits (commit<S>); on the software device a thread-scope
/// WRITE or READ of at most 128 bytes (kFastBytes) then executes in the calling thread when nothing is ahead
/// of it on the QP (direct_ok, detail/soft/direct.cuh).
template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status post_sge(const QpHandle& qp, uint8_t opcode, const Sge* sg, uint32_t n,
                               uint64_t raddr, uint32_t rkey, uint32_t imm, uint32_t flags,
                               uint64_t timeout_ns = kWaitForever) {
    if constexpr (S == Scope::Thread) {
        if (direct_ok(qp, opcode, sg, n, flags, timeout_ns)) {
            // Built for position 0: post_direct sets the index once it has its position.
            const WqeBb b = sge1_wqebb(qp, 0, opcode, flags, 0, raddr, rkey, sg[0]);
            return detail::soft::post_direct(qp.soft.ctx, qp.q.ctr, qp.q.sq, qp.q.sq_log_bb, qp.q.sys != 0, b.u[0],
                                             b.u[1], b.u[2], b.u[3], sg[0].lkey, rkey, qp.soft.mrs, qp.soft.mr_cap);
        }
    }
    const bool valid = n <= qp.q.max_send_sge;
    uint32_t bbs = valid ? mlx5::ds_to_bbs(sge_wqe_ds(opcode, sg, n)) : 0;
    Reservation res;
    Status st = sq_reserve_group<S>(qp, bbs, &res, timeout_ns);
    const bool mine = st == Status::Ok && valid;
    // One data segment (WRITE, READ, SEND and their immediates as the API posts them): one
    // WQEBB, built in registers and stored whole (qp_wqebb.cuh).
    if (n == 1)
        store_wqebb(qp, res, sge1_wqebb(qp, res.pos, opcode, flags, mlx5::to_be32(imm), raddr, rkey, sg[0]), mine);
    else if (mine) build_sge_wqe(qp, res.pos, opcode, flags, mlx5::to_be32(imm), raddr, rkey, sg, n);
    sq_publish_group<S>(qp, res);
    return commit_if<S>(qp, valid ? st : Status::InvalidArgument, flags);
}

/// RDMA WRITE of [laddr, laddr+len) (lkey) to raddr (rkey) on the peer.
template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status write(const QpHandle& qp, const void* laddr, uint32_t len, uint32_t lkey,
                            uint64_t raddr, uint32_t rkey, uint32_t flags = kSignaled,
                            uint64_t timeout_ns = kWaitForever) {
    Sge s{reinterpret_cast<uint64_t>(laddr), len, lkey};
    return post_sge<S>(qp, MLX5_OPCODE_RDMA_WRITE, &s, 1, raddr, rkey, 0, flags, timeout_ns);
}

/// RDMA WRITE with immediate: also consumes a receive on the peer, whose completion
/// carries `imm` and the byte count. The data goes to raddr, not to the receive's buffers,
/// so that receive may have none (post_recv(qp, nullptr, 0) or recv(qp, nullptr, 0, 0)).
template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status write_imm(const QpHandle& qp, const void* laddr, uint32_t len, uint32_t lkey,
                                uint64_t raddr, uint32_t rkey, uint32_t imm,
                                uint32_t flags = kSignaled, uint64_t timeout_ns = kWaitForever) {
    Sge s{reinterpret_cast<uint64_t>(laddr), len, lkey};
    return post_sge<S>(qp, MLX5_OPCODE_RDMA_WRITE_IMM, &s, 1, raddr, rkey, imm, flags, timeout_ns);
}

/// RDMA READ of the peer's [raddr, raddr+len) (rkey) into [laddr, laddr+len) (lkey).
template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status read(const QpHandle& qp, void* laddr, uint32_t len, uint32_t lkey,
                           uint64_t raddr, uint32_t rkey, uint32_t flags = kSignaled,
                           uint64_t timeout_ns = kWaitForever) {
    Sge s{reinterpret_cast<uint64_t>(laddr), len, lkey};
    return post_sge<S>(qp, MLX5_OPCODE_RDMA_READ, &s, 1, raddr, rkey, 0, flags, timeout_ns);
}

/// SEND of [laddr, laddr+len) into the peer's next posted receive.
template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status send(const QpHandle& qp, const void* laddr, uint32_t len, uint32_t lkey,
                           uint32_t flags = kSignaled, uint64_t timeout_ns = kWaitForever) {
    Sge s{reinterpret_cast<uint64_t>(laddr), len, lkey};
    return post_sge<S>(qp, MLX5_OPCODE_SEND, &s, 1, 0, 0, 0, flags, timeout_ns);
}

/// SEND with immediate data (the receive completion carries `imm`).
template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status send_imm(const QpHandle& qp, const void* laddr, uint32_t len, uint32_t lkey,
                               uint32_t imm, uint32_t flags = kSignaled,
                               uint64_t timeout_ns = kWaitForever) {
    Sge s{reinterpret_cast<uint64_t>(laddr), len, lkey};
    return post_sge<S>(qp, MLX5_OPCODE_SEND_IMM, &s, 1, 0, 0, imm, flags, timeout_ns);
}

/// A NOP WQE (completes in order; useful to signal the end of unsignaled work).
template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status nop(const QpHandle& qp, uint32_t flags = kSignaled,
                          uint64_t timeout_ns = kWaitForever) {
    Reservation res;
    Status st = sq_reserve_group<S>(qp, 1, &res, timeout_ns);
    store_wqebb(qp, res, nop_wqebb(qp, res.pos, flags), st == Status::Ok);
    sq_publish_group<S>(qp, res);
    return commit_if<S>(qp, st, flags);
}

/// Writes an inline WRITE / SEND WQE at pos (ds: its size, from inline_wqe_ds).
GV_HOST_DEVICE void build_inline_wqe(const QpHandle& qp, unsigned long long pos, uint8_t opcode,
                                     const void* data, uint32_t len, uint64_t raddr, uint32_t rkey,
                                     uint32_t imm, uint32_t flags, uint32_t ds) {
    const bool rdma = opcode == MLX5_OPCODE_RDMA_WRITE || opcode == MLX5_OPCODE_RDMA_WRITE_IMM;
    uint32_t k = rdma ? 2 : 1;
    if (rdma) mlx5::set_raddr_seg(reinterpret_cast<mlx5_wqe_raddr_seg*>(sq_seg(qp, pos, 1)), raddr, rkey);
    mlx5::set_inline_hdr(reinterpret_cast<mlx5_wqe_inl_data_seg*>(sq_seg(qp, pos, k)), len);
    const auto* src = static_cast<const uint8_t*>(data);
    // The payload may run past the ring's end and continue at its start (two pieces).
    const mlx5::InlineLayout l = mlx5::inline_layout(qp.q.sq_log_bb, pos, k, len);
    for (uint32_t i = 0; i < l.first; ++i) qp.q.sq[l.offset + i] = src[i];
    for (uint32_t i = 0; i < l.second; ++i) qp.q.sq[i] = src[l.first + i];
    mlx5::set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(sq_seg(qp, pos, 0)), uint16_t(pos), opcode, 0,
                       qp.q.qpn, fm_ce_se(flags), uint8_t(ds), 0, mlx5::to_be32(imm));
}

GV_HOST_DEVICE uint32_t inline_wqe_ds(uint8_t opcode, uint32_t len) {
    const bool rdma = opcode == MLX5_OPCODE_RDMA_WRITE || opcode == MLX5_OPCODE_RDMA_WRITE_IMM;
    return (rdma ? 2 : 1) + mlx5::inline_ds(len);
}

/// Inline RDMA WRITE / SEND: the payload travels inside the WQE (len <= max_inline, else
/// InvalidArgument at post time).
template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status post_inline(const QpHandle& qp, uint8_t opcode, const void* data, uint32_t len,
                                  uint64_t raddr, uint32_t rkey, uint32_t imm, uint32_t flags,
                                  uint64_t timeout_ns = kWaitForever) {
    const uint32_t ds = inline_wqe_ds(opcode, len);
    const bool valid = len <= qp.q.max_inline && ds <= mlx5::kMaxDs;
    Reservation res;
    Status st = sq_reserve_group<S>(qp, valid ? mlx5::ds_to_bbs(ds) : 0, &res, timeout_ns);
    if (st == Status::Ok && valid) build_inline_wqe(qp, res.pos, opcode, data, len, raddr, rkey, imm, flags, ds);
    sq_publish_group<S>(qp, res);
    return commit_if<S>(qp, valid ? st : Status::InvalidArgument, flags);
}

template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status write_inline(const QpHandle& qp, const void* data, uint32_t len, uint64_t raddr,
                                   uint32_t rkey, uint32_t flags = kSignaled,
                                   uint64_t timeout_ns = kWaitForever) {
    return post_inline<S>(qp, MLX5_OPCODE_RDMA_WRITE, data, len, raddr, rkey, 0, flags, timeout_ns);
}

template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status send_inline(const QpHandle& qp, const void* data, uint32_t len,
                                  uint32_t flags = kSignaled, uint64_t timeout_ns = kWaitForever) {
    return post_inline<S>(qp, MLX5_OPCODE_SEND, data, len, 0, 0, 0, flags, timeout_ns);
}

/// Writes an atomic WQE (one WQEBB) at pos.
GV_HOST_DEVICE void build_atomic_wqe(const QpHandle& qp, unsigned long long pos, uint8_t opcode, void* laddr,
                                     uint32_t lkey, uint64_t raddr, uint32_t rkey, uint64_t swap_add,
                                     uint64_t compare, uint32_t flags) {
    store_wqebb_at(qp, pos, atomic_wqebb(qp, pos, opcode, laddr, lkey, raddr, rkey, swap_add, compare, flags));
}

/// 8-byte atomic on the peer's raddr (8-byte aligned, remote-atomic access): fetch-add
/// (opcode MLX5_OPCODE_ATOMIC_FA) or compare-and-swap (MLX5_OPCODE_ATOMIC_CS). The old
/// value lands in [laddr, laddr+8) (lkey, local-write access).
template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status post_atomic(const QpHandle& qp, uint8_t opcode, void* laddr, uint32_t lkey,
                                  uint64_t raddr, uint32_t rkey, uint64_t swap_add,
                                  uint64_t compare, uint32_t flags = kSignaled,
                                  uint64_t timeout_ns = kWaitForever) {
    Reservation res;
    Status st = sq_reserve_group<S>(qp, 1, &res, timeout_ns);
    store_wqebb(qp, res, atomic_wqebb(qp, res.pos, opcode, laddr, lkey, raddr, rkey, swap_add, compare, flags),
                st == Status::Ok);
    sq_publish_group<S>(qp, res);
    return commit_if<S>(qp, st, flags);
}

template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status fetch_add(const QpHandle& qp, uint64_t* laddr, uint32_t lkey, uint64_t raddr,
                                uint32_t rkey, uint64_t add, uint32_t flags = kSignaled,
                                uint64_t timeout_ns = kWaitForever) {
    return post_atomic<S>(qp, MLX5_OPCODE_ATOMIC_FA, laddr, lkey, raddr, rkey, add, 0, flags, timeout_ns);
}

template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status compare_swap(const QpHandle& qp, uint64_t* laddr, uint32_t lkey, uint64_t raddr,
                                   uint32_t rkey, uint64_t compare, uint64_t swap,
                                   uint32_t flags = kSignaled, uint64_t timeout_ns = kWaitForever) {
    return post_atomic<S>(qp, MLX5_OPCODE_ATOMIC_CS, laddr, lkey, raddr, rkey, swap, compare, flags, timeout_ns);
}

/// Put with signal: a WRITE of [laddr, laddr+len) to raddr, then a fetch-add of `add` on
/// the peer's 8-byte signal word. RC executes them in order, so a peer that sees the
/// signal change sees the data. The signal's old value lands in *old (local write access).
template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status put_signal(const QpHandle& qp, const void* laddr, uint32_t len, uint32_t lkey,
                                 uint64_t raddr, uint32_t rkey, uint64_t* old, uint32_t old_lkey,
                                 uint64_t signal_addr, uint32_t signal_rkey, uint64_t add,
                                 uint32_t flags = kSignaled, uint64_t timeout_ns = kWaitForever) {
    Status st = write<S>(qp, laddr, len, lkey, raddr, rkey, 0, timeout_ns);
    if (st != Status::Ok) return st;
    return fetch_add<S>(qp, old, old_lkey, signal_addr, signal_rkey, add, flags, timeout_ns);
}

}  // namespace dev
}  // namespace gv
