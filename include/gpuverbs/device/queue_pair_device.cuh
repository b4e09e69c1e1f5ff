// Device handle of a reliable-connection queue pair and the data-path operations on it:
// post WRITE / WRITE_IMM / READ / NOP / atomics / RECV, commit (doorbell), poll and wait.
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
};
static_assert(std::is_trivially_copyable_v<QpHandle>);

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

// ---- positions ------------------------------------------------------------------------

GV_HOST_DEVICE uint8_t* sq_seg(const QpHandle& qp, unsigned long long pos_bb, uint32_t k) {
    uint64_t ring = 64ull << qp.sq_log_bb;
    // A WQE that runs past the ring's end continues at its start, as on mlx5.
    return qp.sq + ((pos_bb * 64 + uint64_t(k) * 16) & (ring - 1));
}

/// Reserves n entries of a ring whose positions are handed out by *reserved and freed by
/// *retired (advanced by completion polling); waits up to timeout_ns while it lacks room.
/// On Timeout nothing is reserved.
GV_HOST_DEVICE Status ring_reserve(unsigned long long* reserved, const unsigned long long* retired, uint32_t n,
                                   unsigned long long ring, bool sys, uint64_t timeout_ns,
                                   unsigned long long* pos) {
    if (n > ring) return Status::InvalidArgument;
    uint64_t start = 0;
    uint32_t spins = 0;
    for (;;) {
        unsigned long long r = atom::load_relaxed(reserved, sys);
        unsigned long long done = atom::load_acquire(retired, sys);
        if (r + n - done <= ring) {
            // Relaxed: the acquire load of *retired above already orders the slots'
            // retirement before our stores into them; the counter itself guards no data.
            if (atom::cas_relaxed(reserved, r, r + n, sys)) {
                *pos = r;
                return Status::Ok;
            }
            continue;
        }
        if (timeout_ns != kWaitForever) {
            uint64_t now = atom::now_ns();
            if (!start) start = now;
            else if (now - start > timeout_ns) return Status::Timeout;
        }
        spin_pause(spins);
    }
}

/// Waits until every earlier reservation of a ring is published (*ready == pos), then
/// publishes [pos, end) with a release store: the caller's entries (and *last_slot = last,
/// written once it is our turn, so it never moves backwards) are visible to whoever
/// acquires *ready. Earlier reservers are running threads that only write their entries
/// before publishing, so the wait always ends.
GV_HOST_DEVICE void publish_in_order(unsigned long long* ready, unsigned long long pos, unsigned long long end,
                                     bool sys, unsigned long long* last_slot = nullptr,
                                     unsigned long long last = 0) {
    uint32_t spins = 0;
    while (atom::load_acquire(ready, sys) != pos) spin_pause(spins);
    if (last_slot) atom::store_relaxed(last_slot, last, sys);
    atom::store_release(ready, end, sys);
}

/// Reserves `bbs` WQEBBs; waits (up to timeout_ns) while the ring lacks room. Completions
/// must be polled (by anyone) for slots to be freed. On Timeout nothing is reserved.
GV_HOST_DEVICE Status sq_reserve(const QpHandle& qp, uint32_t bbs, unsigned long long* pos,
                                 uint64_t timeout_ns) {
    return ring_reserve(&qp.ctr->sq_reserved, &qp.ctr->sq_retired, bbs, 1ull << qp.sq_log_bb, qp.sys != 0,
                        timeout_ns, pos);
}

/// Publishes WQEBBs [pos, pos+bbs) in reservation order; `last` is the position of the
/// last WQE among them (what an mlx5 doorbell carries).
GV_HOST_DEVICE void sq_publish(const QpHandle& qp, unsigned long long pos, uint32_t bbs,
                               unsigned long long last = ~0ull) {
    publish_in_order(&qp.ctr->sq_ready, pos, pos + bbs, qp.sys != 0, &qp.ctr->sq_last,
                     last == ~0ull ? pos : last);
}

