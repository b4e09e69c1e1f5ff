// Send- and receive-ring positions: reservation (thread, warp and block scope) and in-order
// publication. Part of gpuverbs/device/queue_pair_device.cuh.
#pragma once

#include "gpuverbs/device/completion_queue_device.cuh"
#include "gpuverbs/device/spin.cuh"
#include "gpuverbs/device/status.cuh"
#include "gpuverbs/mlx5/wqe.cuh"

#if defined(__CUDACC__)
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>
#endif

namespace gv {
namespace dev {

// ---- positions ------------------------------------------------------------------------

/// The k-th 16-byte unit of the WQE at WQEBB position pos_bb of the QP's send ring.
GV_HOST_DEVICE uint8_t* sq_seg(const QpHandle& qp, unsigned long long pos_bb, uint32_t k) {
    return mlx5::wqe_seg(qp.q.sq, qp.q.sq_log_bb, pos_bb, k);
}

/// Reserves n entries of a ring whose positions are handed out by *reserved and freed by
/// *retired (advanced by completion polling); waits up to timeout_ns while it lacks room.
/// On Timeout nothing is reserved.
///
/// Without a timeout (kWaitForever, the default) the positions are taken first, with one
/// fetch-add, and the room is waited for after: the retirement point's load is issued beside
/// the RMW, where the compare-and-swap below needs both loads back before it can be issued (two
/// rounds: about 0.95 us of a lone WRITE's path on the H200, `gv_probe_path`). A poster that
/// waits for room then already holds its positions, and the ones after it wait behind it: as
/// with the CAS, it waits until completions are polled. With a timeout, nothing may be held
/// when it expires, so the CAS takes positions only once there is room for them.
GV_HOST_DEVICE Status ring_reserve(unsigned long long* reserved, const unsigned long long* retired, uint32_t n,
                                   unsigned long long ring, bool sys, uint64_t timeout_ns,
                                   unsigned long long* pos) {
    if (n > ring) return Status::InvalidArgument;
    uint32_t spins = 0;
    if (timeout_ns == kWaitForever) {
        // Relaxed: the position is all it gives. The acquire load of *retired that finds room
        // orders the slots' retirement (their last reads) before our stores into them.
        const unsigned long long r = atom::fetch_add_relaxed(reserved, (unsigned long long)n, sys);
        while (r + n - atom::load_acquire(retired, sys) > ring) spin_pause(spins);
        *pos = r;
        return Status::Ok;
    }
    uint64_t start = 0;
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
    return ring_reserve(&qp.q.ctr->sq_reserved, &qp.q.ctr->sq_retired, bbs, 1ull << qp.q.sq_log_bb, qp.q.sys != 0,
                        timeout_ns, pos);
}

/// Publishes WQEBBs [pos, pos+bbs) in reservation order; `last` is the position of the
/// last WQE among them (what an mlx5 doorbell carries).
GV_HOST_DEVICE void sq_publish(const QpHandle& qp, unsigned long long pos, uint32_t bbs,
                               unsigned long long last = ~0ull) {
    publish_in_order(&qp.q.ctr->sq_ready, pos, pos + bbs, qp.q.sys != 0, &qp.q.ctr->sq_last,
                     last == ~0ull ? pos : last);
}

/// Reserves n receive WQEs; waits (up to timeout_ns) while the ring lacks room (receive
/// completions must be polled for entries to be freed). On Timeout nothing is reserved.
GV_HOST_DEVICE Status rq_reserve(const QpHandle& qp, uint32_t n, unsigned long long* pos, uint64_t timeout_ns) {
    return ring_reserve(&qp.q.ctr->rq_reserved, &qp.q.ctr->rq_retired, n, 1ull << qp.q.rq_log_cnt, qp.q.sys != 0,
                        timeout_ns, pos);
}

/// sq_reserve or rq_reserve.
template <bool kRecv>
GV_HOST_DEVICE Status ring_reserve_of(const QpHandle& qp, uint32_t n, unsigned long long* pos, uint64_t timeout_ns) {
    if constexpr (kRecv) return rq_reserve(qp, n, pos, timeout_ns);
    else return sq_reserve(qp, n, pos, timeout_ns);
}

/// A send- or receive-queue reservation made by one thread, jointly by the converged lanes of a warp
/// posting to the same QP, or by a whole block (one atomic and one publication for all).
struct Reservation {
    unsigned long long pos;   ///< this thread's first WQEBB (receive ring: its entry)
    unsigned long long base;  ///< the group's first WQEBB (entry)
    unsigned long long last;  ///< position of the group's last WQE
    uint32_t total;           ///< WQEBBs of the whole group (0: nothing to publish)
    uint32_t mask;            ///< lanes of the group (warp form), 0 otherwise
    uint32_t leader;          ///< lane that reserved and publishes (warp form)
    Status status;            ///< Ok, or why nothing was reserved (same for the group)
};

/// Reserves `bbs` entries of the send ring (WQEBBs) or, with kRecv, of the receive ring
/// (receive WQEs) for the calling thread (bbs may be 0: the thread takes part in a collective
/// reservation without posting).
///  - Thread / Warp scope: the converged lanes of a warp that reserve on the same QP at the
///    same time share one reservation (warp aggregation), ranks ordered by lane. Warp scope
///    additionally promises that every lane of the warp calls.
///  - Block scope: every thread of the block calls; thread 0 reserves for all, ranks ordered
///    by linear thread index.
/// Waits up to timeout_ns for room; on Timeout nothing is reserved, for any member.
template <Scope S = Scope::Thread, bool kRecv = false>
GV_HOST_DEVICE Status reserve_group(const QpHandle& qp, uint32_t bbs, Reservation* res, uint64_t timeout_ns) {
    if (qp.q.ctr == nullptr) {  // a default-constructed handle: uniform across any group
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
            blk_st = run ? int(ring_reserve_of<kRecv>(qp, run, &b, timeout_ns)) : int(Status::Ok);
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
        const uint32_t mask = __match_any_sync(__activemask(), reinterpret_cast<unsigned long long>(qp.q.ctr));
        auto grp = cg::labeled_partition(cg::coalesced_threads(), reinterpret_cast<unsigned long long>(qp.q.ctr));
        uint32_t excl = cg::exclusive_scan(grp, bbs);
        uint32_t total = cg::reduce(grp, bbs, cg::plus<uint32_t>());
        // The last WQE is the one of the highest-ranked member that posts one.
        uint32_t last_off = excl;
        uint32_t posting = bbs ? grp.thread_rank() : 0;
        uint32_t last_rank = cg::reduce(grp, posting, cg::greater<uint32_t>());
        last_off = grp.shfl(last_off, last_rank);
        unsigned long long base = 0;
        int st = int(Status::Ok);
        if (grp.thread_rank() == 0 && total) st = int(ring_reserve_of<kRecv>(qp, total, &base, timeout_ns));
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
    if (!qp.q.host_reachable) {  // GPU-memory queues: a CPU thread cannot touch them
        *res = Reservation{};
        res->status = Status::InvalidArgument;
        return res->status;
    }
    res->mask = 0;
    res->leader = 0;
    res->total = bbs;
    res->pos = 0;
    res->status = bbs ? ring_reserve_of<kRecv>(qp, bbs, &res->pos, timeout_ns) : Status::Ok;
    res->base = res->last = res->pos;
    return res->status;
#endif
}

/// reserve_group on the send ring: `bbs` WQEBBs.
template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status sq_reserve_group(const QpHandle& qp, uint32_t bbs, Reservation* res, uint64_t timeout_ns) {
    return reserve_group<S, false>(qp, bbs, res, timeout_ns);
}

/// The group leader's part of publication: after every earlier reservation, the group's
/// WQEBBs become the published prefix (release: the members' WQE stores, ordered before by
/// the group barrier, are visible to whoever acquires sq_ready).
GV_HOST_DEVICE void sq_publish_range(const QpHandle& qp, const Reservation& res) {
    if (res.total && res.status == Status::Ok) sq_publish(qp, res.base, res.total, res.last);
}

/// The group's publication of a reservation (send or receive ring): once every member wrote
/// its entries, the group's leader runs lead() (its release publishes them), and every member
/// returns after it. Collective like the reservation; a CPU thread is its own group.
template <Scope S, typename F>
GV_HOST_DEVICE void publish_group(const Reservation& res, F&& lead) {
#if GV_DEVICE_CODE
    if constexpr (S == Scope::Block) {
        // The block barrier orders every thread's stores before thread 0's release store
        // (release is cumulative over what thread 0 observed through the barrier).
        __syncthreads();
        if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) lead();
        __syncthreads();
    } else {
        // No group was formed (a default-constructed handle: reserve_group returned before it
        // matched lanes): nothing to publish, and a barrier over the empty mask 0 would be
        // undefined (the calling lane is not in it).
        if (res.mask == 0) return;
        // Same reasoning with the warp barrier.
        __syncwarp(res.mask);
        uint32_t lane;
        asm("mov.u32 %0, %%laneid;" : "=r"(lane));
        if (lane == res.leader) lead();
        __syncwarp(res.mask);
    }
#else
    (void)res;
    lead();
#endif
}

/// Publishes a reservation once every member wrote its WQE; returns when the WQEs are
/// published (so a commit by any member includes them). Collective like the reservation.
/// (On a CPU thread base is pos and last is pos: sq_publish_range publishes [pos, pos + total).)
template <Scope S = Scope::Thread>
GV_HOST_DEVICE void sq_publish_group(const QpHandle& qp, const Reservation& res) {
    publish_group<S>(res, [&] { sq_publish_range(qp, res); });
}

GV_HOST_DEVICE uint8_t fm_ce_se(uint32_t flags) {
    return uint8_t(((flags & kSignaled) ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
                   ((flags & kFence) ? MLX5_WQE_CTRL_FENCE : 0) |
                   ((flags & kSolicited) ? MLX5_WQE_CTRL_SOLICITED : 0));
}

}  // namespace dev
}  // namespace gv
