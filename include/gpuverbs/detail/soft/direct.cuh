// The software device's direct path: one thread posts one small RDMA WRITE or READ and commits
// it in the same call (the kCommit flag), and executes it itself while it holds the QP.
// Reached from the strong-form posts (gpuverbs/device/qp_post.cuh) on the software device only.
//
// Why. Posted and committed in two calls, a lone 8-byte WRITE crosses a chain of dependent
// device-memory operations, each waiting for the one before: the reservation's RMW, the
// publication's wait and release, the lock's RMW, the drain's two rounds of loads (the QP, its
// peer, the WQE read back from the ring, its regions), the copy (H200, `gv_probe_path`, session
// 15: 0.85 + 0.58 + 0.58 + 1.03 + 0.42 us before the bytes land). A poster that knows it is
// about to commit needs none of that in series: the WQE is in its registers, its keys are its
// arguments, and the lock can be taken beside the reservation. So, in three rounds:
//   A. the QP's configuration (the host wrote it before the QP could send; it does not change
//      while the QP sends) and guesses (the peer, the state), relaxed loads, then the position
//      (a relaxed fetch-add) and the lock (an acquire-only RMW, which does not wait for the
//      loads and the fetch-add issued before it): all in flight together;
//   B. after the lock's acquire, what the last holder left: sq_ci, the state, the peer and its
//      fields, the two regions' entries, and the retirement point (acquire, last: its slot's
//      old WQE was read by its pollers before we overwrite it);
//   C. the copy (fast_run's, with the regions already in its caches).
// The WQE executes here only when nothing can come before it: the lock was free, sq_ci is our
// position (every earlier WQE was executed, so every earlier reservation published: sq_ready is
// our position too), the ring has room, and fast_run accepts it (the checks prepare() would
// make pass). Its bytes still go into the ring, byte for byte, before it is published: the
// pollers read its ctrl word when they retire it, and the tests read the ring.
//
// Everything else takes the ordinary way, the same effects as a post and a commit: a group
// that found the lock free but may not execute here drains what is published and gives the QP
// back (nothing of ours is published yet, so nothing it waits for can be ours), then the post
// waits for room, stores its WQE, publishes it in order and rings (soft::ring_send). The ring
// counted by the lock's RMW here came before our publication, so a holder may miss our WQE on
// its account; the ring after publication is the one that counts, as in every commit. A WQE
// fast_run does not take (an error to report, another shape) is published and drained by the
// holder: prepare() decides it as always, errors included.
#pragma once

#include "gpuverbs/detail/soft/doorbell.cuh"
#include "gpuverbs/device/qp_ring.cuh"

