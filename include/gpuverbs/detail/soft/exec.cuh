// The software RDMA device's executor: consumes mlx5 WQEs exactly as a ConnectX would.
//
// Written once for CUDA thread groups and CPU threads. Whoever rings a QP's doorbell
// (commits) counts its ring on the QP's lock word; the group that finds it at 0 holds the QP
// and drains every WQE published on it in order, and drains again for rings that came while
// it held it (progress()), so two committers never reorder a QP and no published WQE is left
// behind. Per WQE: the group's
// leader reads and validates it (mlx5::WqeReader: the format's decoding and structural
// checks), checks it against the device's state (regions, access, the peer, its receive
// queue) and fills a copy plan; every thread of the group copies its share; a fence and a
// group barrier separate consecutive WQEs (RC ordering); the leader completes it.
//
// The pieces it builds on: mlx5/wqe_reader.cuh (reading WQEs), detail/group.cuh and
// copy.cuh (execution groups, cooperative copy), mr_check.cuh (memory-region checks, the
// leader's caches), completions.cuh (CQ slots, receive queue, flush; the CQE format is
// mlx5/cqe.cuh), complete.cuh (a WQE's completions and its effect on the QPs' states),
// fast.cuh (the short way of the common small WRITE and READ), stage.cuh (host rings copied
// into shared memory), batch.cuh (what a drain reads once, the first checks of a WQE), prepare.cuh
// (a WQE read, validated and planned: prepare(), and the Action it returns), plan.cuh (the
// regions, atomics, copies and receives prepare() plans).
#pragma once

#include <type_traits>

#include "gpuverbs/detail/probe.cuh"
#include "gpuverbs/detail/soft/batch.cuh"
#include "gpuverbs/detail/soft/complete.cuh"
#include "gpuverbs/detail/soft/fast.cuh"
#include "gpuverbs/detail/soft/plan.cuh"
#include "gpuverbs/detail/soft/prepare.cuh"
#include "gpuverbs/detail/soft/send_run.cuh"
#include "gpuverbs/detail/soft/stage.cuh"
#include "gpuverbs/detail/soft/warp_run.cuh"
#include "gpuverbs/mlx5/wqe_reader.cuh"