/// A send-queue reservation made by one thread, jointly by the converged lanes of a warp
/// posting to the same QP, or by a whole block (one atomic and one publication for all).
struct Reservation {
    unsigned long long pos;   ///< this thread's first WQEBB
    unsigned long long base;  ///< the group's first WQEBB
    unsigned long long last;  ///< position of the group's last WQE
    uint32_t total;           ///< WQEBBs of the whole group (0: nothing to publish)
    uint32_t mask;            ///< lanes of the group (warp form), 0 otherwise
    uint32_t leader;          ///< lane that reserved and publishes (warp form)
    Status status;            ///< Ok, or why nothing was reserved (same for the group)
};

/// Reserves `bbs` WQEBBs for the calling thread (bbs may be 0: the thread takes part in a
/// collective reservation without posting).
///  - Thread / Warp scope: the converged lanes of a warp that reserve on the same QP at the
///    same time share one reservation (warp aggregation), ranks ordered by lane. Warp scope
///    additionally promises that every lane of the warp calls.
///  - Block scope: every thread of the block calls; thread 0 reserves for all, ranks ordered
///    by linear thread index.
/// Waits up to timeout_ns for room; on Timeout nothing is reserved, for any member.
template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status sq_reserve_group(const QpHandle& qp, uint32_t bbs, Reservation* res,
                                       uint64_t timeout_ns) {
    if (qp.ctr == nullptr) {  // a default-constructed handle: uniform across any group
        *res = Reservation{};
        res->status = Status::InvalidArgument;
        return res->status;
    }
#if GV_DEVICE_CODE
    namespace cg = cooperative_groups;
    if constexpr (S == Scope::Block) {
        __shared__ uint32_t warp_off[32];
        __shared__ unsigned long long blk_base, blk_last;
        __shared__ uint32_t blk_total;
        __shared__ int blk_st;
        const uint32_t tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
        const uint32_t nthreads = blockDim.x * blockDim.y * blockDim.z;
        const uint32_t lane = tid & 31, wid = tid >> 5;
        const uint32_t wmask = __activemask();
        uint32_t incl = bbs;
        for (uint32_t o = 1; o < 32; o <<= 1) {
            uint32_t v = __shfl_up_sync(wmask, incl, o);
            if (lane >= o) incl += v;
        }
        const uint32_t wsize = min(32u, nthreads - wid * 32);
        if (lane == wsize - 1) warp_off[wid] = incl;  // the warp's total, for now
        __syncthreads();
        if (tid == 0) {
            uint32_t run = 0;
            for (uint32_t w = 0; w < (nthreads + 31) / 32; ++w) {
                uint32_t t = warp_off[w];
                warp_off[w] = run;
                run += t;
            }
            blk_total = run;
            unsigned long long b = 0;
            blk_st = run ? int(sq_reserve(qp, run, &b, timeout_ns)) : int(Status::Ok);
            blk_base = b;
        }
        __syncthreads();
        res->pos = blk_base + warp_off[wid] + incl - bbs;
        if (tid == nthreads - 1) blk_last = res->pos;
        __syncthreads();
        res->base = blk_base;
        res->last = blk_last;
        res->total = blk_total;
        res->mask = 0;
        res->leader = 0;
        res->status = Status(blk_st);
        return res->status;
    } else {
        const uint32_t mask = __match_any_sync(__activemask(), reinterpret_cast<unsigned long long>(qp.ctr));
        auto grp = cg::labeled_partition(cg::coalesced_threads(), reinterpret_cast<unsigned long long>(qp.ctr));
        uint32_t excl = cg::exclusive_scan(grp, bbs);
        uint32_t total = cg::reduce(grp, bbs, cg::plus<uint32_t>());
        // The last WQE is the one of the highest-ranked member that posts one.
        uint32_t last_off = excl;
        uint32_t posting = bbs ? grp.thread_rank() : 0;
        uint32_t last_rank = cg::reduce(grp, posting, cg::greater<uint32_t>());
        last_off = grp.shfl(last_off, last_rank);
        unsigned long long base = 0;
        int st = int(Status::Ok);
        if (grp.thread_rank() == 0 && total) st = int(sq_reserve(qp, total, &base, timeout_ns));
        st = grp.shfl(st, 0);
        base = grp.shfl(base, 0);
        res->pos = base + excl;
        res->base = base;
        res->last = base + last_off;
        res->total = total;
        res->mask = mask;
        res->leader = __ffs(mask) - 1;
        res->status = Status(st);
        return res->status;
    }
#else
    static_assert(S == Scope::Thread, "CPU threads post at thread scope");
    res->mask = 0;
    res->leader = 0;
    res->total = bbs;
    res->pos = 0;
    res->status = bbs ? sq_reserve(qp, bbs, &res->pos, timeout_ns) : Status::Ok;
    res->base = res->last = res->pos;
    return res->status;
#endif
}

