// The doorbell board: how CPU threads ring QPs of a software device that executes on a GPU
// without a kernel launch per doorbell (src/soft/soft_doorbell.cu has the code).
//
// A CPU thread cannot run the executor of a GPU device (its state is GPU memory), so each of
// its doorbells needs a kernel. One launch per doorbell costs a launch's CPU time and a
// kernel's start per WQE batch and serialises every QP behind the library's stream (0.19 M
// 8-byte WRITEs per second over 4 QPs on the H200). The board batches them: each QP of the
// device has a slot of three counters in pinned host memory (send, receive and drive
// doorbells), which CPU threads bump; one kernel at a time serves every slot whose counters
// moved since it last looked, and a doorbell launches a kernel only when none is on its way.
//
// No read-modify-write crosses PCIe (atomics of a GPU on host memory are not atomic with
// the CPU's on most hosts): the CPU writes only the counters, the GPU only `finished`.
//   doorbell (CPU):  bump a counter; full fence; read `finished`; if it equals `launched`
//                    (every kernel launched has said it is done), launch kernel launched+1.
//   kernel g (GPU):  each block sweeps its own slots until a sweep finds nothing (or its time
//                    is up); the first block to get there stores finished = g and fences;
//                    every block, once that store is made, sweeps its slots once more, and exits.
// A Dekker pair: a doorbell whose read of `finished` comes before kernel g's store (so it did
// not launch) has its counter seen by the last sweep of the slot's block, which comes after
// the store and a full fence; a doorbell that reads g launches g+1. No block waits for a block
// that has not started (only for the first finisher, which runs): no deadlock when the
// application's kernels hold every SM. Kernels run one after another on the library's stream,
// so two never serve the same slot at once (and the QP's execution lock orders them with the
// application's kernels that commit on the same QP).
#pragma once

#include <cstdint>

namespace gv::detail::soft {

struct QpContext;

/// One QP's doorbell counters, written by CPU threads only.
struct alignas(16) Bell {
    uint32_t send;   ///< HostDoorbell::SendQueue (and Flush)
    uint32_t recv;   ///< HostDoorbell::RecvQueue (and Flush)
    uint32_t drive;  ///< HostDoorbell::Drive
    uint32_t pad;
};

/// The board's pinned host part (mapped: the same address on the GPU).
struct BoardHost {
    alignas(64) unsigned long long finished;  ///< the last kernel that has said it is done (GPU-written)
    alignas(64) uint32_t count;               ///< slots in use are below this (CPU-written)
    alignas(64) Bell bell[1];                 ///< [slots]
};

/// A slot's GPU-memory part: which QP, and the counters its kernel has served.
struct BoardSlot {
    QpContext* q;  ///< null: free
    uint32_t seen[3];
    uint32_t pad;
};

/// The board's GPU-memory part.
struct BoardDev {
    uint32_t idle_blocks;           ///< blocks of the running kernel done with their own slots
    uint32_t slots;                 ///< how many slots the board has
    unsigned long long stored_gen;  ///< the kernel whose `finished` store is made (and fenced)
    BoardSlot slot[1];  ///< [slots]
};

constexpr uint32_t kBoardDefaultSlots = 1024;
constexpr uint32_t kBoardMaxBlocks = 16;   ///< blocks per kernel (each serves every nb-th slot)
constexpr uint32_t kBoardThreads = 256;    ///< threads per block

}  // namespace gv::detail::soft
