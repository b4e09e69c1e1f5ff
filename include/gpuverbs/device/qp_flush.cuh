// The consistency step before a kernel consumes what a NIC wrote into GPU memory. Part of
// gpuverbs/device/queue_pair_device.cuh.
#pragma once

#include "gpuverbs/device/qp_wait.cuh"

namespace gv {
namespace dev {

/// Makes the data a NIC wrote into this GPU's memory visible to the calling thread: the
/// result of RDMA READs whose completions were polled, or a peer's WRITEs and SENDs whose
/// receive completions were polled. Call it after those completions, before reading the data.
///
/// A completion says the NIC has sent the data's writes; it does not say a GPU whose
/// GPUDirect RDMA writes are unordered (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING
/// below OWNER) shows them to its kernels already. Where that is so (mlx5 backend,
/// ContextOptions::mlx5.read_flush), this posts an RDMA READ of one GPU word on the
/// context's loopback flush QP and waits for its completion: a PCIe read does not pass the
/// posted writes ahead of it, so when it completes every earlier write of the NIC into this
/// GPU has landed (NCCL's flush after GPUDirect receives, and its GIN flush, work so).
/// Elsewhere it returns Ok at once (detail/dispatch.cuh, flush_target, says why per backend).
///
/// Thread scope: one thread calls it (then the block synchronizes before the others read).
/// Returns Ok, Timeout, or CompletionError when the flush READ failed (the flush QP is then in
/// ERROR and every later call fails the same way; the error CQE's syndrome is kept).
GV_HOST_DEVICE Status flush_gpu_writes(const QpHandle& qp, uint64_t timeout_ns = kWaitForever) {
    const Mlx5Flush* f = detail::flush_target(qp);
    if (f == nullptr) return Status::Ok;
    const QpHandle& fq = f->qp;
    const bool sys = fq.q.sys != 0;
    if (atom::load_acquire(f->failed, true) != 0) return Status::CompletionError;
    Reservation res;
    Status st = sq_reserve_group<Scope::Thread>(fq, 1, &res, timeout_ns);
    if (st == Status::Ok) {
        Sge s{f->dst, 8, f->dst_lkey};
        build_sge_wqe(fq, res.pos, MLX5_OPCODE_RDMA_READ, kSignaled, 0, f->src, f->src_rkey, &s, 1);
    }
    sq_publish_group<Scope::Thread>(fq, res);
    if (st != Status::Ok) return st;
    st = commit<Scope::Thread>(fq);
    if (st != Status::Ok) return st;
    // Other threads may poll this CQ for their own flushes and take our completion; each
    // completion frees its WQE's slots (cq_retire), so ours is done once the retirement
    // point passed our position, whoever polled it.
    const unsigned long long mine = res.pos;
    uint64_t start = 0;
    uint32_t spins = 0, idle = 0;
    while (atom::load_acquire(&fq.q.ctr->sq_retired, sys) <= mine) {
        Completion c;
        if (poll_cq(fq.scq, &c, 1)) {
            if (!c.ok()) {
                uint32_t none = 0;
                atom::cas(f->failed, none, uint32_t(c.status ? c.status : 0xff), true);
            }
            continue;
        }
        if (timeout_ns != kWaitForever && (++spins & 63) == 0) {
            uint64_t now = atom::now_ns();
            if (!start) start = now;
            else if (now - start > timeout_ns) return Status::Timeout;
        }
        spin_pause(idle, 1024);
    }
    return atom::load_acquire(f->failed, true) != 0 ? Status::CompletionError : Status::Ok;
}

}  // namespace dev
}  // namespace gv
