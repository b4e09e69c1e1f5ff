// Device handle of a reliable-connection queue pair (QpHandle), its posting counters, flags
// and scopes, and the wait step shared by every loop of the data path. The operations are
// in the qp_*.cuh headers; include gpuverbs/device/queue_pair_device.cuh for all of them.
//
// Every function is __host__ __device__: a CPU thread posts the very same WQEs a CUDA
// thread does. Posting here is thread scope in the "strong" form: the library reserves
// the WQE's position with an atomic, so any number of threads may post to one QP at once.
#pragma once

#include <sched.h>
#include <time.h>

#include <type_traits>

#include "gpuverbs/device/atomic.cuh"
#include "gpuverbs/device/completion_queue_device.cuh"
#include "gpuverbs/device/status.cuh"
#include "gpuverbs/mlx5/wqe.cuh"
#include "gpuverbs/soft/exec.cuh"

#if defined(__CUDACC__)
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>
#endif

namespace gv {

/// Which engine executes the WQEs of a queue.
enum class BackendKind : uint32_t { Soft = 0, Mlx5 = 1, Verbs = 2 };

/// Work-request flags.
enum : uint32_t {
    kSignaled = 1u << 0,  ///< produce a completion on success (errors always complete)
    kFence = 1u << 1,     ///< wait for earlier READs / atomics before executing
    kSolicited = 1u << 2,
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

namespace dev {

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

/// Trivially copyable QP handle, passed to kernels by value. Keep the QueuePair (and its
/// CQs and context) alive while any kernel or thread uses it.
///
/// Which handles CPU threads may drive (post, commit, poll, wait from host code): those whose
/// queues are host memory, i.e. every QP of a CPU-only context (ContextOptions::gpu = -1), and
/// QPs created with QpOptions::memory = MemoryKind::Host on a GPU context (their commits
/// launch the GPU's executor). A QP whose queues are GPU memory (MemoryKind::Device, or
/// Default on a GPU context) is for kernels only: from host code every posting, commit and
/// wait call on it returns Status::InvalidArgument (and poll_cq returns 0) without touching
/// its memory, as for a default-constructed handle. The same holds for a CqHandle of a CQ in
/// GPU memory.
struct QpHandle {
    uint8_t* sq;
    uint8_t* rq;
    uint32_t* dbrec;
    uint64_t* uar;  ///< ConnectX doorbell register (mlx5 backend)
    QpCounters* ctr;
    soft::QpState* soft;  ///< software device state (soft backend), else null
    /// Host-side doorbell of a software device that executes on a GPU: CPU threads cannot
    /// run its executor, so they ask for a launch. what: 0 send queue, 1 receive queue.
    void (*host_doorbell)(void* ctx, uint32_t what);
    void* host_ctx;
    CqHandle scq;
    CqHandle rcq;
    uint32_t qpn;
    uint32_t sq_log_bb;
    uint32_t rq_log_cnt;
    uint32_t rq_log_stride;
    uint32_t max_inline;
    uint32_t max_send_sge;
    uint32_t max_recv_sge;
    uint32_t sys;        ///< queues in host memory, or a NIC reads them: system scope
    BackendKind backend;
    uint32_t soft_on_host;  ///< the software device's state is host memory (CPU executors)
    /// The rings, doorbell records and posting counters are GPU memory: host code must not
    /// touch them (set by QueuePair::device_handle).
    uint32_t queues_on_gpu;
};
static_assert(std::is_trivially_copyable_v<QpHandle>);

/// Host code: true when a CPU thread must not touch qp's queues (a default-constructed
/// handle, or queues in GPU memory: a host load there is a segfault). Always false in device
/// code, where it compiles away.
GV_HOST_DEVICE bool host_cannot_touch(const QpHandle& qp) {
#if GV_DEVICE_CODE
    (void)qp;
    return false;
#else
    return qp.ctr == nullptr || qp.queues_on_gpu != 0;
#endif
}

/// True when the calling thread must not touch qp's queues: a default-constructed handle,
/// or host_cannot_touch. Posting, commit and the waits then return InvalidArgument.
GV_HOST_DEVICE bool queues_unreachable(const QpHandle& qp) { return qp.ctr == nullptr || host_cannot_touch(qp); }

/// One step of a wait for another thread's progress (a poster between reserve and publish,
/// a poller freeing slots, an executor). CPU threads may outnumber cores, and the one
/// waited for may be preempted: spinning through whole time slices then lets only one
/// WQE through per slice (a convoy: every poster queues behind a preempted one), so after
/// a short spin (`limit` steps) a CPU thread gives its core away. sched_yield alone is not
/// enough when other busy threads share the cores: the scheduler may hand the core straight
/// back to another waiter, and the preempted thread waited for gets only its fair share of
/// a crowded run queue (ManyThreadsOneQp beside two busy loops on 2 cores took 14-27 s in
/// half the runs). So after `limit` yields a waiter sleeps (50 us), which leaves the cores
/// to the threads that can make progress. GPU threads only pause.
GV_HOST_DEVICE void spin_pause(uint32_t& spins, uint32_t limit = 64) {
#if GV_DEVICE_CODE
    (void)spins;
    (void)limit;
    atom::relax();
#else
    if (spins < limit) {
        ++spins;
        atom::relax();
    } else if (spins < limit + 4) {
        ++spins;
        sched_yield();
    } else {
        struct timespec ts{0, 50000};
        nanosleep(&ts, nullptr);
    }
#endif
}

}  // namespace dev
}  // namespace gv
