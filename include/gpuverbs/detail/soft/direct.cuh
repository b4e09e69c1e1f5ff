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
//   A. the position (a relaxed fetch-add) and the lock (a relaxed RMW), then the QP's
//      configuration (the host wrote it before the QP could send; it does not change while the
//      QP sends), guesses (the peer, the state) and the local region's entry, relaxed loads, all
//      in flight together, then an acquire fence that waits for all of them;
//   B. after the lock's acquire, what the last holder left: sq_ci, the state, the peer and its
//      fields, the remote region's entry (and the local one, when round A could not load it),
//      the source words of a WRITE of at most 32 bytes that round A's entry lets it read, and
//      the retirement point (acquire, last: its slot's old WQE was read by its pollers before we
//      overwrite it);
//   C. fast_run's checks of the WQE made here without a branch (FastFirst), the WQE stored to
//      the ring and published, then the copy (for a small WRITE, only the stores of the words
//      round B loaded) and one release fence (fast_run's), and the lock given back by a CAS that
//      the fence makes a release.
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

/// How post_direct is compiled: inline (1, the default), or out of line (0; a call, and one copy
/// per translation unit). Measured on the H200 (2026-12-04) inline; its slow ways are out of line
/// either way (below).
#ifndef GV_DIRECT_INLINE
#define GV_DIRECT_INLINE 1
#endif
#if GV_DIRECT_INLINE
#define GV_DIRECT_FN GV_HOST_DEVICE
#else
#define GV_DIRECT_FN GV_HOST_DEVICE_NOINLINE
#endif

/// The direct path's lock RMW (+1), relaxed, at the scope GV_DIRECT_LOCK_SYS names.
GV_HOST_DEVICE uint32_t lock_add_relaxed(uint32_t* lock) {
#if GV_DEVICE_CODE
    if (GV_DIRECT_LOCK_SYS) return atom::sys_ref<uint32_t>(*lock).fetch_add(1u, ::cuda::memory_order_relaxed);
    return atom::gpu_ref<uint32_t>(*lock).fetch_add(1u, ::cuda::memory_order_relaxed);
#else
    return __atomic_fetch_add(lock, 1u, __ATOMIC_RELAXED);
#endif
}

/// The WQE's first three units as fast_run reads them from the ring.
GV_HOST_DEVICE FastWqe fast_units(const mlx5::Unit* u) {
    FastWqe f;
    for (int i = 0; i < 3; ++i) {
        f.u[i].a = uint64_t(u[i].w[0]) | (uint64_t(u[i].w[1]) << 32);
        f.u[i].b = uint64_t(u[i].w[2]) | (uint64_t(u[i].w[3]) << 32);
    }
    return f;
}

/// What the direct path's slow ways need (plain values: they are out-of-line functions).
struct DirectSlow {
    QpContext* q;
    dev::QpCounters* ctr;
    uint8_t* sq;  ///< the posters' pointer to the send ring
    unsigned long long pos;
    unsigned long long ring;
    Published pub;
    uint32_t sq_log_bb;
    uint32_t sc;  ///< the QP's scope (state_scope)
    bool qsys;    ///< the queues' system scope (QpQueues::sys)
};

/// The status a commit returns for the QP's state now (soft::ring_send's).
GV_HOST_DEVICE Status status_of(QpState s) {
    if (s == QpState::Error) return Status::QpError;
    return sends_allowed(s) ? Status::Ok : Status::QpNotReady;
}

// The slow ways are out of line (GV_HOST_DEVICE_NOINLINE: one copy per translation unit), as is
// the commit of a post whose kCommit takes the ordinary way (dev::commit_outlined): each holds a
// whole drain, and inlined at every thread-scope post that takes run-time flags (whether or not
// they ever carry kCommit) they put drains into the caller's kernel by the dozen. Found on the
// H200's build (2026-12-04): the traffic suite's script kernel spilled (212 -> 255 registers),
// its translation unit compiled 4.6 times longer (1.5 -> 6.9 min on the development machine;
// 1.7 min with these out of line), the README's build took 405-443 s (about 200 in session 14).
// The direct path itself is inline (GV_DIRECT_INLINE), as measured.

/// The ordinary way, after the direct path found it may not execute: the QP held (got) is
/// drained and given back first, then the WQE b is stored once its slot is free, published in
/// order and rung for (progress(), whose acquire-release add releases the publication).
GV_HOST_DEVICE_NOINLINE Status direct_ordinary(DirectSlow d, bool got, bool room, mlx5::Unit u0, mlx5::Unit u1,
                                               mlx5::Unit u2, mlx5::Unit u3) {
    if (got) hold(d.q, ThreadGroup{}, d.pub, d.sc);
    uint32_t spins = 0;
    if (!room)
        while (d.pos + 1 - atom::load_acquire(&d.ctr->sq_retired, d.qsys) > d.ring) dev::spin_pause(spins);
    const mlx5::Unit u[4] = {u0, u1, u2, u3};
    for (uint32_t k = 0; k < 4; ++k) mlx5::store_unit(mlx5::wqe_seg(d.sq, d.sq_log_bb, d.pos, k), u[k]);
    dev::publish_in_order(&d.ctr->sq_ready, d.pos, d.pos + 1, d.qsys, &d.ctr->sq_last, d.pos);
    progress(d.q, ThreadGroup{});
    return status_of(load_state(d.q, d.sc != kScopeGpu));
}

