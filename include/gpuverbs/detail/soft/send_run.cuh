// SENDs in runs, for a group: up to kSendRun consecutive SENDs of more than kLeaderBytes, each
// into its own receive, planned by the leader at once, copied by the group in one pass, completed
// by the leader after one barrier and one fence. Part of the software device's executor
// (gpuverbs/detail/soft/exec.cuh, whose drain() calls these).
//
// One SEND at a time, a SEND costs its group a chain of the leader's dependent steps between two
// copies, whatever its size: the fence, the receive's CQE (the slot's RMW, the consumer index's
// acquire, the stores and the owner's release), the claim of the next receive (a CAS) and the
// hand-out; about 5.7 us a SEND per QP on the H200 up to 4 KiB (docs/performance.md, session 15).
// A run pays the claim (one CAS for all its receives), the CQ slots (one RMW), the barrier and
// the fence once, and writes its receive CQEs' bodies, one fence, then their owner words.
//
// Why a run may be copied at once and fenced once, where WRITEs may not (RC ordering): a SEND's
// bytes belong to the responder only once the receive's completion says so (until then the
// receive buffer's contents are undefined, on any RC device), so no poller may tell in which
// order the bytes of a run's SENDs landed; what it may rely on is that every byte of SEND k is
// in place when it sees k's receive completion, and before any byte of a WQE after the run.
// Both hold: the group's stores, the barrier, then the leader's release fence (cumulative: it
// orders the stores its barrier made visible to it), then the CQEs' owner words and sq_ci, then
// the next WQE. A WRITE's bytes, by contrast, may be polled directly (data, then flag), so a
// WRITE is copied and fenced before the next one starts.
//
// What the run may not do is read or write a byte another SEND of the same run writes or reads
// (a SEND whose gather list reads an earlier SEND's receive buffer must see those bytes): a run
// ends before a SEND whose source or destination range meets the span of the run's destinations
// or sources. Destinations that overlap each other (receives the user posted over one buffer)
// are written in list order as anywhere else (Plan::overlap: segment by segment, a barrier
// between two).
#pragma once

#include "gpuverbs/detail/soft/complete.cuh"
#include "gpuverbs/detail/soft/copy.cuh"
#include "gpuverbs/detail/soft/fast.cuh"

