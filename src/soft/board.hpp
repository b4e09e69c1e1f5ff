// The doorbell board: how CPU threads ring QPs of a software device that executes on a GPU
// without a kernel launch per doorbell (src/soft/soft_doorbell.cu has the code).
//
// A CPU thread cannot run the executor of a GPU device (its state is GPU memory), so each of
// its doorbells needs a kernel. One launch per doorbell costs a launch's CPU time and a
// kernel's start per WQE batch and serialises every QP behind the library's stream (0.21 M
// 8-byte WRITEs per second on the H200, however many QPs and CPU threads). The board batches
// them: each QP of the device has a slot of three counters in pinned host memory (send,
// receive and drive doorbells), which CPU threads bump. The slots are dealt to kBoardParts
// parts (slot i to part i % kBoardParts), each with its own stream; one kernel at a time per
// part serves every slot of the part whose counters moved since it last looked, and a
// doorbell launches a kernel only when its part has none on its way. Parts run side by side
// and independently: a long drain on one QP holds up only its part's QPs.
//
// No read-modify-write crosses PCIe (atomics of a GPU on host memory are not atomic with
// the CPU's on most hosts): the CPU writes only the counters, the GPU only `finished`.
//   doorbell (CPU):  bump a counter; full fence; read the part's `finished`; if it equals
//                    the part's `launched` (every kernel launched has said it is done),
//                    launch kernel launched+1 on the part's stream.
//   kernel g (GPU):  sweep the part's slots until a sweep finds nothing (or its time is
//                    up); store finished = g; full fence; one more sweep, and exit.
// A Dekker pair: a doorbell whose read of `finished` comes before kernel g's store (so it did
// not launch) has its counter seen by g's last sweep, which comes after the store and the
// fence; a doorbell that reads g launches g+1. A part's kernels run one after another on its
// stream, so two never serve the same slot at once (and the QP's execution lock orders them
// with the application's kernels that commit on the same QP). A kernel is one block and
// waits for nothing: no deadlock when the application's kernels hold every SM.
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

constexpr uint32_t kBoardParts = 16;  ///< parts (streams, kernels at once) per board

/// The part that serves slot i. QPs come in pairs (requester, responder: slots 2k, 2k+1), so
/// i % parts alone would leave every requester on an even part; the next bits spread them.
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr uint32_t board_part(uint32_t i) { return (i ^ (i / kBoardParts)) % kBoardParts; }

/// A part's `finished`: the last kernel of the part that has said it is done (GPU-written).
struct alignas(64) BoardFinished {
    unsigned long long gen;
};

/// The board's pinned host part (mapped: the GPU has its own address for it).
struct BoardHost {
    BoardFinished finished[kBoardParts];
    alignas(64) uint32_t count;  ///< slots in use are below this (CPU-written)
    alignas(64) Bell bell[1];    ///< [slots]
};

/// A slot's GPU-memory part: which QP, and the counters its kernel has served.
struct BoardSlot {
    QpContext* q;  ///< null: free
    uint32_t seen[3];
    uint32_t pad;
};

/// The board's GPU-memory part.
struct BoardDev {
    uint32_t slots;  ///< how many slots the board has
    uint32_t stats;  ///< 1: the kernels count what they do (GV_DOORBELL_BOARD_STATS=1)
    /// How long a kernel keeps sweeping while it finds work (ns; GV_DOORBELL_BOARD_SWEEP_NS).
    unsigned long long sweep_ns;
    /// With stats: kernels' lifetimes, time in serve(), WQEBBs executed, sweeps (ns, counts).
    unsigned long long kernel_ns, serve_ns, wqebbs, sweeps;
    BoardSlot slot[1];  ///< [slots]
};

constexpr uint32_t kBoardDefaultSlots = 1024;
/// How long a board kernel keeps sweeping while it finds work, by default (ns). Bounded, so
/// that a CPU thread that never stops posting cannot keep one kernel running for ever (a
/// cudaDeviceSynchronize elsewhere would wait for it): the next doorbell launches the next.
constexpr unsigned long long kBoardDefaultSweepNs = 200000;
constexpr uint32_t kBoardThreads = 256;    ///< threads per block

}  // namespace gv::detail::soft