/// The group leader's part of publication: after every earlier reservation, the group's
/// WQEBBs become the published prefix (release: the members' WQE stores, ordered before by
/// the group barrier, are visible to whoever acquires sq_ready).
GV_HOST_DEVICE void sq_publish_range(const QpHandle& qp, const Reservation& res) {
    if (res.total && res.status == Status::Ok) sq_publish(qp, res.base, res.total, res.last);
}

/// Publishes a reservation once every member wrote its WQE; returns when the WQEs are
/// published (so a commit by any member includes them). Collective like the reservation.
template <Scope S = Scope::Thread>
GV_HOST_DEVICE void sq_publish_group(const QpHandle& qp, const Reservation& res) {
#if GV_DEVICE_CODE
    if constexpr (S == Scope::Block) {
        // The block barrier orders every thread's WQE stores before thread 0's release
        // store (release is cumulative over what thread 0 observed through the barrier).
        __syncthreads();
        if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) sq_publish_range(qp, res);
        __syncthreads();
    } else {
        // Same reasoning with the warp barrier.
        __syncwarp(res.mask);
        uint32_t lane;
        asm("mov.u32 %0, %%laneid;" : "=r"(lane));
        if (lane == res.leader) sq_publish_range(qp, res);
        __syncwarp(res.mask);
    }
#else
    if (res.total && res.status == Status::Ok) sq_publish(qp, res.pos, res.total);
#endif
}

GV_HOST_DEVICE uint8_t fm_ce_se(uint32_t flags) {
    return uint8_t(((flags & kSignaled) ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
                   ((flags & kFence) ? MLX5_WQE_CTRL_FENCE : 0) |
                   ((flags & kSolicited) ? MLX5_WQE_CTRL_SOLICITED : 0));
}

// ---- WQE builders (write one WQE at a reserved position) -------------------------------

/// RDMA WRITE / WRITE_IMM / READ / SEND / SEND_IMM with a gather (scatter for READ) list.
/// Returns the ds count. Zero-length entries are skipped, as rdma-core does.
GV_HOST_DEVICE uint32_t build_sge_wqe(const QpHandle& qp, unsigned long long pos, uint8_t opcode,
                                      uint32_t flags, uint32_t imm_be, uint64_t raddr,
                                      uint32_t rkey, const Sge* sg, uint32_t n) {
    const bool rdma = opcode == MLX5_OPCODE_RDMA_WRITE || opcode == MLX5_OPCODE_RDMA_WRITE_IMM ||
                      opcode == MLX5_OPCODE_RDMA_READ;
    uint32_t k = 1;
    if (rdma) mlx5::set_raddr_seg(reinterpret_cast<mlx5_wqe_raddr_seg*>(sq_seg(qp, pos, k++)), raddr, rkey);
    for (uint32_t i = 0; i < n; ++i) {
        if (!sg[i].length) continue;
        mlx5::set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(sq_seg(qp, pos, k++)), sg[i].length,
                           sg[i].lkey, sg[i].addr);
    }
    mlx5::set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(sq_seg(qp, pos, 0)), uint16_t(pos), opcode,
                       0, qp.qpn, fm_ce_se(flags), uint8_t(k), 0, imm_be);
    return k;
}

