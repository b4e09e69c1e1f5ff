// The trivially copyable handles kernels and CPU threads drive queues through: CqHandle,
// QpHandle (a common part plus one small part per backend), and the types of the posting
// calls (Sge, work-request flags, scopes). Plain data only: host code includes it (through
// queue_pair.hpp and completion_queue.hpp) without compiling any device code; the
// operations on the handles are in the device API (gpuverbs/device.cuh).
#pragma once

#include <cstdint>
#include <type_traits>

#include "gpuverbs/types.hpp"

struct mlx5_cqe64;  // <infiniband/mlx5dv.h>

namespace gv {

/// Work-request flags.
enum : uint32_t {
    kSignaled = 1u << 0,  ///< produce a completion on success (errors always complete)
    kFence = 1u << 1,     ///< wait for earlier READs / atomics before executing
    kSolicited = 1u << 2,
    /// Commit in the same call (post, then commit<S> for the same scope; every member of a
    /// collective post gives it, or none). Not part of the WQE. On the software device a lone
    /// thread's small WRITE or READ so posted executes in the calling thread while it holds the
    /// QP, the reservation, the QP's lock and the WQE's lookups overlapping (detail/soft/direct.cuh).
    kCommit = 1u << 3,
};

/// Which threads call a collective operation (commit, wait): one thread, the calling
/// warp's active lanes, or every thread of the block.
enum class Scope { Thread, Warp, Block };

/// A local buffer of one work request: address, length and the lkey of its region.
struct Sge {
    uint64_t addr;
    uint32_t length;
    uint32_t lkey;
};

namespace detail::soft {
struct QpContext;
struct MrEntry;
}  // namespace detail::soft

namespace dev {

/// Where a poller reports completed send / receive WQEs, so that posters may reuse their
/// queue slots (one entry per QP using this CQ, found by QP number).
struct CqQpSlot {
    uint32_t qpn;  ///< 0: empty
    uint32_t sq_log_bb;
    uint8_t* sq;                       ///< to read a completed WQE's size
    unsigned long long* sq_retired;    ///< null unless this CQ is the QP's send CQ
    unsigned long long* rq_retired;    ///< null unless this CQ is the QP's receive CQ
    /// Where the poller that takes the QP's first failed completion (other than a flush)
    /// keeps its syndrome, for QueuePair::error_syndrome(); null where the backend knows it
    /// itself (the software device) rather than from the completions (a NIC).
    uint32_t* syndrome;
};

/// Trivially copyable CQ handle. Keep the CompletionQueue alive while a kernel uses it.
struct CqHandle {
    mlx5_cqe64* cqes;
    /// The doorbell record, where pollers publish the consumer index for a producer that reads
    /// it there (a NIC, the verbs proxy). Null on the software device, whose executor reads
    /// `ci` itself: pollers then skip the record (a CAS per poll).
    uint32_t* dbrec;
    unsigned long long* ci;  ///< consumer index shared by every poller
    CqQpSlot* slots;
    uint32_t* overrun;       ///< software device: set once completions were lost (else null)
    uint32_t log_cnt;
    uint32_t slot_mask;
    uint32_t sys;            ///< the ring is host memory or a NIC writes it
    uint32_t cqn;
    /// 1: the ring is host memory, so CPU threads may poll it. 0: GPU memory, which only
    /// kernels can read (a CPU thread's poll returns nothing instead of faulting).
    uint32_t host_reachable;
};
static_assert(std::is_trivially_copyable_v<CqHandle>);

/// Counters shared by every poster of one QP (in the QP's queue memory).
struct QpCounters {
    unsigned long long sq_reserved;  ///< WQEBBs handed out to posters
    unsigned long long sq_ready;     ///< WQEBBs written and published, in order
    unsigned long long sq_retired;   ///< WQEBBs whose completion was polled (reusable)
    unsigned long long sq_last;      ///< position of the last published WQE
    unsigned long long rq_reserved;
    unsigned long long rq_ready;
    unsigned long long rq_retired;
    unsigned long long pad;
};

/// The part of a QP every backend shares: its mlx5 work queues (send ring of 64-byte
/// WQEBBs, receive ring, doorbell records) and the posting counters.
struct QpQueues {
    uint8_t* sq;
    uint8_t* rq;
    uint32_t* dbrec;
    QpCounters* ctr;
    uint32_t qpn;
    uint32_t sq_log_bb;      ///< log2 of the send ring's WQEBBs
    uint32_t rq_log_cnt;     ///< log2 of the receive ring's entries
    uint32_t rq_log_stride;  ///< log2 of bytes per receive entry
    uint32_t max_inline;
    uint32_t max_send_sge;
    uint32_t max_recv_sge;
    /// 1: the queues are host memory, or a NIC or proxy thread reads them: stores and
    /// counters use system-scope ordering.
    uint32_t sys;
    /// 1: the queues are host memory, so CPU threads may post to them. 0: GPU memory,
    /// which only kernels can touch (host calls then return InvalidArgument).
    uint32_t host_reachable;
};

/// What a CPU thread asks of a software device that executes on a GPU (it cannot run the
/// executor itself: the device's state is GPU memory).
enum class HostDoorbell : uint32_t {
    SendQueue = 0,  ///< execute the send queue's published WQEs
    RecvQueue = 1,  ///< a receive was posted: flush it in ERROR, retry a sender waiting for it
    Flush = 2,      ///< the QP entered ERROR: flush everything outstanding
    Drive = 3,      ///< a CPU thread waits: retry a send waiting under RNR rules, flush in ERROR
};

/// The software device's part of a QP handle.
struct SoftQpPart {
    detail::soft::QpContext* ctx;  ///< the device's context of this QP (where executors run)
    /// Set when the device executes on a GPU: how CPU threads ring its doorbell (a launch).
    /// Null on a CPU device, whose executor CPU threads run themselves.
    void (*host_doorbell)(void* arg, HostDoorbell what);
    void* host_arg;
    /// The device's memory-region table (the QP's local_mrs: entries and capacity, fixed for
    /// the device's life), so that the direct path (detail/soft/direct.cuh) loads the local
    /// region's entry beside the lock's RMW, before the QP's context has been read.
    const detail::soft::MrEntry* mrs;
    uint32_t mr_cap;
};

struct Mlx5Flush;

/// The ConnectX (mlx5) backend's part of a QP handle (docs/mlx5.md).
struct Mlx5QpPart {
    /// The doorbell register (the UAR's doorbell word) as kernels reach it: mapped into the
    /// GPU with cudaHostRegister(IoMemory). Null when a CPU proxy thread rings
    /// (DoorbellHandler::CpuProxy) or on a CPU-only context.
    uint64_t* uar;
    /// The same register for CPU threads (its mapping in this process). Null when a CPU proxy
    /// thread rings.
    uint64_t* uar_host;
    /// Serializes reading the send doorbell record and writing the doorbell register (0 free,
    /// 1 held), so doorbells reach the NIC in producer-index order; and the producer index
    /// last rung. Both in the QP's queue memory.
    uint32_t* db_lock;
    uint32_t* db_last;
    /// Where kernels post the flush READ that makes the NIC's writes into GPU memory visible
    /// (dev::flush_gpu_writes); null when the GPU orders them itself (or ReadFlush::Never).
    const Mlx5Flush* flush;
};

/// The verbs backend's part of a QP handle: where the proxy thread publishes the QP's state,
/// so that device code sees what the software device shows (commit's QpNotReady / QpError,
/// qp_in_error). Pinned host memory, written by CPU threads only (the host's transitions and
/// the proxy), read by kernels and CPU threads with acquire loads.
struct VerbsQpPart {
    /// A gv::QpState value: the state the QP was last moved to by the host, or ERROR once the
    /// proxy saw it fail (an error completion, a malformed WQE, a lost completion).
    const uint32_t* state;
    /// CPU threads call it after they commit, post a receive, or find nothing to poll: the
    /// calling thread steps the QP itself unless its proxy thread holds it
    /// (VerbsOptions::cpu_posts_inline). Device code never calls it.
    void (*host_step)(void* arg);
    void* host_arg;
};

/// Trivially copyable QP handle, passed to kernels by value. Keep the QueuePair (and its
/// CQs and context) alive while any kernel or thread uses it.
struct QpHandle {
    QpQueues q;  ///< common to every backend
    CqHandle scq;
    CqHandle rcq;
    Backend backend;  ///< which part below is meaningful
    SoftQpPart soft;
    Mlx5QpPart mlx5;
    VerbsQpPart verbs;
};
static_assert(std::is_trivially_copyable_v<QpHandle>);

/// The mlx5 backend's read-consistency QP of a context: a loopback RC QP whose RDMA READ of a
/// word of GPU memory returns only after every earlier write of that NIC into the GPU's
/// memory landed (PCIe: a read does not pass the posted writes before it). In GPU memory.
struct Mlx5Flush {
    QpHandle qp;       ///< the loopback QP (its send CQ is polled by the flushing threads)
    uint64_t src;      ///< the GPU word the READ reads
    uint32_t src_rkey;
    uint32_t dst_lkey;
    uint64_t dst;      ///< where the READ puts it (8 bytes)
    uint32_t* failed;  ///< the syndrome of a failed flush READ (0: none); the QP is then in ERROR
};

}  // namespace dev
}  // namespace gv