namespace gv::detail::soft {

/// Groups of at least this many threads plan the next WQE while they copy one: the first warp
/// plans (its leader), the others copy. Smaller groups plan and copy in turns, all copying.
#ifndef GV_PLAN_AHEAD_THREADS
#define GV_PLAN_AHEAD_THREADS 256
#endif
inline constexpr uint32_t kPlanAheadThreads = GV_PLAN_AHEAD_THREADS;
static_assert(kPlanAheadThreads > 32,
              "GV_PLAN_AHEAD_THREADS: the first warp plans while the others copy, so a group that plans "
              "ahead needs more than 32 threads (a value above any block size turns planning ahead off)");

/// SENDs moving at most this many bytes are copied by all warps but the first, whose leader
/// plans the next WQE meanwhile; larger ones by every warp, the next planned after. A SEND is
/// never chained (it consumes a receive, whose completion the leader writes between the two
/// copies), so planning ahead gains only the planning's time, and for a long copy the first
/// warp's share of it is worth more (H200, 2026-12-03, 64 QPs x 256 threads, same run: 4 KiB
/// SENDs 37.5 -> 46.0 GB/s planned ahead, 64 KiB 150.3 -> 142.9 GB/s).
#ifndef GV_SEND_AHEAD_BYTES
#define GV_SEND_AHEAD_BYTES 16384
#endif
inline constexpr uint32_t kSendAheadBytes = GV_SEND_AHEAD_BYTES;

/// The threads of a group from rank `from` on, as a group of their own (the copying warps of a
/// group that plans ahead). Only what group_copy uses.
template <typename G>
struct GroupTail {
    const G& g;
    uint32_t from;
    GV_HOST_DEVICE uint32_t rank() const { return g.rank() - from; }
    GV_HOST_DEVICE uint32_t size() const { return g.size() - from; }
};

/// The leader plans the WQE after the one the group is copying (advance() has stepped past
/// it) into p: true when that is a WRITE or READ for the group to copy next. Anything else
/// (nothing published, another opcode, a WQE that fails its checks or moves at most
/// kLeaderBytes) is left at lc.ci for prepare() to plan again after the copy completes.
/// send_ahead: as prepare()'s.
GV_HOST_DEVICE bool plan_ahead(QpContext* q, LeaderCache& lc, Plan& p, unsigned long long& claim, bool send_ahead) {
    return prepare(q, lc, p, &claim, send_ahead) == kExecute && plan_bytes(p) > kLeaderBytes;
}

/// Claims the receive a SEND planned ahead was planned on (claim: 1 + its index, from
/// plan_ahead), when its plan is about to be handed out: true when it is ours (or nothing was to
/// be claimed), false when the peer's flush took it meanwhile (the plan is then void: prepare()
/// plans the SEND again). Leader only.
GV_HOST_DEVICE bool claim_planned(QpContext* q, const LeaderCache& lc, unsigned long long& claim) {
    if (!claim) return true;
    unsigned long long c = claim - 1;
    claim = 0;
    return claim_receive(q, lc.r, c, state_scope(lc.r));
}

/// Where the leader hands plans to its group: two buffers, which chained WQEs use in turns
/// (drain()). A block's own shared memory when the group is a whole block: one drain per
/// block at a time (the block is the group), and the group's reads of a plan after the
/// barrier are then shared-memory loads (tens of ns) rather than global ones (an L2 round
/// trip, paid between every two copies of a large WQE; measured 2026-12-03: 64 KiB WRITEs over
/// 264 QPs x 512 threads 63.5% -> 67.2% of the copy ceiling). 2 x sizeof(Plan) bytes of static
/// shared memory (860 in gv_write_bw's kernel, with the block broadcast's slot) in every
/// kernel that commits at block scope (docs/execution-model.md). Warp groups (several may
/// drain different QPs in one block) and CPU threads use the QP's context, which the lock
/// makes theirs.
template <typename G>
GV_HOST_DEVICE Plan& group_plan(QpContext* q, uint32_t b) {
#if GV_DEVICE_CODE
    if constexpr (std::is_base_of_v<BlockGroup, G>) {
        __shared__ Plan block_plan[2];
        return block_plan[b];
    }
#endif
    return q->plan[b];
}

/// Hands the leader's plan p (to execute) out to the group through `to`; overlap:
/// destinations_overlap(p), which the caller has at hand.
GV_HOST_DEVICE void hand_out(Plan& to, const Plan& p, bool overlap) {
    to.nseg = p.nseg;
    to.sys = p.sys;
    to.overlap = overlap ? 1 : 0;
    to.out = p.out;
    to.run = p.run;
    for (uint32_t i = 0; i < p.nseg; ++i) to.seg[i] = p.seg[i];
    to.act = kExecute;
}

/// True when completing the WQE can change nothing a plan of the next one rests on: it
/// succeeded, is not signaled and consumed no receive, so complete() only moves sq_ci (no CQE
/// that a full CQ could lose, no state moved to ERROR).
GV_HOST_DEVICE bool completes_quietly(const Outcome& o) {
    return !o.signaled && !o.req_syndrome && !o.resp_kind;
}

/// How long a group's drain waits in place for the peer to post a receive a SEND found missing
/// (await_receive), in ns.
#ifndef GV_RNR_SPIN_NS
#define GV_RNR_SPIN_NS 20000
#endif
inline constexpr uint64_t kRnrSpinNs = GV_RNR_SPIN_NS;

/// A group's SEND found no receive posted (prepare() returned kRnrWait, the RNR timer armed):
/// waits up to kRnrSpinNs, never past the timer's deadline, for the peer to post one. True when
/// one is posted: the leader plans the SEND again. Leader only, holding the QP.
///
/// Why: a drain that stops for a receive frees the QP, and whoever retries it runs the SEND and
/// everything behind it: the receiver's thread whose receive doorbell finds the sender waiting
/// (ring_recv), or a lone waiter's drive(). That is one thread, where the group that committed
/// the list had hundreds: a list of 4 KiB SENDs then moves at one thread's copy rate. A receiver
/// that reposts a round of receives when the last round completed is a few microseconds behind
/// a sender that starts its next round at once; waiting that long here keeps the list on the
/// group (gv_write_bw --op send before its receivers posted a round ahead: 4 KiB SENDs over 64
/// QPs of 256 threads averaged 9.3 GB/s, peaks 54). While the group waits here it holds the QP,
/// so a receive doorbell finds the QP held and leaves its retry to this group. Within the timer
/// nothing changes for the IBA rules: the retry a NIC makes after the RNR timer finds the receive
/// posted in the meantime, and no retry is counted here.
GV_HOST_DEVICE bool await_receive(QpContext* q, const LeaderCache& lc) {
    QpContext* const r = lc.r;
    if (r == nullptr || kRnrSpinNs == 0) return false;
    const RqView v = rq_view(r);
    const uint64_t t0 = atom::now_ns();
    const uint64_t deadline = q->rnr_deadline;
    const uint64_t until = t0 + kRnrSpinNs < deadline ? t0 + kRnrSpinNs : deadline;
    unsigned long long c;
    for (;;) {
        if (peek_receive(r, v, &c)) return true;
        if (atom::now_ns() >= until) return false;
        atom::relax();
    }
}

/// Executes published WQEs until none is left (or one waits for a receive). The calling
/// group holds the QP's lock. Small WQEs run in the leader alone; a large one is handed to
/// the whole group through group_plan(). pub: where the ring's published count is (progress()
/// read it before it took the lock).
///
/// A large WQE costs the group its copy and, between two copies, the leader's work: the fence
/// and completion of the one, the planning of the next (reading and checking the WQE, its
/// regions: a chain of dependent loads). Groups of kPlanAheadThreads or more overlap the
/// planning with the copy: while the other warps copy WQE k, the leader plans k+1 into its own
/// plan (plan_ahead). When k completes quietly (completes_quietly: the common unsignaled
/// WRITE or READ) the leader also hands k+1's plan out before the copy's barrier, in the other
/// buffer, and completes k while the group copies k+1: one barrier per WQE, and nothing of the
/// leader's between two copies (chained). Otherwise the plan of k+1 stands only if completing
/// k changed nothing it was planned on (a lost completion moves the QP to ERROR, and k+1 then
/// flushes: prepare() plans it again), and is handed out after k's completion.
template <typename G>
GV_HOST_DEVICE uint32_t drain(QpContext* q, const G& g, const Published& pub) {
    LeaderCache lc;  // meaningful in the leader only
#if GV_DEVICE_CODE
    if constexpr (StageBbs<G>::value > 0) stage_wqes(q, g, lc);
#endif
    // Whether the WQE at sq_ci is worth offering to fast_run: after a WQE too large for it, or
    // of an opcode it does not take, not (a stream of 4 KiB WRITEs would read each WQE twice,
    // once in fast_run only to find it too large, and once in prepare(); a stream of 64-byte
    // SENDs three times, with fast_send_run's look: 9.9 -> 9.5 M msg/s over 64 QPs, H200).
    bool try_fast = true;
    // Whether the WQE at sq_ci is worth offering to plan_send_run (groups only): not after a SEND
    // of more than kLeaderBytes that it was offered and did not take (its receive has more than
    // one entry, say: the next one most likely fails the same way, and is better planned ahead,
    // during the copy before it, as before runs), nor after a SEND of at most kLeaderBytes.
    bool try_run = true;
    SendRun run;            // leader: the run p plans, when p.run
    // A thread group (a lone committer: latency) loads the first WQE with the QP's state and
    // peer (load_batch); larger groups' kernels have no registers for it.
    constexpr bool kFirst = std::is_same_v<G, ThreadGroup>;
    FastWqe first;
    Plan p;                 // the leader's: the WQE at lc.ci, planned
    unsigned long long claim = 0;  // leader: the receive p was planned on, to claim (plan_ahead)
    bool ahead = false;     // leader: p was planned during the last copy
    uint32_t b = 0;         // the plan buffer the group copies from
    // Every thread: the plan at b was handed out at the last barrier, so the WQE before it
    // (chained) awaits complete() by the leader during this copy.
    bool chained = false;
    // Whether fast_run may hand runs to the leader's warp (warp_run.cuh): where the group starts
    // with a whole warp, until a run comes out shorter than kWarpRunMin (WQEs of mixed shapes:
    // each hand-off would cost a barrier for little).
    bool try_warp = whole_warp(g);
    WarpShape hand;  // the leader's; every lane of its warp passes its own to warp_run
    for (;;) {
        if (!chained) {
            if (g.leader()) {
                uint32_t act = kExecute;
                if (ahead && !claim_planned(q, lc, claim)) ahead = false;
                while (!ahead) {
                    const FastWqe* loaded = nullptr;  // the WQE at lc.ci, when load_batch read it
                    if (!lc.batches) {
                        load_batch(q, lc, pub, kFirst ? &first : nullptr);
                        if (kFirst) loaded = &first;
                    }
                    hand.ok = false;
                    if (try_fast && next_published(lc) &&
                        fast_run(q, lc, loaded, {}, {}, try_warp ? &hand : nullptr) && next_published(lc))
                        fast_send_run(q, lc);
                    if (hand.ok) {
                        act = kWarpRun;
                        break;
                    }
                    if (g.size() > 1 && try_run && plan_send_run(q, lc, p, run)) {
                        try_fast = false;
                        act = kExecute;  // not what an earlier turn's prepare() said (await_receive)
                        break;
                    }
                    const bool offered = g.size() > 1 && try_run;
                    act = prepare(q, lc, p);
                    if (act == kRnrWait && g.size() > 1 && await_receive(q, lc)) continue;
                    if (act != kExecute) break;
                    const uint64_t bytes = plan_bytes(p);
                    try_fast = bytes <= fast_bytes_of(p.out.opcode);
                    // After a SEND: only a larger one not refused by a run. Not after one of at
                    // most kLeaderBytes: the next is most likely small too, and the offer loads its
                    // WQE only to refuse it (64-byte SENDs, each offered, ran 11% slower over 64
                    // QPs than before runs: H100, session 26). A larger SEND taken here makes the
                    // one after it worth offering again.
                    try_run = !mlx5::is_send(p.out.opcode) || (bytes > kLeaderBytes && !offered);
                    if (g.size() > 1 && bytes > kLeaderBytes) break;
                    bool stored = false;
                    for (uint32_t i = 0; i < p.nseg; ++i)
                        stored |= group_copy(ThreadGroup{}, p.seg[i].dst, p.seg[i].src, p.seg[i].len);
                    GV_EXEC_STAMP(kStampCopied);
                    // RC ordering: this WQE's bytes are visible before the completion and
                    // before any byte of the next WQE. System scope when host memory or another
                    // GPU's threads observe them (p.sys: kScopeHost, kScopePeer): a
                    // device-scope fence orders them only for this GPU's threads, and a poller
                    // on the other GPU could see the completion (or the next WQE's flag) before
                    // the data.
                    if (stored) atom::fence_release(p.sys != 0);
                    GV_EXEC_STAMP(kStampFenced);
                    finish(q, lc, p.out);
                }
                if (g.size() == 1 && act != kExecute) {  // alone: no plan hand-off
                    keep_hints(q, lc);
                    return act;
                }
                Plan& to = group_plan<G>(q, b);  // for the group: header and used segments only
                if (act == kExecute) hand_out(to, p, destinations_overlap(p));
                else if (act == kWarpRun) to.act = kWarpRun;
                else to.act = act == kStop && lc.cut ? uint32_t(kMore) : act;
            }
            g.sync();  // publishes the leader's plan
        }
        const Plan& sp = group_plan<G>(q, b);
        const uint32_t act = sp.act;
#if GV_DEVICE_CODE
        if (act == kWarpRun) {
            // The leader's warp executes the run; the rest of the group waits at the next barrier.
            // The next plan goes into the other buffer: a thread of another warp may read this
            // one's act after the leader has gone on (the barrier between two uses of a buffer is
            // the next one's).
            if (g.rank() < 32) {
                const WarpRunDone r = warp_run(warp_run_args(q, lc, hand));
                if (g.leader()) {
                    lc.ci += r.n;
                    lc.pending -= r.n;
                    rmw_add_relaxed(&q->warp_wqes, (unsigned long long)r.n, kScopeGpu);  // statistics
                    if (r.lost) {  // as in fast_run: the completion is lost, the QP goes to ERROR
                        enter_error(q, uint32_t(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR));
                        lc.state = QpState::Error;
                    }
                    if (r.n < kWarpRunMin) try_warp = false;
                }
            }
            b ^= 1;
            continue;
        }
#endif
        if (act != kExecute) {
            if (g.leader()) keep_hints(q, lc);
            return act;
        }
        // Groups that plan ahead copy with all warps but the first, whose leader plans. Not
        // while a WRITE_IMM is copied: the next WQE is most likely one too, which is not
        // planned ahead (its receive is claimed in its turn), so every warp copies. Nor while a
        // SEND of more than kSendAheadBytes is copied (see there).
        // Nor when destinations overlap: then everyone copies segment by segment, a barrier
        // between two (found on 2026-12-03: with the copy shared differently, the traffic
        // suite's overlapping READ scatter entries came out in another order; as before, they
        // were right by timing only).
        const uint32_t overlap = sp.overlap;
        const uint8_t op = sp.out.opcode;
        // A run of SENDs (send_run.cuh): every warp copies, and nothing is planned meanwhile (the
        // leader completes the run after the copy, then plans on).
        const uint32_t in_run = sp.run;
        const bool planning = !in_run && (!mlx5::consumes_receive(op) ||
                                          (mlx5::is_send(op) && sp.out.byte_len <= kSendAheadBytes));
        const uint32_t from = g.size() >= kPlanAheadThreads && !overlap && planning ? 32 : 0;
        if (g.rank() >= from) {
            const GroupTail<G> copiers{g, from};
            const uint32_t nseg = sp.nseg;
            bool stored = false;
            if (in_run && !overlap) {
                stored = copy_run(copiers, sp);
            } else {
                for (uint32_t i = 0; i < nseg; ++i) {
                    if (overlap && i) g.sync();  // from is 0: every thread is here
                    stored |= group_copy(copiers, sp.seg[i].dst, sp.seg[i].src, sp.seg[i].len);
                }
            }
            // RC ordering, where the next WQE may be chained (from != 0): every storing thread
            // fences its own stores, at the scope of the memory written, before the barrier
            // after which the group stores the next WQE's bytes and the leader completes this
            // one. Elsewhere the leader's fence after that barrier orders them (below); stores
            // into host memory or another GPU's are fenced here too (system scope), which
            // costs nothing next to PCIe.
            if (stored && (from != 0 || sp.sys != 0)) atom::fence_release(sp.sys != 0);
        }
        if (g.leader()) {
            if (chained) {
                // The WQE before this one: every copier fenced its bytes before the barrier
                // that handed this one out. It completes quietly (sq_ci only).
                complete(q, lc, group_plan<G>(q, b ^ 1).out);
            }
            if (!in_run) advance(lc, p.out);  // a run advances as it completes
            // p was handed out, so the leader may plan the next WQE into it.
            ahead = from ? plan_ahead(q, lc, p, claim, !try_run) : false;
            if (from) {
                // Chain the next WQE when completing this one changes nothing its plan rests
                // on, and its destinations do not overlap (those are copied by every thread).
                Plan& next = group_plan<G>(q, b ^ 1);
                bool chain = ahead && completes_quietly(sp.out) && !destinations_overlap(p);
                if (chain && !claim_planned(q, lc, claim)) chain = ahead = false;
                if (chain) {
                    hand_out(next, p, false);
                } else {
                    next.act = kStop;  // not chained: handed out after this one completes
                }
            }
        }
        // Every thread has copied its share of this WQE (and, from != 0, fenced it).
        g.sync();
        chained = from != 0 && group_plan<G>(q, b ^ 1).act == kExecute;
        if (chained) {
            b ^= 1;
            continue;
        }
        // RC ordering: every thread's stores of this WQE are visible (at the scope of the
        // memory written) before the leader completes it and before any byte of the next WQE
        // is stored. One release fence, the leader's, after the barrier: the barrier orders
        // the group's stores before the leader's fence (bar.sync / __syncwarp order memory
        // among the group's threads), and a release fence is cumulative, ordering the writes
        // its thread has observed as well as its own before its later stores (the CQE,
        // sq_ci), and before the barrier that hands out WQE k+1's plan. The pattern of
        // cooperative groups' grid sync (__syncthreads, then one thread's __threadfence).
        // Measured against a fence in every storing thread before the barrier (H200,
        // 2026-12-02, both with two barriers per WQE): 4 KiB WRITEs over 264 QPs x 512 threads
        // 9% faster, 64 KiB unchanged. A chained WQE takes the other way (per-thread fences,
        // one barrier): 2026-12-03, 64 KiB WRITEs 67.2% -> 70.9% of the copy ceiling, 4 KiB
        // 178 -> 188 GB/s. sys carries kScopePeer on two GPUs: the poller of the data (and of
        // the completion that follows) runs on the other GPU, so system scope.
        if (g.leader()) {
            if (in_run) {
                // Its own fence, after the receive CQEs' bodies (complete_send_run). Nothing was
                // planned ahead.
                complete_send_run(q, lc, sp, run);
            } else {
                atom::fence_release(sp.sys != 0);
                // advance() counted this WQE already. If completing it moved either QP to ERROR (a
                // lost completion), a plan made ahead is void: the next WQE flushes instead.
                if (complete(q, lc, sp.out)) ahead = false;
            }
        }
    }
}

/// The rest of progress() for a group that holds the QP's lock (sc: its scope, meaningful in
/// the leader): drains, then gives the QP back, and drains again while rings came meanwhile
/// (see progress()). ran: the holder has executed everything it knew of already (the direct
/// path, direct.cuh), so it gives the QP back first, and drains only for rings that came.
template <typename G>
GV_HOST_DEVICE void hold(QpContext* q, const G& g, const Published& pub, uint32_t sc, bool ran = false) {
    for (;;) {
        const uint32_t why = ran ? uint32_t(kStop) : drain(q, g, pub);
        ran = false;
        GV_EXEC_STAMP(kStampDrained);
        uint32_t again = 0;
        if (g.leader()) {
            if (why == kRnrWait) {
                atom::store_release(&q->lock, 0u, sc != kScopeGpu);
            } else if (why == kMore) {
                again = 1;
            } else {
                uint32_t expect = 1;
                if (!rmw_cas(&q->lock, expect, 0u, sc)) {
                    rmw_exchange(&q->lock, 1u, sc);
                    again = 1;
                }
            }
            GV_EXEC_STAMP(kStampUnlocked);
            GV_EXEC_STAMP(kStampRechecked);
        }
        if (!g.bcast(again)) return;
    }
}

/// Runs a QP's published work if no other group is running it. Called by every thread of
/// the group after the doorbell record was updated.
///
/// The QP's lock counts rings (QpContext::lock). Every caller adds one with one RMW
/// (acquire-release: the doorbell record it moved before is released with it); the one that
/// finds 0 holds the QP, the others leave at once. The holder drains, then gives the QP back
/// with a CAS from 1 to 0: when that fails, some group rang meanwhile (perhaps for WQEs the
/// drain already ran), and the holder, still holding, sets the count back to 1 (an exchange,
/// which acquires every ring before it: their records are visible) and drains again. The
/// count so stays small however long one group holds the QP: a 32-bit count that only grew
/// would wrap after 2^32 rings in one hold (seconds of rings at an L2 atomic's rate, from a
/// kernel whose threads all commit on one QP), and a wrapped count reads as free. So a
/// ring is counted either before the CAS that frees the QP, which then fails, or after it,
/// when the ringing group finds 0 and drains itself: no published WQE is left behind, and two
/// groups never drain one QP at once. All of it is RMWs on one word, which every agent sees in
/// one order, so no full fence is needed; the Dekker hand-off this replaces (the record's store,
/// a full fence and the lock's CAS on one side, the lock's store, a full fence and the
/// record's loads on the other) cost a committer the fence, and the holder the fence and a
/// round of loads, on a lone WQE's path (docs/performance.md, 2026-12-03 session 14).
/// A drain that staged only part of what is published (kMore: no ring tells of the rest, which
/// was rung for before the drain began) drains again at once. Found on the H200 the first time
/// this ran (2026-12-03, `CpuDoorbells.LongListsOfMixedSizesCrossTheStage`: a long list a CPU
/// thread rang for once was left half done), where the re-check of the Dekker hand-off had
/// found it. A drain that stops for a receive the peer has not posted (kRnrWait) frees the QP
/// whatever was rung: the WQEs behind the waiting one wait with it, and whoever retries it (a
/// waiter's drive(), the receive's doorbell) drains them all.
/// On two GPUs (sc = kScopePeer) committers of both GPUs ring: the RMWs are system-scope.
template <typename G>
GV_HOST_DEVICE void progress(QpContext* q, const G& g) {
    GV_EXEC_STAMP(kStampEnter);
    // Where the ring's published count is, and its scope, read before the RMW: their latency
    // hides behind it.
    const Published pub = Published::of(q);
    uint32_t sc = kScopeGpu;
    uint32_t got = 0;
    if (g.leader()) {
        sc = state_scope(q);
        got = rmw_add(&q->lock, 1u, sc) == 0u ? 1u : 0u;
    }
    if (!g.bcast(got)) return;  // the holder will run what we published
    GV_EXEC_STAMP(kStampLocked);
    hold(q, g, pub, sc);
}

/// True when a waiter on this QP should drive it: it waits for a receive on the peer, or
/// it sits in ERROR with WQEs left to flush.
GV_HOST_DEVICE bool needs_progress(const QpContext* q) {
    const bool sys = state_scope(q) != kScopeGpu;  // written by executors of either GPU
    if (atom::load_acquire(&q->rnr_waiting, sys)) return true;
    if (load_state(q, sys) != QpState::Error) return false;
    const uint32_t pi = Published::of(q).read();
    return ((pi - uint32_t(atom::load_acquire(&q->sq_ci, sys))) & 0xffff) != 0 ||
           rq_pending(q, atom::load_acquire(&q->rq_ci, sys)) != 0;
}

}  // namespace gv::detail::soft
