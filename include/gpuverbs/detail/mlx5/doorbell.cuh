// The ConnectX (mlx5) backend's side of the doorbell. Reached only through
// gpuverbs/detail/dispatch.cuh.
//
// What rings a ConnectX send queue, in order (docs/mlx5.md, "Ringing"):
//   1. the WQEs are written and published in reservation order (sq_ready, release);
//   2. the committing leader moves the send doorbell record forward to the published end
//      (be32(pi & 0xffff) at dbrec[MLX5_SND_DBR], an acq_rel CAS at system scope:
//      dev::commit -> mlx5::advance_dbrec);
//   3. here: under the QP's doorbell lock, the record is read back and, when it moved since
//      the last doorbell, the 8-byte doorbell value (QP number and producer index) is stored
//      into the UAR's doorbell register, after a system-scope fence.
// With DoorbellHandler::CpuProxy the record of step 2 is a copy in pinned host memory that
// the context's proxy thread watches; it writes the NIC's record and the register itself
// (src/mlx5/cpu_proxy.cpp), so step 3 does nothing here.
#pragma once

#include "gpuverbs/device/atomic.cuh"
#include "gpuverbs/device/handles.hpp"
#include "gpuverbs/device/spin.cuh"
#include "gpuverbs/device/status.cuh"
#include "gpuverbs/mlx5/wqe.cuh"

namespace gv::detail::mlx5db {

/// The 8 bytes a ConnectX doorbell register takes: the first 8 bytes of a ctrl segment naming
/// the producer index (the next free WQEBB, as in the doorbell record) and the QP number, with
/// opcode, opmod and ds 0, as NVSHMEM's IBGDA and DOCA GPUNetIO ring it. As one little-endian
/// 64-bit store: the low word is be32(pi << 8), the high word be32(qpn << 8).
GV_HOST_DEVICE uint64_t doorbell_value(uint32_t pi, uint32_t qpn) {
    const uint32_t w0 = mlx5::to_be32((pi & 0xffff) << 8);
    const uint32_t w1 = mlx5::to_be32((qpn & 0xffffff) << 8);
    return uint64_t(w0) | (uint64_t(w1) << 32);
}

/// The store into the doorbell register, ordered after everything that happened before it.
///
/// Why these fences. The NIC, on the doorbell, reads the doorbell record and then the WQEs up
/// to it, over PCIe, from GPU memory (or host memory). Every WQE byte and the record's value
/// happened-before this point: the posters released them (sq_ready, then the record's
/// system-scope CAS) and this thread acquired the record. A system-scope sequentially
/// consistent fence (fence.sc.sys on the GPU, mfence on the CPU) makes all of them performed
/// at system scope before the 8-byte store leaves, so the NIC cannot read older bytes; it is
/// the counterpart of rdma-core's udma_to_device_barrier() + mmio_wc_start() before
/// mmio_write64_be(). The store is one 8-byte access (st.relaxed.sys.global.u64: the register
/// takes it whole). The fence after it makes the store leave before the doorbell lock is
/// released, so the next holder's doorbell (a larger index) cannot reach the NIC first; on a
/// write-combining (BlueFlame) mapping of a CPU it also drains the write-combining buffer.
GV_HOST_DEVICE void write_doorbell(uint64_t* uar, uint64_t value) {
    atom::fence_seq_cst(true);
    atom::store_relaxed(uar, value, true);
    atom::fence_seq_cst(true);
}

/// After the send doorbell record moved (dev::commit, by this thread): rings the NIC unless a
/// CPU proxy thread does. Thread scope (the group's leader calls it).
GV_HOST_DEVICE Status ring_send(const dev::QpHandle& qp) {
#if GV_DEVICE_CODE
    uint64_t* uar = qp.mlx5.uar;
#else
    uint64_t* uar = qp.mlx5.uar_host;
#endif
    if (uar == nullptr) return Status::Ok;  // the CPU proxy thread watches the record
    uint32_t* lock = qp.mlx5.db_lock;
    uint32_t* last = qp.mlx5.db_last;
    // The lock: held for one load and one store, so a spin (a CPU thread yields after a while:
    // the holder may be preempted).
    // cas() is acq_rel: the holder sees the previous holder's db_last.
    uint32_t expect = 0, spins = 0;
    while (!atom::cas(lock, expect, 1u, true)) {
        expect = 0;
        dev::spin_pause(spins);
    }
    // Acquire: the WQEs the record covers (published by any thread) are visible from here.
    // Every committer moves the record before it comes here, so the value read is at least its
    // own: each record update is followed by a doorbell that covers it.
    const uint32_t pi = mlx5::read_sq_dbrec(qp.q.dbrec, true);
    if (pi != atom::load_relaxed(last, true)) {
        write_doorbell(uar, doorbell_value(pi, qp.q.qpn));
        atom::store_relaxed(last, pi, true);
    }
    atom::store_release(lock, 0u, true);
    return Status::Ok;
}

}  // namespace gv::detail::mlx5db
