// State of the software RDMA device: what a NIC keeps in its own memory (its QP and CQ
// contexts, its memory-region table).
//
// It lives where the device's executors run: in GPU memory for a device bound to a GPU
// (every executor is a CUDA thread group), in host memory for a CPU-only device. Users
// never touch it; host objects create it, kernels and CPU threads reach it through the
// pointers in their QP handles.
#pragma once

#include <infiniband/mlx5dv.h>

#include "gpuverbs/config.hpp"
#include "gpuverbs/device/atomic.cuh"
#include "gpuverbs/types.hpp"

namespace gv::detail::soft {

/// Largest scatter/gather list of one send or receive WQE.
inline constexpr uint32_t kMaxSge = 8;
/// Copy segments one WQE can need: a gather list scattered over a receive list.
inline constexpr uint32_t kMaxPlanSegs = 2 * kMaxSge;

/// One registered memory region. lkey == rkey == key = (index << 8) | tag, tag != 0, so
/// no key ever equals MLX5_INVALID_LKEY (0x100), which terminates short receive lists.
struct MrEntry {
    uint64_t addr;    ///< first registered byte, as the user addresses it
    uint64_t length;  ///< registered bytes
    int64_t xlate;    ///< executor pointer = user address + xlate
    uint32_t key;
    uint32_t pd;
    uint32_t access;  ///< gv::Access bits
    uint32_t sys;     ///< 1: host memory (stores need system-scope fences)
    uint32_t valid;
    /// 1: the bytes lie in the owner's shared arena (gv::SharedBuffer), which peer processes
    /// map at the same address. Executors of another process touch only such regions.
    uint32_t shared;
    uint32_t pad[4];
};
static_assert(sizeof(MrEntry) == 64, "one MR entry per cache line");

struct MrTable {
    MrEntry* entries;
    uint32_t capacity;
    /// Process that registered the regions (its pid; 0 on GPU devices). An executor whose
    /// QP's own table has another owner must not dereference the table's private regions.
    uint32_t owner;
};

struct CqState {
    mlx5_cqe64* cqes;  ///< the user-visible ring, executor pointer
    uint32_t* dbrec;   ///< the ring's doorbell record (consumer index), executor pointer
    uint32_t log_cnt;
    uint32_t sys;      ///< ring in host memory
    uint32_t cqn;
    uint32_t pad;
    uint32_t* overrun;  ///< flag beside the ring, set once a completion found it full
    unsigned long long prod;  ///< completions produced (slot reservation)
};

struct CopySeg {
    uint64_t dst;
    uint64_t src;
    uint64_t len;
};

/// What executing one WQE produced, written by the group's leader.
struct Outcome {
    uint8_t req_syndrome;   ///< 0 or the requester's error syndrome
    uint8_t resp_syndrome;  ///< 0 or the responder's error syndrome
    uint8_t opcode;         ///< WQE opcode
    uint8_t signaled;
    uint8_t resp_kind;      ///< 0, or the responder CQE opcode to produce
    uint8_t pad[1];
    uint16_t wqe_index;
    uint16_t rq_index;
    uint16_t pad2;
    uint32_t bbs;
    uint32_t byte_len;
    uint32_t imm_be;
};

/// Scratch the group holding a QP's execution fills for each WQE (one QP, one holder).
struct Plan {
    uint32_t act;  ///< what the group does next (exec.cuh's Action)
    uint32_t nseg;
    uint32_t sys;  ///< a destination is host memory: fence at system scope
    uint32_t pad;
    Outcome out;
    CopySeg seg[kMaxPlanSegs];
};

struct QpContext {
    // --- configuration, written by the host ---
    uint32_t qpn;
    uint32_t pd;
    uint32_t state;          ///< a gv::QpState value (read and written with atomics)
    uint32_t access;         ///< remote access this QP allows as responder (gv::Access bits)
    uint32_t sq_log_bb;      ///< log2 of send-queue WQEBBs
    uint32_t rq_log_cnt;     ///< log2 of receive WQEs
    uint32_t rq_log_stride;  ///< log2 of bytes per receive WQE
    uint32_t max_send_sge;
    uint32_t max_recv_sge;
    uint32_t max_inline;
    uint32_t rnr_retry;      ///< 0..7, 7 = retry forever
    uint32_t min_rnr_timer;  ///< 0..31, IB encoding (the delay this QP asks senders for)
    uint32_t sys;            ///< queues in host memory
    uint32_t remote_qpn;
    uint8_t* sq;
    uint8_t* rq;
    uint32_t* dbrec;
    CqState* scq;
    CqState* rcq;
    QpContext* remote;    ///< the connected peer (set on RTR)
    MrTable local_mrs;
    MrTable remote_mrs;  ///< the peer device's registrations

    // --- execution state ---
    uint32_t lock;           ///< held by the group executing this QP's send queue
    uint32_t syndrome;       ///< why the QP entered ERROR (0: moved there by the user)
    unsigned long long sq_ci;  ///< WQEBBs consumed
    unsigned long long rq_ci;  ///< receive WQEs consumed (claimed by CAS)
    unsigned long long rq_flushed;  ///< receive WQEs flushed after ERROR
    uint32_t rnr_count;      ///< RNR retries spent on the WQE at sq_ci
    uint32_t rnr_waiting;    ///< 1 while the WQE at sq_ci waits for a receive
    unsigned long long rnr_deadline;  ///< next retry time (ns)
    unsigned long long executed;      ///< WQEs executed (statistics)
    Plan plan;
};

/// The QP's state, with acquire ordering (what moved it there, e.g. the syndrome written
/// before an ERROR, is seen with it).
GV_HOST_DEVICE QpState load_state(const QpContext* q) { return QpState(atom::load_acquire(&q->state)); }
/// The QP's state, relaxed: for callers that have just fenced, or that hold the QP's lock.
GV_HOST_DEVICE QpState load_state_relaxed(const QpContext* q) { return QpState(atom::load_relaxed(&q->state)); }
/// True in the states where the send queue executes (RTS, SQD).
GV_HOST_DEVICE bool sends_allowed(QpState s) { return s == QpState::Rts || s == QpState::Sqd; }
/// True in the states where a QP takes incoming requests (RTR, RTS, SQD).
GV_HOST_DEVICE bool receives_allowed(QpState s) { return s == QpState::Rtr || sends_allowed(s); }
/// True in the error states, where everything outstanding is flushed.
GV_HOST_DEVICE bool in_error(QpState s) { return s == QpState::Error || s == QpState::Sqe; }

/// RNR NAK timer encoding of the InfiniBand specification, in microseconds.
GV_HOST_DEVICE uint32_t rnr_timer_us(uint32_t code) {
    constexpr uint32_t t[32] = {655360, 10,    20,    30,    40,    60,     80,     120,
                                160,    240,   320,   480,   640,   960,    1280,   1920,
                                2560,   3840,  5120,  7680,  10240, 15360,  20480,  30720,
                                40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};
    return t[code & 31];
}

}  // namespace gv::detail::soft
