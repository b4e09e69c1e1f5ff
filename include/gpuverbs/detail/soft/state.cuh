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

// ---- scopes: who else observes what an executor writes (docs/two-gpus.md) ----------------
//
// An executor orders its stores and performs its read-modify-writes at the narrowest scope
// that includes every agent that observes or updates the same words:
//   kScopeGpu   GPU memory that only this GPU's threads touch: device scope (cuda::thread_scope_device);
//   kScopeHost  host memory (a CPU thread or a NIC reads it): system-scope fences; RMWs stay
//               device-scope operations between them (atom::sys_rmw: CUDA makes no RMW on PCIe
//               host memory atomic with respect to the CPU or another GPU anyway);
//   kScopePeer  GPU memory that threads of another GPU also read, write or update (a peer QP on
//               another GPU, memory of another GPU): system-scope fences AND system-scope RMWs
//               (cuda::thread_scope_system). Device scope only orders and makes atomic what one
//               GPU's threads see; NVLink carries native atomics, which system scope asks for.
// Values combine as bits (a WQE that stores into host memory and into a peer GPU's memory).
inline constexpr uint32_t kScopeGpu = 0;
inline constexpr uint32_t kScopeHost = 1;
inline constexpr uint32_t kScopePeer = 2;

#if defined(__CUDACC__)
template <typename T>
__device__ __forceinline__ atom::sys_ref<T> peer_ref(T* p) {
    return atom::sys_ref<T>(*p);
}
#endif

/// fetch_add at `scope` (acquire-release).
template <typename T>
GV_HOST_DEVICE T rmw_add(T* p, T v, uint32_t scope) {
#if GV_DEVICE_CODE
    if (scope == kScopePeer) {
        if constexpr (atom::kGlobal64<T>) return T(atom::g64_add_acq_rel_sys(p, v));
        else return peer_ref(p).fetch_add(v, ::cuda::memory_order_acq_rel);
    }
#endif
    return atom::fetch_add(p, v, scope != kScopeGpu);
}

/// fetch_add at `scope`, relaxed: atomic, ordering nothing (a counter whose value is all
/// the caller needs, e.g. a slot number).
template <typename T>
GV_HOST_DEVICE T rmw_add_relaxed(T* p, T v, uint32_t scope) {
#if GV_DEVICE_CODE
    if (scope == kScopePeer) {
        if constexpr (atom::kGlobal64<T>) return T(atom::g64_add_relaxed_sys(p, v));
        else return peer_ref(p).fetch_add(v, ::cuda::memory_order_relaxed);
    }
#endif
    return atom::fetch_add_relaxed(p, v, scope != kScopeGpu);
}

/// Compare-and-swap at `scope` (acquire-release); the value seen lands in `expected`.
template <typename T>
GV_HOST_DEVICE bool rmw_cas(T* p, T& expected, T desired, uint32_t scope) {
#if GV_DEVICE_CODE
    if (scope == kScopePeer) return peer_ref(p).compare_exchange_strong(expected, desired, ::cuda::memory_order_acq_rel);
#endif
    return atom::cas(p, expected, desired, scope != kScopeGpu);
}