GV_HOST_DEVICE uint32_t sge_wqe_ds(uint8_t opcode, const Sge* sg, uint32_t n) {
    uint32_t k = (opcode == MLX5_OPCODE_SEND || opcode == MLX5_OPCODE_SEND_IMM) ? 1 : 2;
    for (uint32_t i = 0; i < n; ++i) k += sg[i].length ? 1 : 0;
    return k;
}

/// Posts one WQE with a gather/scatter list (strong form: the library reserves its
/// position). Scope as in sq_reserve_group: Thread (any threads, any time), Warp (every
/// lane of the warp calls, one WQE each), Block (every thread of the block calls). Invalid
/// arguments return InvalidArgument to the caller only; collective calls stay collective.
template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status post_sge(const QpHandle& qp, uint8_t opcode, const Sge* sg, uint32_t n,
                               uint64_t raddr, uint32_t rkey, uint32_t imm, uint32_t flags,
                               uint64_t timeout_ns = kWaitForever) {
    const bool valid = n <= qp.max_send_sge;
    uint32_t bbs = valid ? mlx5::ds_to_bbs(sge_wqe_ds(opcode, sg, n)) : 0;
    Reservation res;
    Status st = sq_reserve_group<S>(qp, bbs, &res, timeout_ns);
    if (st == Status::Ok && valid)
        build_sge_wqe(qp, res.pos, opcode, flags, mlx5::to_be32(imm), raddr, rkey, sg, n);
    sq_publish_group<S>(qp, res);
    return valid ? st : Status::InvalidArgument;
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
    if (st == Status::Ok)
        mlx5::set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(sq_seg(qp, res.pos, 0)), uint16_t(res.pos),
                           MLX5_OPCODE_NOP, 0, qp.qpn, fm_ce_se(flags), 1, 0, 0);
    sq_publish_group<S>(qp, res);
    return st;
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
    uint64_t ring = 64ull << qp.sq_log_bb;
    uint64_t off = (pos * 64 + uint64_t(k) * 16 + 4) & (ring - 1);
    for (uint32_t i = 0; i < len; ++i) qp.sq[(off + i) & (ring - 1)] = src[i];
    mlx5::set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(sq_seg(qp, pos, 0)), uint16_t(pos), opcode, 0,
                       qp.qpn, fm_ce_se(flags), uint8_t(ds), 0, mlx5::to_be32(imm));
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
    const bool valid = len <= qp.max_inline && ds <= mlx5::kMaxDs;
    Reservation res;
    Status st = sq_reserve_group<S>(qp, valid ? mlx5::ds_to_bbs(ds) : 0, &res, timeout_ns);
    if (st == Status::Ok && valid) build_inline_wqe(qp, res.pos, opcode, data, len, raddr, rkey, imm, flags, ds);
    sq_publish_group<S>(qp, res);
    return valid ? st : Status::InvalidArgument;
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
    mlx5::set_raddr_seg(reinterpret_cast<mlx5_wqe_raddr_seg*>(sq_seg(qp, pos, 1)), raddr, rkey);
    mlx5::set_atomic_seg(reinterpret_cast<mlx5_wqe_atomic_seg*>(sq_seg(qp, pos, 2)), swap_add, compare);
    mlx5::set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(sq_seg(qp, pos, 3)), 8, lkey,
                       reinterpret_cast<uint64_t>(laddr));
    mlx5::set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(sq_seg(qp, pos, 0)), uint16_t(pos), opcode, 0,
                       qp.qpn, fm_ce_se(flags), 4, 0, 0);
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
    if (st == Status::Ok) build_atomic_wqe(qp, res.pos, opcode, laddr, lkey, raddr, rkey, swap_add, compare, flags);
    sq_publish_group<S>(qp, res);
    return st;
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

// ---- weak form: the caller chooses positions --------------------------------------------

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
    unsigned long long r = atom::load_acquire(&qp.ctr->sq_reserved, qp.sys != 0);
    unsigned long long ret = atom::load_acquire(&qp.ctr->sq_retired, qp.sys != 0);
    uint32_t ring = 1u << qp.sq_log_bb;
    return SqPosition{r, ring - 1, uint32_t(ring - (r - ret))};
}

