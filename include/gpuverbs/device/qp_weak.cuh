// The weak form: the caller chooses positions (get_position, *_weak, commit_weak). Part of
// gpuverbs/device/queue_pair_device.cuh.
#pragma once

#include "gpuverbs/device/qp_post.cuh"

namespace gv {
namespace dev {

// ---- weak form: the caller chooses positions --------------------------------------------

/// The calling thread may write this QP's send ring: the handle is not default-constructed
/// and, for a CPU thread, the queues are host memory.
GV_HOST_DEVICE bool weak_usable(const QpHandle& qp) {
#if !GV_DEVICE_CODE
    if (!qp.q.host_reachable) return false;
#endif
    return qp.q.ctr != nullptr;
}

/// The send queue as the weak form sees it: the next free position, the ring mask, and how
/// many WQEBBs are free from there (retired slots only).
struct SqPosition {
    unsigned long long pos;
    uint32_t mask;
    uint32_t free;
};

/// Current position for the weak form. The caller owns the QP's send queue until
/// commit_weak (no strong-form posting to it meanwhile) and writes at pos .. pos+free-1.
GV_HOST_DEVICE SqPosition get_position(const QpHandle& qp) {
    if (!weak_usable(qp)) return SqPosition{0, 0, 0};  // nothing may be written
    unsigned long long r = atom::load_acquire(&qp.q.ctr->sq_reserved, qp.q.sys != 0);
    unsigned long long ret = atom::load_acquire(&qp.q.ctr->sq_retired, qp.q.sys != 0);
    uint32_t ring = 1u << qp.q.sq_log_bb;
    // A strong-form poster without a timeout holds its positions while it waits for room
    // (ring_reserve), so reserved may lead retired by more than the ring: then nothing is free.
    const unsigned long long used = r - ret;
    return SqPosition{r, ring - 1, used >= ring ? 0u : uint32_t(ring - used)};
}

/// Weak-form builders: one single-WQEBB WQE at a caller-chosen position (thread scope,
/// no atomics). WRITE / READ / SEND with one buffer, atomics, and inline payloads that fit
/// one WQEBB (<= 28 bytes for WRITE, <= 44 for SEND); larger returns InvalidArgument, as
/// does a default-constructed handle or, from a CPU thread, a QP whose queues are GPU memory.
GV_HOST_DEVICE Status write_weak(const QpHandle& qp, unsigned long long pos, const void* laddr, uint32_t len,
                                 uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t flags = 0) {
    if (!weak_usable(qp)) return Status::InvalidArgument;
    Sge s{reinterpret_cast<uint64_t>(laddr), len, lkey};
    build_sge_wqe(qp, pos, MLX5_OPCODE_RDMA_WRITE, flags, 0, raddr, rkey, &s, 1);
    return Status::Ok;
}
GV_HOST_DEVICE Status read_weak(const QpHandle& qp, unsigned long long pos, void* laddr, uint32_t len,
                                uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t flags = 0) {
    if (!weak_usable(qp)) return Status::InvalidArgument;
    Sge s{reinterpret_cast<uint64_t>(laddr), len, lkey};
    build_sge_wqe(qp, pos, MLX5_OPCODE_RDMA_READ, flags, 0, raddr, rkey, &s, 1);
    return Status::Ok;
}
GV_HOST_DEVICE Status send_weak(const QpHandle& qp, unsigned long long pos, const void* laddr, uint32_t len,
                                uint32_t lkey, uint32_t flags = 0) {
    if (!weak_usable(qp)) return Status::InvalidArgument;
    Sge s{reinterpret_cast<uint64_t>(laddr), len, lkey};
    build_sge_wqe(qp, pos, MLX5_OPCODE_SEND, flags, 0, 0, 0, &s, 1);
    return Status::Ok;
}
GV_HOST_DEVICE Status write_inline_weak(const QpHandle& qp, unsigned long long pos, const void* data,
                                        uint32_t len, uint64_t raddr, uint32_t rkey, uint32_t flags = 0) {
    if (!weak_usable(qp)) return Status::InvalidArgument;
    uint32_t ds = inline_wqe_ds(MLX5_OPCODE_RDMA_WRITE, len);
    if (len > qp.q.max_inline || mlx5::ds_to_bbs(ds) != 1) return Status::InvalidArgument;
    build_inline_wqe(qp, pos, MLX5_OPCODE_RDMA_WRITE, data, len, raddr, rkey, 0, flags, ds);
    return Status::Ok;
}
GV_HOST_DEVICE Status fetch_add_weak(const QpHandle& qp, unsigned long long pos, uint64_t* laddr, uint32_t lkey,
                                     uint64_t raddr, uint32_t rkey, uint64_t add, uint32_t flags = 0) {
    if (!weak_usable(qp)) return Status::InvalidArgument;
    build_atomic_wqe(qp, pos, MLX5_OPCODE_ATOMIC_FA, laddr, lkey, raddr, rkey, add, 0, flags);
    return Status::Ok;
}

}  // namespace dev
}  // namespace gv
