// A drain's batch: what the executing group's leader reads of the QP, its peer and the
// doorbell record once per drain (load_batch), the guesses it keeps for the next drain
// (keep_hints), and the first checks of each WQE at sq_ci (next_published, outcome_of,
// check_header). Part of the software device's executor (gpuverbs/detail/soft/exec.cuh).
#pragma once

#include "gpuverbs/detail/soft/mr_check.cuh"
#include "gpuverbs/detail/soft/fast.cuh"
#include "gpuverbs/mlx5/wqe_reader.cuh"

namespace gv::detail::soft {

/// Where a drain learns how far the send ring is published: QpContext::sq_ready and the QP's
/// scope (progress() reads them before it takes the lock, so that the acquire below does not
/// wait for those loads).
struct Published {
    const unsigned long long* at;  ///< QpContext::sq_ready
    bool sys;                      ///< system scope (QpContext::sys)

    GV_HOST_DEVICE static Published of(const QpContext* q, bool sys) { return {q->sq_ready, sys}; }
    GV_HOST_DEVICE static Published of(const QpContext* q) { return of(q, q->sys != 0); }
    /// The published WQEBB count's low 16 bits, as a doorbell record holds it (acquire: the WQE
    /// bytes published up to there are visible after it).
    GV_HOST_DEVICE uint32_t read() const { return uint32_t(atom::load_acquire(at, sys)) & 0xffff; }
};

/// The QP's configuration (QpConfig: what the host wrote before the QP could send), loaded
/// at once; the peer's part is filled where the peer is known to be up.
GV_HOST_DEVICE void load_config(const QpContext* q, QpConfig& c) {
    c.qpn = q->qpn;
    c.pd = q->pd;
    c.sq_log_bb = q->sq_log_bb;
    c.max_inline = q->max_inline;
    c.sys = q->sys;
    c.sq = q->sq;
    c.scq = q->scq;
    c.local_mrs = q->local_mrs;
    c.remote_mrs = q->remote_mrs;
}

/// What the executor checks of the peer QP p: its own peer (connected back to us?), its state,
/// the access it allows and its protection domain. Relaxed loads, issued together.
struct PeerFields {
    const QpContext* back = nullptr;
    QpState state = QpState::Reset;
    uint32_t access = 0;
    uint32_t pd = 0;
};
GV_HOST_DEVICE PeerFields load_peer(const QpContext* p, bool sys) {
    PeerFields f;
    f.back = p->remote;
    f.state = load_state_relaxed(p, sys);
    f.access = p->access;
    f.pd = p->pd;
    return f;
}

/// What the leader reads of the QP and its peer once per drain (the doorbell record, the QP's
/// state and configuration, the peer's). Work published later is rung for, and progress()
/// drains again for it (exec.cuh).
///
/// Each dependent step here is a device-memory latency (0.15 to 0.3 us on the H200) that every
/// drain waits for, a lone WQE's included, so the loads go in two rounds, each issued whole
/// before anything waits for its values:
///   1. the configuration, sq_ci and how far the ring is published (acquire; its address and
///      scope read before the lock by progress(): Published), and guesses for round 2: the
///      peer pointer, the QP's state, and the keys of the regions the last drain used
///      (QpContext::hint_lkey / hint_rkey);
///   2. after the acquire (what the committer published, and the QP state it saw, are visible):
///      the QP's state and peer again (the values that count), the guessed peer's fields, the
///      guessed keys' region entries and, with `first` (thread groups), the first WQE's units.
/// A guess that turns out wrong costs what it saved: a peer other than the guessed one is read
/// in a round of its own, as before; a WQE naming other keys looks them up itself (fast_run,
/// prepare()). Guesses are never trusted: the peer's fields are read again through the pointer
/// loaded after the acquire when it differs, and a region entry loaded by guess is checked like
/// any other (mr_fill, mr_check), after the acquire, as before. A peer is not read unless the
/// guessed state lets WQEs reach it: in ERROR every WQE flushes without the peer, and a peer
/// process that died is not read.
/// Before (2026-12-03), the rounds were five for a lone 8-byte WRITE: the record, the state, the
/// peer, the WQE, its regions (`gv_probe_path`: 1.8 us from the lock to the regions checked).
/// Loading the first WQE's units in round 2 is done for thread groups only: it took
/// gv_write_bw's kernel (block groups of 512 threads) from 128 to 168 registers (ptxas), past
/// what a 512-thread block may use. A prefetch of its line into L1 there (no register) was tried
/// and removed: nothing orders a prefetch after the record's acquire (it is a hint, outside the
/// memory model, which the compiler may move above the branch on the acquired value), so it
/// could fill L1 with WQE bytes older than the record, and the drain would read them.
GV_HOST_DEVICE void load_batch(QpContext* q, LeaderCache& lc, const Published& pub, FastWqe* first = nullptr) {
    lc.batches = 1;
    lc.ci = q->sq_ci;
    lc.scope = state_scope(q);
    QpConfig& c = lc.cfg;
    load_config(q, c);
    // The guesses (lock holders write the hints; the lock's acquire ordered their stores
    // before these loads). The state with a device-scope load whatever the QP's scope: which
    // scope to use is itself a load of this round, and a guess needs no ordering.
    QpContext* const r_guess = q->remote;
    const QpState s_guess = load_state_relaxed(q);
    const uint32_t hl = q->hint_lkey, hr = q->hint_rkey;
    // Acquire: the WQE bytes published up to there are visible from here on, and so is the
    // state of the QP that the publisher saw when it published. A group that staged the WQEs
    // has read it already, the same way.
    // Its address and scope (QpContext::sys) were read before the lock: with them loaded here,
    // the acquire would wait for those loads, a round of its own.
    const uint32_t pi = lc.stage_n ? lc.staged_pi : pub.read();
    // The record holds the producer index's low 16 bits; rings are at most 2^15 WQEBBs, so
    // the difference modulo 2^16 is the published count.
    lc.pending = (pi - uint32_t(lc.ci)) & 0xffff;
    if (lc.pending == 0) return;
    const bool sys = lc.scope != kScopeGpu;  // the peer's executor on another GPU writes these
    lc.state = load_state_relaxed(q, sys);
    QpContext* const remote = q->remote;
    if (first) *first = fast_ring(lc).load(lc.ci);
    // The guessed peer's fields, at once; whether they count is decided after.
    const QpContext* const pg = sends_allowed(s_guess) ? r_guess : nullptr;
    PeerFields pf;
    if (pg) pf = load_peer(pg, sys);
    if (hl) mr_fill(c.local_mrs, lc.local, hl, c.pd, false);
    if (pg && hr) mr_fill(c.remote_mrs, lc.remote, hr, pf.pd, remote_foreign(c));
    // In ERROR every WQE flushes without the peer: a peer process that died is not read.
    lc.r = sends_allowed(lc.state) ? remote : nullptr;
    lc.peer_up = false;
    if (lc.r) {
        if (lc.r != pg) {
            // Guessed wrong (the QP was just connected, or its state seen late): the peer's
            // fields in a round of their own, and no region entry of the peer by guess.
            lc.remote = MrCache{};
            pf = load_peer(lc.r, sys);
        }
        lc.peer_up = pf.back == q && receives_allowed(pf.state);
        if (lc.peer_up) {
            c.peer_access = pf.access;
            c.peer_pd = pf.pd;
        }
    }
}

/// The regions this drain's WQEs named last, as the next drain's guesses (load_batch). The
/// leader, holding the lock, when the drain ends.
GV_HOST_DEVICE void keep_hints(QpContext* q, const LeaderCache& lc) {
    if (lc.local.tab) q->hint_lkey = lc.local.key;
    if (lc.remote.tab) q->hint_rkey = lc.remote.key;
}

/// True when a published WQE waits at lc.ci (load_batch read the record for this drain) and
/// the QP's state lets it execute (or flush).
GV_HOST_DEVICE bool next_published(LeaderCache& lc) {
    if (lc.pending == 0) return false;
    if (!sends_allowed(lc.state) && !in_error(lc.state)) {
        lc.pending = 0;
        return false;
    }
    return true;
}

/// What finish() needs of the WQE, before anything is executed.
GV_HOST_DEVICE Outcome outcome_of(const mlx5::WqeReader& w, unsigned long long ci) {
    Outcome o{};
    o.opcode = w.opcode();
    o.wqe_index = uint16_t(ci);
    o.signaled = w.signaled() ? 1 : 0;
    o.bbs = w.bbs();
    o.imm_be = w.ctrl().imm_be;
    return o;
}

/// The first checks of the WQE at lc.ci: its size against what is published, then (a QP in
/// ERROR flushes every WQE, well-formed or not) its ctrl segment. Returns the requester's
/// syndrome, or 0.
GV_HOST_DEVICE uint8_t check_header(QpContext* q, const LeaderCache& lc, const mlx5::WqeReader& w, Outcome& o) {
    if (!w.fits(lc.pending)) {
        o.bbs = 1;  // its size is not to be trusted: sq_ci passes the ctrl's WQEBB only
        return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
    }
    if (in_error(lc.state)) {
        q->rnr_waiting = 0;  // a send that waited for a receive is flushed like the rest
        return MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
    }
    return w.check_ctrl(uint16_t(lc.ci), lc.cfg.qpn);
}

}  // namespace gv::detail::soft