/// Exchange at `scope` (acquire-release); returns the value replaced.
template <typename T>
GV_HOST_DEVICE T rmw_exchange(T* p, T v, uint32_t scope) {
#if GV_DEVICE_CODE
    if (scope == kScopePeer) return peer_ref(p).exchange(v, ::cuda::memory_order_acq_rel);
#endif
    return atom::exchange(p, v, scope != kScopeGpu);
}

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
    /// kScopeHost: host memory; kScopePeer: memory of another GPU of this process (registered
    /// on this device through peer access); kScopeGpu: this device's GPU memory. Stores into
    /// the first two need system-scope fences, RMWs on peer memory system-scope atomics.
    uint32_t sys;
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
    /// System-scope ordering of the ring, its doorbell record and overrun flag: the ring is host
    /// memory, or completions come from (or are polled on) another GPU (xgpu).
    uint32_t sys;
    uint32_t cqn;
    /// 1 once a QP completing into this CQ connected to a peer on another GPU: executors of two
    /// GPUs then reserve slots in `prod`, a system-scope RMW (sticky: set before that QP's RTR,
    /// never cleared while the CQ lives).
    uint32_t xgpu;
    uint32_t* overrun;  ///< flag beside the ring, set once a completion found it full
    /// The pollers' consumer index (dev::CqHandle::ci, executor pointer): how far the ring is
    /// read, which the executor checks for room where a NIC would read the doorbell record, so
    /// that pollers of the software device do not move the record (one CAS less per poll).
    /// Null: the record (tests/mlx5's stand-in NIC, whose pollers move it).
    const unsigned long long* ci;
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
    /// Two segments' destinations overlap (a scatter list whose entries overlap): the group
    /// copies the segments one after another, a barrier between them, so that a later entry's
    /// bytes win, in list order, as a NIC's DMA writes them. Set where drain() hands the plan
    /// to the group (the leader alone copies in list order anyway).
    uint32_t overlap;
    Outcome out;
    /// 0: one WQE (out). Else a run of that many SENDs (send_run.cuh), one segment each, which
    /// the group copies at once; the leader completes them after the copy (out is the first's).
    /// kRunUniform set: every segment has the same length, a multiple of 16 bytes, and 16-byte
    /// aligned ends (copy_run's one pass over all of them).
    uint32_t run;
    CopySeg seg[kMaxPlanSegs];
};
/// Plan::run: the run's segments are alike (see there).
inline constexpr uint32_t kRunUniform = 0x100;

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
    /// System-scope ordering of the queues and doorbell records: they are host memory, or (xgpu)
    /// an executor of another GPU reads them (the peer's executor reads this QP's receive queue).
    uint32_t sys;
    uint32_t remote_qpn;
    /// 1 while connected to a peer QP on another GPU (set before RTR, cleared by reset): this
    /// QP's executor fences at system scope, and every RMW it makes on its own or its peer's
    /// execution state (lock, rq_ci, syndrome, the CQs' producer counters) or on the peer's
    /// memory (RDMA atomics) is a system-scope one. Read relaxed: configuration.
    uint32_t xgpu;
    uint8_t* sq;
    uint8_t* rq;
    uint32_t* dbrec;
    /// How far the send ring may be executed, in WQEBBs (a 64-bit count; executor pointer). On
    /// the software device: the posters' QpCounters::sq_ready, which the executor reads where a
    /// NIC reads the send doorbell record, so that committers ring without moving the record (a
    /// load and a CAS less on every commit's path). tests/mlx5's stand-in NIC, which runs the
    /// executor on an mlx5 backend's rings, points it at a count of what its doorbells announced.
    const unsigned long long* sq_ready;
    CqState* scq;
    CqState* rcq;
    QpContext* remote;    ///< the connected peer (set on RTR)
    MrTable local_mrs;
    MrTable remote_mrs;  ///< the peer device's registrations

    // --- execution state ---
    /// 0: no group executes this QP's send queue; else a group does, and this counts the
    /// rings since (exec.cuh progress()).
    uint32_t lock;
    uint32_t syndrome;       ///< why the QP entered ERROR (0: moved there by the user)
    unsigned long long sq_ci;  ///< WQEBBs consumed
    unsigned long long rq_ci;  ///< receive WQEs consumed (claimed by CAS)
    unsigned long long rq_flushed;  ///< receive WQEs flushed after ERROR
    uint32_t rnr_count;      ///< RNR retries spent on the WQE at sq_ci
    uint32_t rnr_waiting;    ///< 1 while the WQE at sq_ci waits for a receive
    unsigned long long rnr_deadline;  ///< next retry time (ns)
    unsigned long long executed;      ///< WQEs executed (statistics)
    /// SENDs executed in runs (send_run.cuh; statistics, which the tests read to see that the
    /// runs they build are taken).
    unsigned long long run_sends;
    /// WQEs executed by the leader's warp in runs (warp_run.cuh; statistics, which the tests read
    /// to see that the runs they build are taken).
    unsigned long long warp_wqes;
    /// The keys of the regions the last drain's WQEs named (local, peer's): the next drain
    /// loads those entries before it has read its first WQE (load_batch), so that a lone
    /// WQE's region lookups do not wait for the WQE. Only guesses: a WQE naming other keys
    /// looks them up as before, and an entry loaded by guess is checked as any other.
    uint32_t hint_lkey;
    uint32_t hint_rkey;
    Plan plan[2];            ///< the executing group's plans (exec.cuh group_plan: CPU and warp groups)
};

/// The scope of RMWs and fences on q's execution state and its peer's (see kScopePeer):
/// kScopePeer while q is connected to a QP on another GPU, else kScopeGpu (device state is GPU
/// memory on a GPU device; on a CPU device scopes do not matter).
GV_HOST_DEVICE uint32_t state_scope(const QpContext* q) {
    return atom::load_relaxed(&q->xgpu) ? kScopePeer : kScopeGpu;
}

/// The QP's state, with acquire ordering (what moved it there, e.g. the syndrome written
/// before an ERROR, is seen with it). sys: system scope (the writer may be on another GPU).
GV_HOST_DEVICE QpState load_state(const QpContext* q, bool sys = false) {
    return QpState(atom::load_acquire(&q->state, sys));
}
/// The QP's state, relaxed: for callers that have just fenced, or that hold the QP's lock.
GV_HOST_DEVICE QpState load_state_relaxed(const QpContext* q, bool sys = false) {
    return QpState(atom::load_relaxed(&q->state, sys));
}
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