namespace gv::detail::soft {

/// Whether the direct path's lock RMW is a system-scope one (1, the default) or a device-scope
/// one (0: for measuring what system scope costs; wrong for a QP whose peer is on another GPU,
/// whose executors there update the lock with system-scope RMWs). System scope is atomic with
/// both: with the device-scope RMWs of this GPU's threads (their scope includes us) and with the
/// other GPU's. Which scope the QP needs is a load (QpContext::xgpu), which the lock's RMW would
/// otherwise have to wait for.
#ifndef GV_DIRECT_LOCK_SYS
#define GV_DIRECT_LOCK_SYS 1
#endif

/// The WQE's first three units as fast_run reads them from the ring.
GV_HOST_DEVICE FastWqe fast_units(const mlx5::Unit* u) {
    FastWqe f;
    for (int i = 0; i < 3; ++i) {
        f.u[i].a = uint64_t(u[i].w[0]) | (uint64_t(u[i].w[1]) << 32);
        f.u[i].b = uint64_t(u[i].w[2]) | (uint64_t(u[i].w[3]) << 32);
    }
    return f;
}

/// Posts one single-WQEBB WRITE or READ of one data segment (lkey) to the peer's rkey and
/// commits it, at thread scope, on a software device whose executor this thread may run (not a
/// CPU thread on a GPU device). build(pos) returns the WQEBB's four units (mlx5::Unit[4] in a
/// struct with member u) for position pos. Returns what a post and a commit would: Ok, QpError
/// in ERROR (the WQE completes flushed), QpNotReady before RTS (it waits for RTS, published).
/// Waits for room without a timeout (the callers pass kWaitForever only).
template <typename Build>
GV_HOST_DEVICE Status post_direct(const dev::QpHandle& qp, const Build& build, uint32_t lkey, uint32_t rkey) {
    QpContext* const q = qp.soft.ctx;
    dev::QpCounters* const ctr = qp.q.ctr;
    const bool qsys = qp.q.sys != 0;
    const unsigned long long ring = 1ull << qp.q.sq_log_bb;

    // Round A: the configuration and the guesses (relaxed; nothing orders them, nothing needs to).
    LeaderCache lc;
    QpConfig& c = lc.cfg;
    c.qpn = q->qpn;
    c.pd = q->pd;
    c.sq_log_bb = q->sq_log_bb;
    c.max_inline = q->max_inline;
    c.sys = q->sys;
    c.sq = q->sq;
    c.scq = q->scq;
    c.local_mrs = q->local_mrs;
    c.remote_mrs = q->remote_mrs;
    const uint32_t xgpu = atom::load_relaxed(&q->xgpu);
    const Published pub = Published::of(q);
    QpContext* const r_guess = q->remote;
    const QpState s_guess = load_state_relaxed(q);
    // The position: relaxed, as ring_reserve's (the retirement point's acquire below orders the
    // slot's last reads before our stores). Then the lock, acquire only: the loads and the
    // fetch-add above stay in flight beside it.
    const unsigned long long pos = atom::fetch_add_relaxed(&ctr->sq_reserved, 1ull, qsys);
    const bool got = atom::fetch_add_acquire(&q->lock, 1u, GV_DIRECT_LOCK_SYS != 0) == 0u;

    // Round B, after the acquire: what the previous holder left, read as load_batch reads it.
    // sq_ci <= pos whatever we see (our WQE is not published, so no executor has passed it), so a
    // value equal to pos is the value; a stale one only sends us the ordinary way.
    lc.ci = q->sq_ci;
    const bool xsys = xgpu != 0;  // the peer's executor on another GPU writes these
    lc.state = load_state_relaxed(q, xsys);
    QpContext* const remote = q->remote;
    // The guessed peer's fields, only when the guessed state lets WQEs reach it (a peer process
    // that died is not read: our QP is in ERROR then), as load_batch.
    const QpContext* const pg = sends_allowed(s_guess) ? r_guess : nullptr;
    const QpContext* back = nullptr;
    QpState rs = QpState::Reset;
    uint32_t access = 0, ppd = 0;
    if (pg) {
        back = pg->remote;
        rs = load_state_relaxed(pg, xsys);
        access = pg->access;
        ppd = pg->pd;
    }
    mr_fill(c.local_mrs, lc.local, lkey, c.pd, false);
    if (pg) mr_fill(c.remote_mrs, lc.remote, rkey, ppd, remote_foreign(c));
    const unsigned long long retired = atom::load_acquire(&ctr->sq_retired, qsys);

    const uint32_t sc = xsys ? kScopePeer : kScopeGpu;
    lc.scope = sc;
    lc.r = sends_allowed(lc.state) ? remote : nullptr;
    lc.peer_up = lc.r != nullptr && lc.r == pg && back == q && receives_allowed(rs);
    if (lc.peer_up) {
        c.peer_access = access;
        c.peer_pd = ppd;
    }
    const auto b = build(pos);
    const bool room = pos + 1 - retired <= ring;
    if (got && lc.ci == pos && room && !xsys && lc.peer_up) {
        for (uint32_t k = 0; k < 4; ++k) mlx5::store_unit(mlx5::wqe_seg(qp.q.sq, qp.q.sq_log_bb, pos, k), b.u[k]);
        const FastWqe first = fast_units(b.u);
        lc.pending = 1;
        // The copy, its fence, the requester's CQE when signaled, sq_ci (fast_run: RC ordering
        // as in any drain; the WQE's bytes stored above precede the fence, so a poller that
        // acquires the CQE finds them).
        fast_run(q, lc, &first);
        const bool ran = lc.ci != pos;
        // Published in order (sq_ready was pos: see above), after the execution: whoever acquires
        // sq_ready sees the WQE's bytes, and sq_ci past it (the lock's release does that too).
        atom::store_relaxed(&ctr->sq_last, pos, qsys);
        atom::store_release(&ctr->sq_ready, pos + 1, qsys);
        if (ran) keep_hints(q, lc);
        // Give the QP back (or drain what was rung meanwhile); not run here: drained as ever.
        hold(q, ThreadGroup{}, pub, sc, ran);
        const QpState s = ran ? lc.state : load_state(q, xsys);
        if (s == QpState::Error) return Status::QpError;
        return sends_allowed(s) ? Status::Ok : Status::QpNotReady;
    }
    // The ordinary way. Holding the QP, drain what is published (none of it ours) and give it
    // back before anything waits: the room we wait for may need those WQEs executed and polled,
    // and earlier reservers whose publication we wait for may be waiting for room.
    if (got) hold(q, ThreadGroup{}, pub, sc);
    uint32_t spins = 0;
    if (!room)
        while (pos + 1 - atom::load_acquire(&ctr->sq_retired, qsys) > ring) dev::spin_pause(spins);
    for (uint32_t k = 0; k < 4; ++k) mlx5::store_unit(mlx5::wqe_seg(qp.q.sq, qp.q.sq_log_bb, pos, k), b.u[k]);
    dev::sq_publish(qp, pos, 1);
    return ring_send(qp, ThreadGroup{});
}

}  // namespace gv::detail::soft
