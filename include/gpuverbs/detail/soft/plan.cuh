// Planning one WQE's work: the regions of both sides (resolve_local, resolve_remote), an
// atomic's 8-byte operation (run_atomic), the copies of a WRITE or READ (plan_rdma), a SEND's
// receive under the RNR rules (take_receive) and its scatter (plan_scatter), and what the
// group needs to know of a plan (plan_bytes, destinations_overlap). Part of the software
// device's executor (gpuverbs/detail/soft/exec.cuh, whose prepare() calls these in turn).
#pragma once

#include <cstring>

#include "gpuverbs/detail/soft/completions.cuh"
#include "gpuverbs/detail/soft/mr_check.cuh"
#include "gpuverbs/mlx5/wqe_reader.cuh"

namespace gv::detail::soft {
/// The peer's memory for `len` bytes at ra (its rkey), checked as the responder does: the
/// peer QP's access flags for `need`, then the region. Returns the executor pointer (1 for
/// len 0, which touches nothing), or 0: REMOTE_ACCESS_ERR.
GV_HOST_DEVICE uint64_t resolve_remote(LeaderCache& lc, mlx5::RaddrFields ra, uint64_t len, uint32_t need,
                                       uint32_t* rsys) {
    const QpConfig& c = lc.cfg;
    if (!(c.peer_access & need)) return 0;
    if (len == 0) return 1;
    return mr_resolve_cached(c.remote_mrs, lc.remote, ra.rkey, c.peer_pd, ra.raddr, len, need, rsys,
                             remote_foreign(c));
}

/// An atomic WQE (check_body accepted its shape): one 8-byte operation on the peer's
/// memory, done here by the leader; the old value lands in the local data segment's 8
/// bytes. Returns the requester's syndrome, or 0.
GV_HOST_DEVICE uint8_t run_atomic(LeaderCache& lc, const mlx5::WqeReader& w, Plan& p, Outcome& o) {
    const mlx5::RaddrFields ra = w.raddr();
    const mlx5::AtomicFields at = w.atomic();
    const mlx5::DataFields d = w.data(3);
    uint32_t lsys = 0;
    uint64_t lp = mr_resolve_cached(lc.cfg.local_mrs, lc.local, d.lkey, lc.cfg.pd, d.addr, 8, kLocalWrite, &lsys);
    if (!lp) return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
    if (ra.raddr & 7) return MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR;
    uint32_t rsys = 0;
    uint64_t rp = resolve_remote(lc, ra, 8, kRemoteAtomic, &rsys);
    if (!rp) return MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
    auto* target = reinterpret_cast<unsigned long long*>(rp);
    // The target's scope: host memory (rsys), and on two GPUs (lc.scope) memory that the other
    // GPU's threads update too (its executors' atomics, its kernels): a system-scope RMW, which
    // NVLink performs natively. Device scope would make it atomic among this GPU's threads only.
    const uint32_t scope = rsys | lc.scope;
    unsigned long long old;
    if (w.opcode() == MLX5_OPCODE_ATOMIC_FA) {
        old = rmw_add(target, (unsigned long long)at.swap_add, scope);
    } else {
        old = at.compare;
        rmw_cas(target, old, (unsigned long long)at.swap_add, scope);
    }
    std::memcpy(reinterpret_cast<void*>(lp), &old, 8);
    p.sys |= lsys | rsys;
    o.byte_len = 8;
    return 0;
}

/// The local side of a WRITE, READ or SEND, in executor pointers: the data segments'
/// regions, or the inline payload in the ring (two pieces when it wraps past the ring's end).
struct Gather {
    struct Piece {
        uint64_t ptr, len;
    } piece[kMaxSge + 1];
    uint32_t n = 0;
    uint64_t total = 0;
};

/// Resolves the local side of a WRITE, READ or SEND into g (a READ writes into its regions:
/// local-write access). The segments before the body's violation v are resolved first, so
/// the first bad segment in list order reports, as a NIC walking the list finds it.
/// Returns the requester's syndrome, or 0.
GV_HOST_DEVICE uint8_t resolve_local(LeaderCache& lc, const mlx5::WqeReader& w, mlx5::Violation v,
                                     Gather& g, Plan& p) {
    const bool is_read = w.opcode() == MLX5_OPCODE_RDMA_READ;
    const uint32_t end = v.syndrome ? v.unit : w.ds();
    for (uint32_t k = w.first_data(); k < end; ++k) {
        const mlx5::DataFields d = w.data(k);
        if (d.byte_count & MLX5_INLINE_SEG) {
            // check_body accepted it: alone, within max_inline and within the WQE.
            const mlx5::InlinePayload in = w.inline_payload(k);
            g.piece[g.n++] = {reinterpret_cast<uint64_t>(in.first), in.first_len};
            if (in.second_len) g.piece[g.n++] = {reinterpret_cast<uint64_t>(in.second), in.second_len};
            p.sys |= lc.cfg.sys;
            g.total = in.length();
            break;
        }
        const uint64_t len = mlx5::data_len(d.byte_count);
        uint32_t lsys = 0;
        uint64_t lp = mr_resolve_cached(lc.cfg.local_mrs, lc.local, d.lkey, lc.cfg.pd, d.addr, len,
                                        is_read ? kLocalWrite : 0u, &lsys);
        if (!lp) return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
        if (is_read) p.sys |= lsys;
        g.piece[g.n++] = {lp, len};
        g.total += len;
    }
    return v.syndrome;
}

/// The copies of a WRITE (gather list to the peer's region) or a READ (the peer's region
/// to the scatter list). Returns the requester's syndrome, or 0.
GV_HOST_DEVICE uint8_t plan_rdma(LeaderCache& lc, mlx5::RaddrFields ra, bool is_read, const Gather& g,
                                 Plan& p) {
    uint32_t rsys = 0;
    uint64_t rp = resolve_remote(lc, ra, g.total, is_read ? kRemoteRead : kRemoteWrite, &rsys);
    if (!rp) return MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
    if (!is_read) p.sys |= rsys;
    uint64_t off = 0;
    for (uint32_t i = 0; i < g.n; ++i) {
        if (is_read) p.seg[p.nseg++] = {g.piece[i].ptr, rp + off, g.piece[i].len};
        else p.seg[p.nseg++] = {rp + off, g.piece[i].ptr, g.piece[i].len};
        off += g.piece[i].len;
    }
    return 0;
}

/// Receive WQEs the peer (v: its receive side) has posted past index c. Its record is read with
/// acquire: the receive WQEs it covers are visible from here on.
GV_HOST_DEVICE uint32_t receives_posted(const RqView& v, unsigned long long c) {
    return (mlx5::read_rq_dbrec(v.dbrec, v.sys != 0) - uint32_t(c)) & 0xffff;
}

/// Claims the peer r's receive c, or the n receives from c on (CAS on its rq_ci at `scope`,
/// state_scope(r)): true when they are q's now, and q's send no longer waits for one; else c
/// holds the rq_ci the CAS found.
GV_HOST_DEVICE bool claim_receive(QpContext* q, QpContext* r, unsigned long long& c, uint32_t scope,
                                  uint32_t n = 1) {
    if (!rmw_cas(&r->rq_ci, c, c + n, scope)) return false;
    q->rnr_waiting = 0;
    return true;
}

enum class Receive {
    Taken,     ///< the peer's next receive WQE is ours
    Wait,      ///< none posted: the WQE waits at sq_ci (RNR), retried later
    Exceeded,  ///< none posted and the RNR retries are spent: RNR_RETRY_EXC_ERR
};

/// Claims the peer r's next posted receive WQE (its index in *rc), or applies the RNR
/// rules when none is posted. v: r's receive side (rq_view, loaded before the local
/// lookup), so that the peer's rq_ci and its receive record are read in one round: rq_ci
/// relaxed (only this QP's executor, the lock holder, and the peer's own flushes in ERROR move
/// it, and the CAS checks the value), the record with acquire (the receive WQEs it covers are
/// visible from there on). Reading them one after the other, with the record's address and the
/// ring's shape loaded on the way, cost about six dependent loads per SEND.
///
/// Not kept across the WQEs of a drain (where rq_ci stands, what the record said), although
/// that would save the record's read for most SENDs: the three words it takes in the leader
/// cache, live through all of drain(), took gv_write_bw's kernel from 128 to 140 registers
/// (ptxas, CUDA 13.0), past what a 512-thread block may use.
GV_HOST_DEVICE Receive take_receive(QpContext* q, QpContext* r, const RqView& v, unsigned long long* rc) {
    // r's rq_ci is also claimed by r's own flushes (on r's GPU): system scope on two GPUs.
    unsigned long long c = atom::load_relaxed(&r->rq_ci, v.scope != kScopeGpu);
    for (;;) {
        if (receives_posted(v, c) == 0) {
            if (q->rnr_retry == 0) return Receive::Exceeded;
            uint64_t now = atom::now_ns();
            uint64_t delay = uint64_t(rnr_timer_us(r->min_rnr_timer)) * 1000;
            if (!q->rnr_waiting) {
                q->rnr_waiting = 1;
                q->rnr_count = 0;
                q->rnr_deadline = now + delay;
            } else if (now >= q->rnr_deadline) {
                // This retry found no receive either. rnr_retry N allows N retries
                // after the first attempt (as rxe and ConnectX count), so the Nth
                // failed retry ends it.
                if (q->rnr_retry != 7 && ++q->rnr_count >= q->rnr_retry) {
                    q->rnr_waiting = 0;
                    return Receive::Exceeded;
                }
                q->rnr_deadline = now + delay;
            }
            return Receive::Wait;
        }
        if (claim_receive(q, r, c, v.scope)) {
            *rc = c;
            return Receive::Taken;
        }
        // c now holds the value the CAS found (a flush of the peer's claimed some).
    }
}

/// For a SEND planned ahead (drain() plans WQE k+1 while the group copies k): the index of the
/// peer r's next posted receive, without claiming it, or false when none is posted (the SEND is
/// then planned in its turn, under the RNR rules). The claim is made when the plan is handed
/// out (claim_planned in exec.cuh), with take_receive's claim_receive: only the lock holder and
/// the peer's own flushes in ERROR move r's rq_ci, and a flush between the two makes the CAS
/// fail, so the plan is dropped and the SEND planned again.
GV_HOST_DEVICE bool peek_receive(QpContext* r, const RqView& v, unsigned long long* rc) {
    const unsigned long long c = atom::load_relaxed(&r->rq_ci, v.scope != kScopeGpu);
    if (receives_posted(v, c) == 0) return false;
    *rc = c;
    return true;
}

/// The copies of a SEND: the gather list g scattered over the list of the peer's receive
/// WQE rc. When the receive cannot take the message, sets o.resp_syndrome (the responder's
/// error CQE) and returns the requester's syndrome; else 0.
GV_HOST_DEVICE uint8_t plan_scatter(LeaderCache& lc, const RqView& v, unsigned long long rc, const Gather& g,
                                    Plan& p, Outcome& o) {
    const mlx5_wqe_data_seg* rs = rq_wqe(v, rc);
    const uint32_t cap = (1u << v.log_stride) / 16;
    // The peer's table belongs to another process: only its shared regions may be written.
    const bool foreign = v.mrs.owner != lc.cfg.local_mrs.owner;
    uint32_t nr = 0;
    uint64_t li = 0, loff = 0, placed = 0;
    while (placed < g.total && nr < cap) {
        const mlx5::DataFields d = mlx5::read_data_seg(&rs[nr]);
        if (d.lkey == MLX5_INVALID_LKEY) break;
        uint64_t rlen = mlx5::data_len(d.byte_count);
        uint64_t use = g.total - placed < rlen ? g.total - placed : rlen;
        uint32_t rsys = 0;
        uint64_t rp = mr_resolve_cached(v.mrs, lc.remote, d.lkey, v.pd, d.addr, use, kLocalWrite, &rsys, foreign);
        if (!rp) {
            o.resp_syndrome = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
            return MLX5_CQE_SYNDROME_REMOTE_OP_ERR;
        }
        p.sys |= rsys;
        uint64_t roff = 0;
        while (roff < use) {
            uint64_t chunk = g.piece[li].len - loff;
            if (chunk > use - roff) chunk = use - roff;
            if (p.nseg >= kMaxPlanSegs) {
                o.resp_syndrome = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
                return MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR;
            }
            p.seg[p.nseg++] = {rp + roff, g.piece[li].ptr + loff, chunk};
            roff += chunk;
            loff += chunk;
            if (loff == g.piece[li].len) {
                ++li;
                loff = 0;
            }
        }
        placed += use;
        ++nr;
    }
    if (placed < g.total) {
        o.resp_syndrome = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
        return MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR;
    }
    return 0;
}

/// True when two of the plan's destination ranges overlap (entries of a READ's or a receive's
/// scatter list that the user placed over each other). Those are written in list order.
GV_HOST_DEVICE bool destinations_overlap(const Plan& p) {
    for (uint32_t i = 1; i < p.nseg; ++i)
        for (uint32_t j = 0; j < i; ++j)
            if (p.seg[i].dst < p.seg[j].dst + p.seg[j].len && p.seg[j].dst < p.seg[i].dst + p.seg[i].len) return true;
    return false;
}

/// The bytes a plan moves.
GV_HOST_DEVICE uint64_t plan_bytes(const Plan& p) {
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < p.nseg; ++i) bytes += p.seg[i].len;
    return bytes;
}

}  // namespace gv::detail::soft