/// The direct path's holder after its WQE was published: drains (ran false: the WQE was not
/// executed, so the drain decides it) or drains what was rung meanwhile, and gives the QP back.
GV_HOST_DEVICE_NOINLINE Status direct_drain(DirectSlow d, bool ran) {
    hold(d.q, ThreadGroup{}, d.pub, d.sc, ran);
    return status_of(load_state(d.q, d.sc != kScopeGpu));
}

/// Posts one single-WQEBB WRITE or READ of one data segment (lkey) to the peer's rkey and
/// commits it, at thread scope, on a software device whose executor this thread may run (not a
/// CPU thread on a GPU device): q the QP's context, ctr, sq, sq_log_bb and qsys its queues
/// (dev::QpQueues), u0..u3 the WQEBB built for position 0 (its ctrl segment's WQE index is set
/// here, once the position is known). Returns what a post and a commit would: Ok, QpError in
/// ERROR (the WQE completes flushed), QpNotReady before RTS (it waits for RTS, published).
/// Waits for room without a timeout (the callers pass kWaitForever only).
GV_DIRECT_FN Status post_direct(QpContext* q, dev::QpCounters* ctr, uint8_t* sq, uint32_t sq_log_bb,
                                           bool qsys, mlx5::Unit u0, mlx5::Unit u1, mlx5::Unit u2, mlx5::Unit u3,
                                           uint32_t lkey, uint32_t rkey, const MrEntry* mrs = nullptr,
                                           uint32_t mr_cap = 0) {
    const unsigned long long ring = 1ull << sq_log_bb;
    GV_EXEC_STAMP(kStampEnter);

    // Round A. First the position and the lock, both relaxed RMWs, issued before anything else
    // so that no instruction the compiler places after a load of this round can hold them back:
    // the position as ring_reserve's (the retirement point's acquire below orders the slot's last
    // reads before our stores), a `.global` atom (atom::g64_*: in its generic form ptxas branched
    // on a shared-memory test between the two RMWs, and the lock's RMW was issued only once the
    // position's had come back, H100, session 33). Then the configuration and the guesses
    // (relaxed; nothing orders them, nothing needs to) and the local region's entry, from the
    // device's table as the handle names it (fixed for the device's life: no load of the context
    // first). Then an acquire fence: with the lock's relaxed RMW, an acquire pattern; it waits
    // for every load and RMW of the round, which are in flight together.
    const unsigned long long pos = atom::fetch_add_relaxed(&ctr->sq_reserved, 1ull, qsys);
    const uint32_t lock_old = lock_add_relaxed(&q->lock);
    const MrRaw l_pre = mr_load_if(MrTable{const_cast<MrEntry*>(mrs), mr_cap, 0u}, lkey, mrs != nullptr);
    LeaderCache lc;
    QpConfig& c = lc.cfg;
    load_config(q, c);
    const uint32_t xgpu = atom::load_relaxed(&q->xgpu);
    const Published pub = Published::of(q);
    QpContext* const r_guess = q->remote;
    const QpState s_guess = load_state_relaxed(q);
    atom::fence_acquire(GV_DIRECT_LOCK_SYS != 0);
    const bool got = lock_old == 0u;
    // gv_probe_path's stamps (nothing in any other build): each after a branch on the values it
    // waits for, so that the interval ending there holds the wait.
    if (got) GV_EXEC_STAMP(kStampLocked);

    // Round B, after the acquire: what the previous holder left, read as load_batch reads it.
    // sq_ci <= pos whatever we see (our WQE is not published, so no executor has passed it), so a
    // value equal to pos is the value; a stale one only sends us the ordinary way.
    lc.ci = q->sq_ci;
    const bool xsys = xgpu != 0;  // the peer's executor on another GPU writes these
    lc.state = load_state_relaxed(q, xsys);
    QpContext* const remote = q->remote;
    // The guessed peer's fields, only when the guessed state lets WQEs reach it (a peer process
    // that died is not read: our QP is in ERROR then), as load_batch. Without a branch: our own
    // context stands in for a peer not guessed (read, not used), the regions' entries are loaded
    // by predicated loads (mr_load_if), and their checks are written after the retirement
    // point's load. Measured (H100, session 32, with the one-fence give-back): the loopback
    // latency 7% lower (`gv_write_lat -s 8` 2.016 -> 1.872 us, 64 B 2.208 -> 2.048). In the
    // latency kernel's SASS every load of this round is issued before any of its values is waited
    // for (session 33); gv_probe_path's kernel, with its stamps, still checks the local entry
    // before the peer's loads, which is why its round B did not shrink.
    const QpContext* const pg = sends_allowed(s_guess) ? r_guess : nullptr;
    const PeerFields pf_any = load_peer(pg ? pg : q, xsys);
    // The local entry loaded in round A when the handle named the QP's own table (a handle of
    // this library always does), else here.
    const bool l_same = mrs != nullptr && mrs == c.local_mrs.entries;
    const MrRaw l_late = mr_load_if(c.local_mrs, lkey, !l_same);
    const MrRaw r_raw = mr_load_if(c.remote_mrs, rkey, pg != nullptr);
    // The source of a WRITE of at most kFastChunk bytes (8-byte aligned) that the local region
    // allows, loaded now rather than once the WQE is known to execute here: fast_run then only
    // stores these words (one memory latency less before the bytes land). After the lock's
    // acquire, as the copy's own load would be: an earlier WQE's READ into this source, executed
    // by an earlier holder, has landed. Checked on round A's entry only (so that nothing here
    // waits for round B's loads); nothing is loaded from an address the region does not cover.
    // The WQE's opcode and data segment, from its registers (the preload and FastFirst read them).
    const uint32_t op = mlx5::from_be32(u0.w[0]) & 0xffu;
    const mlx5::DataFields d = mlx5::read_data_seg(reinterpret_cast<const mlx5_wqe_data_seg*>(&u2));
    const uint64_t len = d.byte_count;
    Preloaded pre;
    {
        // mr_take's and mr_check's tests on round A's entry, without a branch (a branch here
        // split the round: ptxas moved these tests above the acquire fence, and the loads it
        // placed after the branch were issued a memory latency late).
        const bool shape = l_same & (op == MLX5_OPCODE_RDMA_WRITE) &
                           ((len & MLX5_INLINE_SEG) == 0) & (len != 0) & (len <= kFastChunk) & (((d.addr | len) & 7) == 0);
        const bool region = l_pre.found & (l_pre.valid != 0) & (l_pre.key == lkey) & (l_pre.pd == c.pd) &
                            (d.addr >= l_pre.addr) & (len <= l_pre.length) & (d.addr - l_pre.addr <= l_pre.length - len);
        const uint64_t lp = uint64_t(int64_t(d.addr) + l_pre.xlate);
        const bool ok = shape & region & (lp != 0) & ((lp & 7) == 0);
        pre.lp = ok ? lp : 0;
        pre.n = ok ? uint32_t(len / 8) : 0;
        load_words_if(pre.v, pre.lp, pre.n);
    }
    const unsigned long long retired = atom::load_acquire(&ctr->sq_retired, qsys);
    const PeerFields pf = pg ? pf_any : PeerFields{};
    mr_take(mr_select(l_same, l_pre, l_late), c.local_mrs, lc.local, lkey, c.pd, false);
    if (pg) mr_take(r_raw, c.remote_mrs, lc.remote, rkey, pf.pd, remote_foreign(c));

    const uint32_t sc = xsys ? kScopePeer : kScopeGpu;
    lc.scope = sc;
    lc.r = sends_allowed(lc.state) ? remote : nullptr;
    lc.peer_up = lc.r != nullptr && lc.r == pg && pf.back == q && receives_allowed(pf.state);
    if (lc.peer_up) {
        c.peer_access = pf.access;
        c.peer_pd = pf.pd;
    }
    // fast_run's checks of this WQE, made here from its fields and the regions' entries at hand,
    // without a branch: fast_run then goes from its first instruction to the copy (the decoding
    // and the branching checks of a drain's first WQE, gv_probe_path's "decode", "regions" and
    // "checks, bounds", stood between round B and the copy). The WQE index is the position's
    // (set below); everything else fast_run would test is tested.
    FastFirst plan;
    {
        const uint32_t w1 = mlx5::from_be32(u0.w[1]);
        const bool is_read = op == MLX5_OPCODE_RDMA_READ;
        const mlx5::RaddrFields ra = mlx5::read_raddr_seg(reinterpret_cast<const mlx5_wqe_raddr_seg*>(&u1));
        const uint32_t need = is_read ? kRemoteRead : kRemoteWrite;
        const uint64_t lp = mr_check(lc.local, d.addr, len, is_read ? kLocalWrite : 0u, nullptr);
        const uint64_t rp = mr_check(lc.remote, ra.raddr, len, need, nullptr);
        // The scope fast_run's checks collect: the written region's (through a pointer here,
        // the variable went to local memory).
        const uint32_t sys = sc | (is_read ? lc.local.sys : lc.remote.sys);
        plan.ok = (is_read | (op == MLX5_OPCODE_RDMA_WRITE)) & ((w1 & 0x3fu) == 3) & ((w1 >> 8) == c.qpn) &
                  ((len & MLX5_INLINE_SEG) == 0) & (len != 0) & (len <= kFastBytes) & lc.peer_up &
                  ((c.peer_access & need) != 0) & (lp != 0) & (rp != 0) &
                  ((len <= kFastChunk) | !fast_overlap(lp, rp, len));
        plan.is_read = is_read;
        plan.sys = sys;
        plan.len = len;
        plan.lp = lp;
        plan.rp = rp;
    }
    // The ctrl segment's WQE index (bits 8..23 of its first big-endian word) is the position's.
    u0.w[0] = mlx5::to_be32((mlx5::from_be32(u0.w[0]) & 0xff0000ffu) | (uint32_t(uint16_t(pos)) << 8));
    const mlx5::Unit b[4] = {u0, u1, u2, u3};
    const bool room = pos + 1 - retired <= ring;
    const DirectSlow slow{q, ctr, sq, pos, ring, pub, sq_log_bb, sc, qsys};
    // The ordinary way. Holding the QP, it drains what is published (none of it ours) and gives
    // it back before anything waits: the room we wait for may need those WQEs executed and
    // polled, and earlier reservers whose publication we wait for may be waiting for room.
    if (!(got && lc.ci == pos && room && !xsys && lc.peer_up))
        return direct_ordinary(slow, got, room, u0, u1, u2, u3);
    GV_EXEC_STAMP(kStampPublished);

    for (uint32_t k = 0; k < 4; ++k) mlx5::store_unit(mlx5::wqe_seg(sq, sq_log_bb, pos, k), b[k]);
    const FastWqe first = fast_units(b);
    lc.pending = 1;
    // Published in order (sq_ready was pos: see above), and where the queues' counters are device
    // memory, before the execution (relaxed): then fast_run's release fence after the copy orders
    // everything stored here (the WQE's bytes, the hints, sq_last and sq_ready, the bytes copied,
    // sq_ci) before the CAS that gives the QP back, and that CAS needs no fence of its own. Two
    // fences and a release store fewer than publishing after the execution with a release store
    // and giving the QP back with an acquire-release CAS (each fence waits for the stores before
    // it: 1.0 us from the copy's fence to the lock's release, H100, session 31).
    // Why sq_ready may be seen before the bytes are copied: sq_ready says the WQE is in the ring,
    // not that it executed, and the only agents that act on it are the lock holder (we hold the
    // lock; the next holder acquires it after the CAS, which the fence orders after all of this)
    // and posters waiting for their turn to publish (publish_in_order), which read nothing of
    // ours. A completion, the one thing a user may poll, is written after the fence.
    const bool early = !qsys;
    if (early) {
        keep_hints(q, lc);
        atom::store_relaxed(&ctr->sq_last, pos);
        atom::store_relaxed(&ctr->sq_ready, pos + 1);
    }
    // The copy, sq_ci, the fence, the requester's CQE when signaled (fast_run: RC ordering as in
    // any drain; the WQE's bytes stored above precede the fence, so a poller that acquires the
    // CQE finds them).
    fast_run(q, lc, &first, pre, plan);
    const bool ran = lc.ci != pos;
    if (!early) {
        // Queues in host memory: published after the execution, with a release store (a CPU
        // thread may read these counters).
        atom::store_relaxed(&ctr->sq_last, pos, qsys);
        atom::store_release(&ctr->sq_ready, pos + 1, qsys);
        if (ran) keep_hints(q, lc);
    }
    if (ran) {
        // Give the QP back: a CAS from 1 to 0 (hold()'s), unless rings came meanwhile. Relaxed
        // when fast_run's fence came last (published early, the WQE unsignaled, no move to
        // ERROR): that fence and the CAS are a release. Otherwise acquire-release, as hold()'s.
        // A CAS that fails (rings came) leaves the QP held: direct_drain's hold() gives it back
        // with its own acquire-release RMWs, and reads what was published with acquire.
        uint32_t expect = 1;
        const bool fenced = early && !(first.u[0].b & kFastSignalBit) && sends_allowed(lc.state);
        if (fenced ? atom::cas_relaxed(&q->lock, expect, 0u) : rmw_cas(&q->lock, expect, 0u, sc)) {
            GV_EXEC_STAMP(kStampUnlocked);
            return status_of(lc.state);
        }
    }
    // Not run here (the drain decides it, errors included), or rings came: drained as ever.
    return direct_drain(slow, ran);
}

}  // namespace gv::detail::soft