/// Weak-form builders: one single-WQEBB WQE at a caller-chosen position (thread scope,
/// no atomics). WRITE / READ / SEND with one buffer, atomics, and inline payloads that fit
/// one WQEBB (<= 28 bytes for WRITE, <= 44 for SEND); larger returns InvalidArgument.
GV_HOST_DEVICE Status write_weak(const QpHandle& qp, unsigned long long pos, const void* laddr, uint32_t len,
                                 uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t flags = 0) {
    Sge s{reinterpret_cast<uint64_t>(laddr), len, lkey};
    build_sge_wqe(qp, pos, MLX5_OPCODE_RDMA_WRITE, flags, 0, raddr, rkey, &s, 1);
    return Status::Ok;
}
GV_HOST_DEVICE Status read_weak(const QpHandle& qp, unsigned long long pos, void* laddr, uint32_t len,
                                uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t flags = 0) {
    Sge s{reinterpret_cast<uint64_t>(laddr), len, lkey};
    build_sge_wqe(qp, pos, MLX5_OPCODE_RDMA_READ, flags, 0, raddr, rkey, &s, 1);
    return Status::Ok;
}
GV_HOST_DEVICE Status send_weak(const QpHandle& qp, unsigned long long pos, const void* laddr, uint32_t len,
                                uint32_t lkey, uint32_t flags = 0) {
    Sge s{reinterpret_cast<uint64_t>(laddr), len, lkey};
    build_sge_wqe(qp, pos, MLX5_OPCODE_SEND, flags, 0, 0, 0, &s, 1);
    return Status::Ok;
}
GV_HOST_DEVICE Status write_inline_weak(const QpHandle& qp, unsigned long long pos, const void* data,
                                        uint32_t len, uint64_t raddr, uint32_t rkey, uint32_t flags = 0) {
    uint32_t ds = inline_wqe_ds(MLX5_OPCODE_RDMA_WRITE, len);
    if (len > qp.max_inline || mlx5::ds_to_bbs(ds) != 1) return Status::InvalidArgument;
    build_inline_wqe(qp, pos, MLX5_OPCODE_RDMA_WRITE, data, len, raddr, rkey, 0, flags, ds);
    return Status::Ok;
}
GV_HOST_DEVICE Status fetch_add_weak(const QpHandle& qp, unsigned long long pos, uint64_t* laddr, uint32_t lkey,
                                     uint64_t raddr, uint32_t rkey, uint64_t add, uint32_t flags = 0) {
    build_atomic_wqe(qp, pos, MLX5_OPCODE_ATOMIC_FA, laddr, lkey, raddr, rkey, add, 0, flags);
    return Status::Ok;
}

// ---- doorbell ---------------------------------------------------------------------------

/// Moves the send doorbell record forward to `ready`, never backwards when committers
/// race (16-bit field compared modulo 2^16; rings hold at most 2^15 WQEBBs).
GV_HOST_DEVICE void sq_update_dbrec(const QpHandle& qp, unsigned long long ready) {
    mlx5::advance_dbrec(&qp.dbrec[MLX5_SND_DBR], uint32_t(ready), 16, qp.sys != 0);
}