namespace gv::detail::soft {

/// SENDs a run takes at most: one copy segment each, so that a run fits one Plan.
inline constexpr uint32_t kSendRun = kMaxPlanSegs;
static_assert(kSendRun < kRunUniform, "Plan::run holds the run's length below kRunUniform");

/// What the leader keeps of a run between its plan and its completion (the group needs only the
/// Plan).
struct SendRun {
    unsigned long long slot;  ///< the first receive-CQ slot taken (cq_take_run)
    uint32_t fit;             ///< of the slots taken, those with room (the rest are lost completions)
    uint32_t signaled;        ///< 1: the run's last SEND asks for a requester completion
    uint32_t imm_be;          ///< the ctrl segment's immediate word, alike in every SEND of the run
    uint32_t rq_first;        ///< the peer's receive index of the first SEND
    RespTarget to;            ///< the peer's QPN and receive CQ
};

/// Plans a run of SENDs at sq_ci for the group (leader only, holding the QP's lock): every one a
/// SEND of one data segment (not inline) of more than kLeaderBytes, into a receive whose first
/// entry takes it whole, passing prepare()'s checks in prepare()'s order (ctrl, peer, body, local
/// region, the peer's receive and its region); a signaled SEND ends the run (a requester
/// completion it loses moves this QP to ERROR: no receive of the live peer may be claimed behind
/// it). Then claims their receives with one CAS of the peer's rq_ci and takes their receive
/// completions' CQ slots with one RMW. Returns the SENDs to execute, 0 when the WQE at sq_ci
/// starts no run (nothing was changed: prepare() takes it as always, errors and RNR waits
/// included). p: one segment per SEND, p.out the first's outcome, p.run the count.
///
/// Only this QP's executor and the peer's own flushes in ERROR move the peer's rq_ci, and the CAS
/// checks it: a flush meanwhile ends the attempt before anything moved. When the CQ has room for
/// fewer completions than the run (fit), the SENDs up to the first without room execute and that
/// one's completion is lost (the peer goes to ERROR, complete_send_run), as one at a time; the
/// rest stay published, their receives claimed with no completion (as every later one into a
/// full CQ), and prepare() flushes them, the peer being in ERROR.
GV_HOST_DEVICE uint32_t plan_send_run(QpContext* q, LeaderCache& lc, Plan& p, SendRun& run) {
    if (lc.pending == 0 || !sends_allowed(lc.state) || !lc.peer_up) return 0;
    const QpConfig& cfg = lc.cfg;
    const FastRing ring = fast_ring(lc);
    // The WQE first, and nothing of the peer until it is a SEND of one data segment: a WRITE
    // offered here (drain() offers the WQE after each WRITE or READ) costs the load of its WQE,
    // which prepare() reads next anyway, not the peer's context as well.
    FastWqe cur = ring.load(lc.ci);
    {
        const mlx5::CtrlFields c = mlx5::read_ctrl_seg(reinterpret_cast<const mlx5_wqe_ctrl_seg*>(&cur.u[0]));
        if (c.opcode != MLX5_OPCODE_SEND || c.ds != 2) return 0;
    }
    QpContext* const r = lc.r;
    const RqView v = rq_view(r);
    const RespTarget to{r->qpn, r->rcq};
    const bool foreign = v.mrs.owner != cfg.local_mrs.owner;
    const uint32_t most = lc.pending < kSendRun ? lc.pending : kSendRun;
    unsigned long long rc = 0;  // the peer's rq_ci, read at the first SEND
    uint32_t posted = 0;        // receives known posted from rc on
    uint32_t n = 0, sys = 0, imm = 0;
    bool signaled = false, uniform = true;
    // The spans of the run's sources and destinations so far.
    uint64_t s_lo = ~0ull, s_hi = 0, d_lo = ~0ull, d_hi = 0;
    // SEND n's WQE (cur) and its receive's first entry (once read: have_rd). From the second SEND
    // on, both were loaded during the checks of the one before (one memory latency a SEND, not two).
    mlx5::DataFields rd{};
    bool have_rd = false;
    while (n < most) {
        const unsigned long long ci = lc.ci + n;
        const mlx5::CtrlFields c = mlx5::read_ctrl_seg(reinterpret_cast<const mlx5_wqe_ctrl_seg*>(&cur.u[0]));
        if (c.opcode != MLX5_OPCODE_SEND || c.ds != 2 || c.wqe_index != uint16_t(ci) || c.qpn != cfg.qpn) break;
        if (n == 0) imm = c.imm_be;
        else if (c.imm_be != imm) break;
        const mlx5::DataFields d = mlx5::read_data_seg(reinterpret_cast<const mlx5_wqe_data_seg*>(&cur.u[1]));
        if (d.byte_count & MLX5_INLINE_SEG) break;
        const uint32_t len = d.byte_count;  // 0 (2 GiB to mlx5) is left to prepare() as well
        if (len <= kLeaderBytes) break;
        mr_prefetch(cfg.local_mrs, lc.local, d.lkey, cfg.pd, false);
        const uint64_t lp = mr_check(lc.local, d.addr, len, 0u, nullptr);
        if (!lp) break;
        if (n == 0) rc = atom::load_relaxed(&r->rq_ci, v.scope != kScopeGpu);
        // The receive record again when the receives it showed are used up (none at all: the
        // RNR rules, in prepare()).
        if (n == posted && (posted = receives_posted(v, rc)) <= n) break;
        if (!have_rd) rd = mlx5::read_data_seg(rq_wqe(v, rc + n));
        // The next SEND's WQE (published: n + 1 < most <= pending) and receive (posted: the
        // record's acquire above covers it), loaded while this one's regions are checked.
        FastWqe next = cur;
        mlx5::DataFields rd_next{};
        have_rd = false;
        if (n + 1 < most) {
            next = ring.load(ci + 1);
            if (n + 1 < posted) {
                rd_next = mlx5::read_data_seg(rq_wqe(v, rc + n + 1));
                have_rd = true;
            }
        }
        if (rd.lkey == MLX5_INVALID_LKEY || mlx5::data_len(rd.byte_count) < len) break;
        uint32_t rsys = 0;
        const uint64_t rp =
            mr_resolve_cached(v.mrs, lc.remote, rd.lkey, v.pd, rd.addr, len, kLocalWrite, &rsys, foreign);
        if (!rp) break;
        const uint64_t ns_lo = lp < s_lo ? lp : s_lo, ns_hi = lp + len > s_hi ? lp + len : s_hi;
        const uint64_t nd_lo = rp < d_lo ? rp : d_lo, nd_hi = rp + len > d_hi ? rp + len : d_hi;
        // Copied at once: no SEND may read what another of the run writes (a first SEND whose own
        // source and destination meet is copied alone, as prepare() would copy it).
        if (n && ns_lo < nd_hi && nd_lo < ns_hi) break;
        s_lo = ns_lo, s_hi = ns_hi, d_lo = nd_lo, d_hi = nd_hi;
        p.seg[n] = {rp, lp, len};
        uniform = uniform && len == p.seg[0].len && ((rp | lp | len) & 15) == 0;
        sys |= rsys;
        ++n;
        if (cur.u[0].b & kFastSignalBit) {
            signaled = true;
            break;
        }
        cur = next;
        rd = rd_next;
    }
    if (n == 0) return 0;
    unsigned long long seen = rc;  // claim_receive leaves the rq_ci it found here
    if (!claim_receive(q, r, seen, v.scope, n)) return 0;
    uint32_t fit = 0;
    run.slot = cq_take_run(to.rcq, n, &fit);
    run.fit = fit;
    const uint32_t exec = fit < n ? fit + 1 : n;
    run.signaled = signaled && exec == n ? 1u : 0u;
    run.imm_be = imm;
    run.rq_first = uint32_t(rc);
    run.to = to;
    p.nseg = exec;
    p.sys = lc.scope | sys;
    p.run = exec | (uniform ? kRunUniform : 0u);
    Outcome o{};
    o.opcode = MLX5_OPCODE_SEND;
    o.wqe_index = uint16_t(lc.ci);
    o.bbs = 1;
    o.byte_len = uint32_t(p.seg[0].len);
    o.imm_be = imm;
    o.rq_index = uint16_t(rc);
    o.resp_kind = MLX5_CQE_RESP_SEND;
    p.out = o;
    return exec;
}

/// A 16-byte word of copy_run (uint4 on the GPU: one 128-bit load or store).
#if GV_DEVICE_CODE
using RunWord = uint4;
#else
struct RunWord {
    uint64_t a, b;
};
#endif

/// The group copies a run's segments (sp.run set, destinations not overlapping). Alike segments
/// (kRunUniform) in one pass over all of them, four 16-byte words in flight per thread whichever
/// SENDs they belong to; copied one after another, each thread would wait for one segment's loads
/// before it issued the next one's (a 4 KiB segment is one word a thread in a block of 256).
/// Returns whether the calling thread stored anything.
template <typename G>
GV_HOST_DEVICE bool copy_run(const G& g, const Plan& sp) {
    const uint32_t n = sp.nseg;
    if (sp.run & kRunUniform) {
        const uint32_t per = uint32_t(sp.seg[0].len / 16);  // words a segment (len < 2^31)
        const uint32_t total = per * n;                     // < 2^31
        const uint32_t step = g.size();
        auto at = [&](uint32_t k, RunWord*& d) -> const RunWord* {
            const uint32_t s = k / per, w = k - s * per;
            d = reinterpret_cast<RunWord*>(sp.seg[s].dst) + w;
            return reinterpret_cast<const RunWord*>(sp.seg[s].src) + w;
        };
        uint32_t i = g.rank();
        for (; i + 3 * step < total; i += 4 * step) {
            RunWord *d0, *d1, *d2, *d3;
            const RunWord a = *at(i, d0), b = *at(i + step, d1), c = *at(i + 2 * step, d2), e = *at(i + 3 * step, d3);
            *d0 = a;
            *d1 = b;
            *d2 = c;
            *d3 = e;
        }
        for (; i < total; i += step) {
            RunWord* d;
            const RunWord a = *at(i, d);
            *d = a;
        }
        return g.rank() < total;
    }
    bool stored = false;
    for (uint32_t s = 0; s < n; ++s) stored |= group_copy(g, sp.seg[s].dst, sp.seg[s].src, sp.seg[s].len);
    return stored;
}

/// Completes a run after the group copied it and passed the barrier (leader only): the receive
/// CQEs' bodies, one release fence (the group's bytes, which the barrier ordered before it, and
/// the bodies), the CQEs' owner words, then the last SEND's requester completion when signaled,
/// and sq_ci. A completion without room (the run's last, see plan_send_run) is lost: the peer goes
/// to ERROR, as complete_responder() does; a lost requester completion moves this QP there, as
/// complete() does. Returns true when either QP moved to ERROR.
GV_HOST_DEVICE bool complete_send_run(QpContext* q, LeaderCache& lc, const Plan& sp, const SendRun& run) {
    const uint32_t n = sp.run & (kRunUniform - 1);
    CqState* const cq = run.to.rcq;
    const uint32_t log_cnt = cq->log_cnt;
    const bool csys = cq->sys != 0;
    mlx5_cqe64* const cqes = cq->cqes;
    const uint32_t mask = (1u << log_cnt) - 1;
    const uint32_t ok = n < run.fit ? n : run.fit;  // CQEs with room
    mlx5::CqeFields f{};
    f.cqe_opcode = MLX5_CQE_RESP_SEND;
    f.qpn = run.to.qpn;
    f.rqpn = lc.cfg.qpn;
    f.imm_be = run.imm_be;
    for (uint32_t i = 0; i < ok; ++i) {
        f.wqe_counter = uint16_t(run.rq_first + i);
        f.byte_cnt = uint32_t(sp.seg[i].len);
        mlx5::write_cqe_body(&cqes[(run.slot + i) & mask], f, csys);
    }
    // RC ordering: every byte of the run (the group's stores, ordered before this fence by the
    // barrier; a release fence is cumulative) and the CQEs' bodies before any owner word, before
    // sq_ci and before any byte of the next WQE. System scope when the bytes or the CQ are host
    // memory or another GPU's threads observe them.
    atom::fence_release(sp.sys != 0 || csys);
    for (uint32_t i = 0; i < ok; ++i) {
        f.wqe_counter = uint16_t(run.rq_first + i);
        atom::store_relaxed(mlx5::cqe_last_word_at(&cqes[(run.slot + i) & mask]),
                            mlx5::cqe_last_word(f, mlx5::sw_owner(uint32_t(run.slot + i), log_cnt)), csys);
    }
    const bool lost = ok < n;
    // cq_take_run marked the CQ overrun; the peer goes to ERROR, as complete_responder() does.
    if (lost) peer_to_error(lc, uint32_t(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR));
    advance(lc, n);  // n SENDs of one basic block each
    // Its result unused: no wait.
    rmw_add_relaxed(&q->run_sends, (unsigned long long)n, kScopeGpu);
    Outcome last{};
    last.opcode = MLX5_OPCODE_SEND;
    last.wqe_index = uint16_t(lc.ci - 1);
    last.signaled = uint8_t(run.signaled);
    last.bbs = 1;
    last.byte_len = uint32_t(sp.seg[n - 1].len);
    return finish_requester(q, lc, last) || lost;
}

}  // namespace gv::detail::soft
