// The doorbell: commit (publish the doorbell record, ring the UAR or run the software device's
// executor) and drive. Part of gpuverbs/device/queue_pair_device.cuh.
#pragma once

#include "gpuverbs/detail/dispatch.cuh"
#include "gpuverbs/device/qp_weak.cuh"

namespace gv {
namespace dev {

// ---- doorbell ---------------------------------------------------------------------------

/// Moves the send doorbell record forward to `ready`, never backwards when committers
/// race (16-bit field compared modulo 2^16; rings hold at most 2^15 WQEBBs).
GV_HOST_DEVICE void sq_update_dbrec(const QpHandle& qp, unsigned long long ready) {
    mlx5::advance_dbrec(&qp.q.dbrec[MLX5_SND_DBR], uint32_t(ready), 16, qp.q.sys != 0);
}

/// Moves the send doorbell record forward to everything published so far (sq_ready, acquired:
/// the WQEs of every publisher up to there are released with the record). The record's value
/// is loaded (relaxed) before that acquire, so that the two loads overlap; the CAS that moves
/// the record checks the belief (a stale one costs a failed CAS, which returns the value to
/// retry with).
GV_HOST_DEVICE void sq_dbrec_to_published(const QpHandle& qp) {
    const bool sys = qp.q.sys != 0;
    uint32_t* const rec = &qp.q.dbrec[MLX5_SND_DBR];
    const uint32_t cur = atom::load_relaxed(rec, sys);
    const unsigned long long ready = atom::load_acquire(&qp.q.ctr->sq_ready, sys);
    mlx5::advance_dbrec_believing(rec, cur, uint32_t(ready), 16, sys);
}

/// Rings the doorbell for everything published so far. Scope says who calls: one thread,
/// all active lanes of the warp, or every thread of the block. What happens next depends on
/// the backend (detail/dispatch.cuh): on the software device the calling group executes the
/// QP's published WQEs (cooperatively, in order) unless another group is already doing so,
/// so call commit with the widest scope you have; on mlx5 the NIC's doorbell is rung; on
/// verbs the proxy thread picks the work up.
/// What commit guarantees is that published WQEs execute; on the software device they may
/// execute sooner: its executor reads how far the ring is published, so any drain of the QP
/// (another group's commit, a waiter's drive, the move to RTS or ERROR) takes them too. On
/// mlx5 and verbs only a moved doorbell record does, and any commit moves it over everything
/// published. Do not post a WQE before its source data is ready, on any backend.
/// Returns QpNotReady before RTS and QpError in ERROR (software device: work then completes
/// flushed), InvalidArgument for a default-constructed handle or, from a CPU thread, a QP
/// whose queues are GPU memory.
template <Scope S = Scope::Thread>
GV_HOST_DEVICE Status commit(const QpHandle& qp) {
    if (qp.q.ctr == nullptr) return Status::InvalidArgument;  // default-constructed handle
#if GV_DEVICE_CODE
    typename detail::ScopeGroup<S>::type g;
#else
    static_assert(S == Scope::Thread, "CPU threads commit at thread scope");
    if (!qp.q.host_reachable) return Status::InvalidArgument;  // GPU-memory queues
    detail::ThreadGroup g;
#endif
    // Every WQE the group published before the call is included.
    g.sync();
    const bool lead = g.leader();
    // The software device's executor reads how far the ring is published (sq_ready) where a NIC
    // reads the record, so its committers ring at once (detail::commit_moves_record). The ring's
    // RMW (acquire-release) comes after the group barrier, and so after the release of sq_ready
    // by whichever member published: whoever drains acquires both.
    if (lead && detail::commit_moves_record(qp)) sq_dbrec_to_published(qp);
    return detail::ring_send<S>(qp, g, lead);
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
    detail::WarpGroup wg;
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
            atom::store_relaxed(&qp.q.ctr->sq_reserved, p.pos + n, qp.q.sys != 0);
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

}  // namespace dev
}  // namespace gv