/// Rings the doorbell for everything published so far. Scope says who calls: one thread,
/// all active lanes of the warp, or every thread of the block. On the software device the
/// calling group executes the QP's published WQEs (cooperatively, in order) unless another
/// group is already doing so, so call commit with the widest scope you have.
/// Returns QpNotReady before RTS and QpError in ERROR (work then completes flushed).
template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status commit(const QpHandle& qp) {
    if (qp.ctr == nullptr) return Status::InvalidArgument;  // default-constructed handle
#if GV_DEVICE_CODE
    // Every WQE the group published before the call is included.
    bool lead = true;
    if constexpr (S == Scope::Warp) {
        soft::WarpGroup g;
        g.sync();
        lead = g.leader();
    }
    if constexpr (S == Scope::Block) {
        soft::BlockGroup g;
        g.sync();
        lead = g.leader();
    }
#else
    static_assert(S == Scope::Thread, "CPU threads commit at thread scope");
    const bool lead = true;
#endif
    if (lead) sq_update_dbrec(qp, atom::load_acquire(&qp.ctr->sq_ready, qp.sys != 0));
    if (qp.backend == BackendKind::Mlx5) {
        if (lead && qp.uar) {
            unsigned long long last = atom::load_acquire(&qp.ctr->sq_last, qp.sys != 0);
            mlx5::ring_uar(qp.uar, reinterpret_cast<const mlx5_wqe_ctrl_seg*>(sq_seg(qp, last, 0)));
        }
        return Status::Ok;
    }
    if (qp.backend != BackendKind::Soft) return Status::Ok;
#if !GV_DEVICE_CODE
    if (!qp.soft_on_host) {
        qp.host_doorbell(qp.host_ctx, 0);
        return Status::Ok;
    }
#endif
    uint32_t state;
#if GV_DEVICE_CODE
    if constexpr (S == Scope::Warp) {
        soft::WarpGroup g;
        soft::progress(qp.soft, g);
    } else if constexpr (S == Scope::Block) {
        soft::BlockGroup g;
        soft::progress(qp.soft, g);
    } else {
        soft::progress(qp.soft, soft::ThreadGroup{});
    }
#else
    soft::progress(qp.soft, soft::ThreadGroup{});
#endif
    state = atom::load_acquire(&qp.soft->state);
    if (state == soft::kErr) return Status::QpError;
    if (state != soft::kRts && state != soft::kSqd) return Status::QpNotReady;
    return Status::Ok;
}

/// Weak form's publish (see get_position): publishes the n WQEBBs the caller wrote at
/// get_position().pos .. pos+n-1 (the single-WQEBB WQEs of the *_weak builders), then
/// rings the doorbell as commit<S> does. Scope: Thread (the caller wrote every WQE, or
/// synchronized with the threads that did), Warp (every active lane calls), Block (every
/// thread calls). n larger than get_position().free: InvalidArgument, nothing published.
template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status commit_weak(const QpHandle& qp, uint32_t n) {
    bool lead = true;
#if GV_DEVICE_CODE
    soft::WarpGroup wg;
    if constexpr (S == Scope::Warp) {
        // The warp barrier orders every lane's WQE stores before the leader's release
        // store below (release is cumulative over what the leader observed through it).
        wg.sync();
        lead = wg.leader();
    } else if constexpr (S == Scope::Block) {
        // Same with the block barrier: thread 0 publishes what every thread wrote.
        __syncthreads();
        lead = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
    }
#else
    static_assert(S == Scope::Thread, "CPU threads commit at thread scope");
#endif
    int st = int(Status::Ok);
    if (lead && n) {
        // get_position acquires sq_retired: the claimed slots' old WQEs were retired.
        SqPosition p = get_position(qp);
        if (n > p.free) {
            st = int(Status::InvalidArgument);
        } else {
            // Relaxed: only the weak form's owner moves sq_reserved now, and it orders
            // nothing (the release store of sq_ready below publishes the WQEs).
            atom::store_relaxed(&qp.ctr->sq_reserved, p.pos + n, qp.sys != 0);
            // Strong-form WQEs reserved before the caller took the queue are published
            // first, so the published prefix has no hole; the release makes the WQE bytes
            // visible to whoever acquires sq_ready, as commit's doorbell-record update does.
            sq_publish(qp, p.pos, n, p.pos + n - 1);
        }
    }
#if GV_DEVICE_CODE
    if constexpr (S == Scope::Warp) {
        st = __shfl_sync(wg.mask, st, wg.lead);
    } else if constexpr (S == Scope::Block) {
        __shared__ int blk_st;
        if (lead) blk_st = st;
        __syncthreads();  // commit<Block> syncs again before blk_st can be rewritten
        st = blk_st;
    }
#endif
    if (st != int(Status::Ok)) return Status(st);
    return commit<S>(qp);
}

// ---- receive queue ----------------------------------------------------------------------

/// Posts a receive of up to n buffers (n <= max_recv_sge) and updates the receive doorbell
/// record (mlx5 has no receive doorbell beyond it). Thread scope, strong.
/// A receive needs no buffer (sg = nullptr, n = 0; zero-length entries are skipped): it
/// takes a WRITE_IMM, whose data goes where the writer said and whose completion carries
/// the immediate and the byte count, or a zero-length SEND. A SEND with data into it fails
/// as on a NIC: the receive completes with LOCAL_LENGTH_ERR, the SEND with
/// REMOTE_INVAL_REQ_ERR, and both QPs go to ERROR.
GV_HOST_DEVICE Status post_recv(const QpHandle& qp, const Sge* sg, uint32_t n,
                                uint64_t timeout_ns = kWaitForever) {
    if (qp.ctr == nullptr) return Status::InvalidArgument;  // default-constructed handle
    if (n > qp.max_recv_sge) return Status::InvalidArgument;
    const unsigned long long ring = 1ull << qp.rq_log_cnt;
    unsigned long long pos;
    Status st = ring_reserve(&qp.ctr->rq_reserved, &qp.ctr->rq_retired, 1, ring, qp.sys != 0, timeout_ns, &pos);
    if (st != Status::Ok) return st;
    auto* ds = reinterpret_cast<mlx5_wqe_data_seg*>(qp.rq + ((pos & (ring - 1)) << qp.rq_log_stride));
    const uint32_t cap = (1u << qp.rq_log_stride) / 16;
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; ++i) {
        if (!sg[i].length) continue;
        mlx5::set_data_seg(&ds[k++], sg[i].length, sg[i].lkey, sg[i].addr);
    }
    if (k < cap) mlx5::set_data_seg(&ds[k], 0, MLX5_INVALID_LKEY, 0);  // end of list
    publish_in_order(&qp.ctr->rq_ready, pos, pos + 1, qp.sys != 0);
    // Monotonic receive doorbell record, as for the send queue.
    mlx5::advance_dbrec(&qp.dbrec[MLX5_RCV_DBR], uint32_t(pos + 1), 16, qp.sys != 0);
    if (qp.backend != BackendKind::Soft) return Status::Ok;
#if !GV_DEVICE_CODE
    if (!qp.soft_on_host) {
        qp.host_doorbell(qp.host_ctx, 1);
        return Status::Ok;
    }
#endif
    // A receive can unblock a sender waiting under RNR rules, and in ERROR it is flushed.
    atom::fence_seq_cst();
    if (atom::load_acquire(&qp.soft->state) == soft::kErr) soft::flush_rq(qp.soft);
    soft::QpState* peer = qp.soft->remote;
    if (peer && soft::peer_in_process(qp.soft) && atom::load_acquire(&peer->rnr_waiting))
        soft::progress(peer, soft::ThreadGroup{});
    return Status::Ok;
}

/// Posts a receive of one buffer (post_recv). recv(qp, nullptr, 0, 0): a receive without a
/// buffer, for a WRITE_IMM's immediate.
GV_HOST_DEVICE Status recv(const QpHandle& qp, void* laddr, uint32_t len, uint32_t lkey,
                           uint64_t timeout_ns = kWaitForever) {
    Sge s{reinterpret_cast<uint64_t>(laddr), len, lkey};
    return post_recv(qp, &s, 1, timeout_ns);
}

// ---- completions ------------------------------------------------------------------------

/// Drives the software device for a waiter: retries a send waiting for a receive (RNR),
/// flushes a QP in ERROR. Cheap when there is nothing to do.
GV_HOST_DEVICE void drive(const QpHandle& qp) {
    if (qp.backend != BackendKind::Soft || qp.soft == nullptr) return;
#if !GV_DEVICE_CODE
    if (!qp.soft_on_host) return;
#endif
    if (soft::needs_progress(qp.soft)) {
        soft::progress(qp.soft, soft::ThreadGroup{});
        if (atom::load_acquire(&qp.soft->state) == soft::kErr) soft::flush_rq(qp.soft);
    }
}

/// Waits until n completions were polled from cq (into out[0..n) when out is not null),
/// driving qp meanwhile. Thread scope. Returns Ok, CompletionError (all n were polled and
/// at least one failed: inspect out), CqOverrun, or Timeout; *polled gets the count.
GV_HOST_DEVICE Status wait_cq(const QpHandle& qp, const CqHandle& cq, uint32_t n, Completion* out,
                              uint64_t timeout_ns = kWaitForever, uint32_t* polled = nullptr) {
    if (cq.cqes == nullptr || cq.ci == nullptr) {  // default-constructed handle
        if (polled) *polled = 0;
        return Status::InvalidArgument;
    }
    uint32_t got = 0;
    bool failed = false;
    uint64_t start = 0;
    uint32_t spins = 0, idle = 0;
    while (got < n) {
        Completion tmp[8];
        Completion* dst = out ? out + got : tmp;
        uint32_t want = out ? n - got : (n - got < 8 ? n - got : 8);
        uint32_t k = poll_cq(cq, dst, want);
        for (uint32_t i = 0; i < k; ++i) failed |= !dst[i].ok();
        got += k;
        if (k) continue;
        if (cq_overrun(cq)) {
            if (polled) *polled = got;
            return Status::CqOverrun;
        }
        drive(qp);
        if (timeout_ns != kWaitForever && (++spins & 63) == 0) {
            uint64_t now = atom::now_ns();
            if (!start) start = now;
            else if (now - start > timeout_ns) {
                if (polled) *polled = got;
                return Status::Timeout;
            }
        }
        spin_pause(idle, 1024);  // waits for completions: yield later, keep latency low
    }
    if (polled) *polled = got;
    return failed ? Status::CompletionError : Status::Ok;
}

/// Waits for n completions on the QP's send CQ.
GV_HOST_DEVICE Status wait_send(const QpHandle& qp, uint32_t n, Completion* out = nullptr,
                                uint64_t timeout_ns = kWaitForever, uint32_t* polled = nullptr) {
    return wait_cq(qp, qp.scq, n, out, timeout_ns, polled);
}

/// Waits for n completions on the QP's receive CQ.
GV_HOST_DEVICE Status wait_recv(const QpHandle& qp, uint32_t n, Completion* out = nullptr,
                                uint64_t timeout_ns = kWaitForever, uint32_t* polled = nullptr) {
    return wait_cq(qp, qp.rcq, n, out, timeout_ns, polled);
}

// ---- QP state ---------------------------------------------------------------------------

/// True when the QP is in ERROR. For a kernel (or CPU thread) that waits on a memory flag
/// rather than on a completion: it learns that nothing more will come, e.g. after the
/// library's peer-death watcher (peer process exited), QueuePair::to_error() or a failed
/// WQE moved the QP there. Everything outstanding then completes with an error (WR_FLUSH_ERR
/// behind the failure), which wait_send / wait_recv collect. Thread scope, never waits,
/// cheap enough for every turn of a spin loop. What can be known depends on the backend:
///   soft          the device's own QP state, read where it lives (exact);
///   mlx5, verbs   always false: the state lives in the NIC, with no copy a GPU can read.
///                 There an error shows only as an error completion (the QP is then in ERROR).
/// Also false for a default-constructed handle, and for a CPU thread holding the handle of a
/// software device bound to a GPU (its state is GPU memory: ask QueuePair::state()).
GV_HOST_DEVICE bool qp_in_error(const QpHandle& qp) {
    if (qp.backend != BackendKind::Soft || qp.soft == nullptr) return false;
#if !GV_DEVICE_CODE
    if (!qp.soft_on_host) return false;
#endif
    // Acquire, so the cause written before the state (QpState::syndrome: enter_error's CAS
    // precedes its release store) is seen with it. Device scope, as commit() reads it: on a
    // GPU device the state is GPU memory, written by executors on that GPU (of this process
    // or a peer's) or by host copies (to_error, the watcher); a strong load is not served
    // from a stale L1 line, so a spinning kernel sees the change. On a CPU device it is host
    // memory and this is a plain CPU acquire load.
    return atom::load_acquire(&qp.soft->state) == soft::kErr;
}

}  // namespace dev
}  // namespace gv
