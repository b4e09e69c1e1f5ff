// The software RDMA device's executor: consumes mlx5 WQEs exactly as a ConnectX would.
//
// Written once for CUDA thread groups and CPU threads. Whoever rings a QP's doorbell
// (commits) tries to take the QP's execution lock; the holder drains every WQE published
// on the QP in order, then re-checks for work published while it held the lock, so two
// committers never reorder a QP and no published WQE is left behind. The group's leader
// parses and validates each WQE and fills a copy plan; every thread of the group copies
// its share; a fence and a group barrier separate consecutive WQEs (RC ordering).
//
// The pieces it builds on: groups.cuh (execution groups, cooperative copy), mr_check.cuh
// (memory-region checks, the leader's caches), completions.cuh (CQEs, receive queue, flush).
#pragma once

#include "gpuverbs/detail/soft/completions.cuh"

namespace gv::detail::soft {

// ---- the send-queue executor --------------------------------------------------------

enum Action : uint32_t {
    kStop = 0,     ///< nothing (more) to execute now
    kExecute = 1,  ///< copy the plan's segments, then finish the WQE
    kRnrWait = 2,  ///< the WQE at sq_ci waits for a receive on the peer
};

GV_HOST_DEVICE uint8_t* sq_seg(const QpContext* q, unsigned long long pos_bb, uint32_t k) {
    return mlx5::wqe_seg(q->sq, q->sq_log_bb, pos_bb, k);
}


/// Validates the WQE at sq_ci and plans its data movement. Leader only.
GV_HOST_DEVICE uint32_t prepare(QpContext* q, LeaderCache& lc, Plan& p) {
    Outcome o{};
    p.nseg = 0;
    p.sys = 0;
    if (!lc.batches) lc.ci = q->sq_ci;
    const unsigned long long ci = lc.ci;
    if (lc.pending == 0) {
        // One batch per drain: work published later is found by progress()'s re-check
        // after the lock is released.
        if (lc.batches++) return kStop;
        // Acquire: the WQE bytes published up to the record are visible from here on.
        uint32_t pi = mlx5::read_sq_dbrec(q->dbrec, q->sys != 0);
        lc.pending = (pi - uint32_t(ci)) & 0xffff;
        if (lc.pending == 0) return kStop;
        lc.state = load_state_relaxed(q);
        // In ERROR every WQE flushes without the peer: a peer process that died is not read.
        lc.r = sends_allowed(lc.state) ? q->remote : nullptr;
        lc.peer_ok = lc.r && lc.r->remote == q && receives_allowed(load_state_relaxed(lc.r));
    }
    const uint32_t pending = lc.pending;
    const QpState state = lc.state;
    if (!sends_allowed(state) && !in_error(state)) {
        lc.pending = 0;
        return kStop;
    }

    // The first WQEBB (ctrl, raddr, first data segment of most WQEs) in four independent
    // loads, instead of a chain of dependent ones.
    struct Seg16 {
        uint64_t a, b;
    } bb[4];
    const auto* first = reinterpret_cast<const Seg16*>(sq_seg(q, ci, 0));
    for (int i = 0; i < 4; ++i) bb[i] = first[i];
    auto seg = [&](uint32_t k) -> const uint8_t* {
        return k < 4 ? reinterpret_cast<const uint8_t*>(&bb[k]) : sq_seg(q, ci, k);
    };
    auto* ctrl = reinterpret_cast<const mlx5_wqe_ctrl_seg*>(seg(0));
    mlx5::CtrlFields c = mlx5::read_ctrl_seg(ctrl);
    o.opcode = c.opcode;
    o.wqe_index = uint16_t(ci);
    o.signaled = (c.fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) ? 1 : 0;
    o.bbs = c.ds ? mlx5::ds_to_bbs(c.ds) : 1;
    o.imm_be = c.imm_be;
    auto fail = [&](uint8_t syn) -> uint32_t {
        o.req_syndrome = syn;
        p.nseg = 0;
        p.out = o;
        return kExecute;
    };
    if (o.bbs > pending) {
        o.bbs = 1;
        return fail(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
    }
    if (in_error(state)) {
        q->rnr_waiting = 0;  // a send that waited for a receive is flushed like the rest
        return fail(MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
    }
    if (c.wqe_index != uint16_t(ci) || c.qpn != q->qpn || c.ds == 0)
        return fail(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);

    const bool rdma = c.opcode == MLX5_OPCODE_RDMA_WRITE || c.opcode == MLX5_OPCODE_RDMA_WRITE_IMM ||
                      c.opcode == MLX5_OPCODE_RDMA_READ || c.opcode == MLX5_OPCODE_ATOMIC_CS ||
                      c.opcode == MLX5_OPCODE_ATOMIC_FA;
    const bool send = c.opcode == MLX5_OPCODE_SEND || c.opcode == MLX5_OPCODE_SEND_IMM;
    if (c.opcode == MLX5_OPCODE_NOP) {
        p.out = o;
        return kExecute;
    }
    if (!rdma && !send) return fail(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);

    // Remote end: a QP of ours connected back to this one, ready to receive.
    QpContext* r = lc.r;
    if (!lc.peer_ok) return fail(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);

    uint32_t k = 1;  // next 16-byte unit
    uint64_t raddr = 0;
    uint32_t rkey = 0;
    if (rdma) {
        if (c.ds < 2) return fail(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
        auto* rs = reinterpret_cast<const mlx5_wqe_raddr_seg*>(seg(k++));
        raddr = mlx5::from_be64(rs->raddr);
        rkey = mlx5::from_be32(rs->rkey);
    }

    // ---- atomics: one 8-byte operation, done here by the leader ----
    if (c.opcode == MLX5_OPCODE_ATOMIC_CS || c.opcode == MLX5_OPCODE_ATOMIC_FA) {
        if (c.ds != 4) return fail(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
        auto* as = reinterpret_cast<const mlx5_wqe_atomic_seg*>(seg(k++));
        auto* ds = reinterpret_cast<const mlx5_wqe_data_seg*>(seg(k++));
        uint32_t llen = mlx5::from_be32(ds->byte_count);
        if (llen != 8) return fail(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
        uint32_t lsys = 0;
        uint64_t lp = mr_resolve_cached(q->local_mrs, lc.local, mlx5::from_be32(ds->lkey), q->pd,
                                        mlx5::from_be64(ds->addr), 8, kLocalWrite, &lsys);
        if (!lp) return fail(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
        if (raddr & 7) return fail(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
        if (!(r->access & kRemoteAtomic)) return fail(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
        uint32_t rsys = 0;
        uint64_t rp = mr_resolve_cached(q->remote_mrs, lc.remote, rkey, r->pd, raddr, 8, kRemoteAtomic, &rsys,
                                        mr_foreign(q->remote_mrs, q));
        if (!rp) return fail(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
        uint64_t operand = mlx5::from_be64(as->swap_add), compare = mlx5::from_be64(as->compare);
        auto* target = reinterpret_cast<unsigned long long*>(rp);
        unsigned long long old;
        if (c.opcode == MLX5_OPCODE_ATOMIC_FA) {
            old = atom::fetch_add(target, (unsigned long long)operand, rsys != 0);
        } else {
            old = compare;
            atom::cas(target, old, (unsigned long long)operand, rsys != 0);
        }
        std::memcpy(reinterpret_cast<void*>(lp), &old, 8);
        p.sys = lsys | rsys;
        o.byte_len = 8;
        p.out = o;
        return kExecute;
    }

    // ---- gather list (or inline payload) of WRITE / SEND, scatter list of READ ----
    struct Piece {
        uint64_t ptr, len;
    } local[kMaxSge + 1];
    uint32_t nlocal = 0;
    uint64_t total = 0;
    const bool is_read = c.opcode == MLX5_OPCODE_RDMA_READ;
    while (k < c.ds) {
        auto* ds = reinterpret_cast<const mlx5_wqe_data_seg*>(seg(k));
        uint32_t bc = mlx5::from_be32(ds->byte_count);
        if (bc & MLX5_INLINE_SEG) {
            if (is_read || nlocal) return fail(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
            uint32_t len = bc & ~uint32_t(MLX5_INLINE_SEG);
            if (len > q->max_inline) return fail(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
            if (mlx5::inline_ds(len) > c.ds - k) return fail(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
            // The payload starts 4 bytes into this unit and may wrap past the ring's end.
            uint64_t ring = 64ull << q->sq_log_bb;
            uint64_t off = (ci * 64 + uint64_t(k) * 16 + 4) & (ring - 1);
            uint64_t first = len < ring - off ? len : ring - off;
            local[nlocal++] = {reinterpret_cast<uint64_t>(q->sq) + off, first};
            if (first < len) local[nlocal++] = {reinterpret_cast<uint64_t>(q->sq), len - first};
            p.sys |= q->sys;
            total = len;
            k = c.ds;
            break;
        }
        if (nlocal >= kMaxSge) return fail(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
        uint64_t len = bc ? bc : 0x80000000ull;  // byte_count 0 means 2 GiB on mlx5
        uint32_t lkey = mlx5::from_be32(ds->lkey);
        uint32_t lsys = 0;
        uint64_t lp = mr_resolve_cached(q->local_mrs, lc.local, lkey, q->pd, mlx5::from_be64(ds->addr),
                                        len, is_read ? kLocalWrite : 0u, &lsys);
        if (!lp) return fail(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
        if (is_read) p.sys |= lsys;
        local[nlocal++] = {lp, len};
        total += len;
        ++k;
    }
    if (total > 0x80000000ull) return fail(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
    o.byte_len = uint32_t(total);

    if (rdma) {
        uint32_t need = is_read ? kRemoteRead : kRemoteWrite;
        if (!(r->access & need)) return fail(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
        uint32_t rsys = 0;
        uint64_t rp =
            total ? mr_resolve_cached(q->remote_mrs, lc.remote, rkey, r->pd, raddr, total, need, &rsys,
                                    mr_foreign(q->remote_mrs, q))
                  : 1;
        if (!rp) return fail(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
        if (!is_read) p.sys |= rsys;
        uint64_t off = 0;
        for (uint32_t i = 0; i < nlocal; ++i) {
            if (is_read) p.seg[p.nseg++] = {local[i].ptr, rp + off, local[i].len};
            else p.seg[p.nseg++] = {rp + off, local[i].ptr, local[i].len};
            off += local[i].len;
        }
    }

    if (c.opcode == MLX5_OPCODE_RDMA_WRITE_IMM || send) {
        // Consume the peer's next receive WQE, or wait as RNR rules say.
        unsigned long long rc;
        for (;;) {
            rc = atom::load_acquire(&r->rq_ci);
            if (rq_pending(r, rc) == 0) {
                if (q->rnr_retry == 0) return fail(MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
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
                        return fail(MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
                    }
                    q->rnr_deadline = now + delay;
                }
                return kRnrWait;
            }
            if (atom::cas(&r->rq_ci, rc, rc + 1)) break;
        }
        q->rnr_waiting = 0;
        o.rq_index = uint16_t(rc);
        o.resp_kind = c.opcode == MLX5_OPCODE_RDMA_WRITE_IMM ? MLX5_CQE_RESP_WR_IMM
                      : c.opcode == MLX5_OPCODE_SEND_IMM      ? MLX5_CQE_RESP_SEND_IMM
                                                              : MLX5_CQE_RESP_SEND;
        if (send) {
            // Scatter the gather list over the receive WQE's list.
            const mlx5_wqe_data_seg* rs = rq_wqe(r, rc);
            const uint32_t cap = (1u << r->rq_log_stride) / 16;
            uint32_t nr = 0;
            uint64_t li = 0, loff = 0, placed = 0;
            while (placed < total && nr < cap) {
                uint32_t lkey = mlx5::from_be32(rs[nr].lkey);
                if (lkey == MLX5_INVALID_LKEY) break;
                uint32_t bc = mlx5::from_be32(rs[nr].byte_count);
                uint64_t rlen = bc ? bc : 0x80000000ull;
                uint64_t use = total - placed < rlen ? total - placed : rlen;
                uint32_t rsys = 0;
                uint64_t rp = mr_resolve_cached(r->local_mrs, lc.remote, lkey, r->pd,
                                                mlx5::from_be64(rs[nr].addr), use, kLocalWrite, &rsys,
                                                mr_foreign(r->local_mrs, q));
                if (!rp) {
                    o.resp_syndrome = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
                    return fail(MLX5_CQE_SYNDROME_REMOTE_OP_ERR);
                }
                p.sys |= rsys;
                uint64_t roff = 0;
                while (roff < use) {
                    uint64_t chunk = local[li].len - loff;
                    if (chunk > use - roff) chunk = use - roff;
                    if (p.nseg >= kMaxPlanSegs) {
                        o.resp_syndrome = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
                        return fail(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
                    }
                    p.seg[p.nseg++] = {rp + roff, local[li].ptr + loff, chunk};
                    roff += chunk;
                    loff += chunk;
                    if (loff == local[li].len) {
                        ++li;
                        loff = 0;
                    }
                }
                placed += use;
                ++nr;
            }
            if (placed < total) {
                o.resp_syndrome = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
                return fail(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
            }
        }
    }
    p.out = o;
    return kExecute;
}

/// Completes the WQE prepare() planned, after the group copied its data. Leader only.
GV_HOST_DEVICE void finish(QpContext* q, LeaderCache& lc, const Outcome& o) {
    QpContext* r = lc.r;
    bool ok = true;
    if (o.resp_kind && r) {
        CqeFields f{};
        f.qpn = r->qpn;
        f.rqpn = q->qpn;
        f.wqe_counter = o.rq_index;
        if (o.resp_syndrome) {
            f.cqe_opcode = MLX5_CQE_RESP_ERR;
            f.syndrome = o.resp_syndrome;
        } else {
            f.cqe_opcode = o.resp_kind;
            f.byte_cnt = o.byte_len;
            f.imm_be = o.imm_be;
        }
        if (!cq_push(r->rcq, f) || o.resp_syndrome) {
            enter_error(r, o.resp_syndrome ? uint32_t(o.resp_syndrome)
                                           : uint32_t(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR));
            lc.peer_ok = false;
        }
    }
    if (o.req_syndrome || o.signaled) {
        CqeFields f{};
        f.qpn = q->qpn;
        f.wqe_counter = o.wqe_index;
        f.wqe_opcode = o.opcode;
        if (o.req_syndrome) {
            f.cqe_opcode = MLX5_CQE_REQ_ERR;
            f.syndrome = o.req_syndrome;
        } else {
            f.cqe_opcode = MLX5_CQE_REQ;
            f.byte_cnt = o.byte_len;
        }
        ok = cq_push(q->scq, f);
    }
    // Only the lock holder advances sq_ci; the lock's release store publishes it.
    lc.ci += o.bbs;
    atom::store_relaxed(&q->sq_ci, lc.ci);
    lc.pending -= o.bbs;
    if ((o.req_syndrome && o.req_syndrome != MLX5_CQE_SYNDROME_WR_FLUSH_ERR) || !ok) {
        enter_error(q, o.req_syndrome && o.req_syndrome != MLX5_CQE_SYNDROME_WR_FLUSH_ERR
                           ? uint32_t(o.req_syndrome)
                           : uint32_t(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR));
        lc.state = QpState::Error;
    }
}

/// WQEs moving at most this many bytes are executed by the group's leader alone, with no
/// group barrier: a barrier costs more than the leader's few loads and stores.
inline constexpr uint64_t kLeaderBytes = 128;

/// Executes published WQEs until none is left (or one waits for a receive). The calling
/// group holds the QP's lock. Small WQEs run in the leader alone; a large one is handed to
/// the whole group through q->plan.
template <typename G>
GV_HOST_DEVICE uint32_t drain(QpContext* q, const G& g) {
    LeaderCache lc;  // meaningful in the leader only
    for (;;) {
        if (g.leader()) {
            uint32_t act;
            for (;;) {
                Plan p;
                act = prepare(q, lc, p);
                if (act != kExecute) break;
                uint64_t bytes = 0;
                for (uint32_t i = 0; i < p.nseg; ++i) bytes += p.seg[i].len;
                if (g.size() > 1 && bytes > kLeaderBytes) {
                    Plan& shared = q->plan;  // for the group: header and used segments only
                    shared.nseg = p.nseg;
                    shared.sys = p.sys;
                    shared.out = p.out;
                    for (uint32_t i = 0; i < p.nseg; ++i) shared.seg[i] = p.seg[i];
                    break;
                }
                bool stored = false;
                for (uint32_t i = 0; i < p.nseg; ++i)
                    stored |= group_copy(ThreadGroup{}, p.seg[i].dst, p.seg[i].src, p.seg[i].len);
                // RC ordering: this WQE's bytes are visible before the completion and before
                // any byte of the next WQE.
                if (stored) atom::fence_release(p.sys != 0);
                finish(q, lc, p.out);
            }
            if (g.size() == 1 && act != kExecute) return act;  // alone: no plan hand-off
            q->plan.act = act;
        }
        // One barrier publishes the leader's plan; the one after the copy tells the leader
        // everyone is done with it (so two barriers per large WQE).
        g.sync();
        const Plan& p = q->plan;
        const uint32_t act = p.act;
        if (act != kExecute) return act;
        uint32_t nseg = p.nseg;
        bool stored = false;
        for (uint32_t i = 0; i < nseg; ++i) stored |= group_copy(g, p.seg[i].dst, p.seg[i].src, p.seg[i].len);
        // RC ordering: every thread's stores of this WQE are visible (at the scope of
        // the memory written) before the leader completes it and before any byte of the
        // next WQE is stored.
        if (stored) atom::fence_release(p.sys != 0);
        g.sync();
        if (g.leader()) finish(q, lc, p.out);
    }
}

/// True when the QP has published WQEs that an executor could run now. Relaxed loads: the
/// caller has just issued a full fence.
GV_HOST_DEVICE bool has_work(const QpContext* q) {
    uint32_t pi = mlx5::from_be32(atom::load_relaxed(&q->dbrec[MLX5_SND_DBR], q->sys != 0)) & 0xffff;
    unsigned long long ci = atom::load_relaxed(&q->sq_ci);
    if (((pi - uint32_t(ci)) & 0xffff) == 0) return false;
    QpState s = load_state_relaxed(q);
    if (!sends_allowed(s) && !in_error(s)) return false;
    return !atom::load_relaxed(&q->rnr_waiting) || atom::now_ns() >= q->rnr_deadline;
}

/// Runs a QP's published work if no other group is running it. Called by every thread of
/// the group after the doorbell record was updated.
template <typename G>
GV_HOST_DEVICE void progress(QpContext* q, const G& g) {
    for (;;) {
        uint32_t got = 0;
        if (g.leader()) {
            // Dekker hand-off with the releasing holder: our doorbell-record store, then
            // this full fence, then the lock read; the holder stores the lock, fences,
            // then reads the record. One of the two sees the other's store.
            atom::fence_seq_cst();
            uint32_t expect = 0;
            got = atom::cas(&q->lock, expect, 1u) ? 1 : 0;
        }
        if (!g.bcast(got)) return;  // the holder will run what we published
        uint32_t why = drain(q, g);
        uint32_t again = 0;
        if (g.leader()) {
            atom::store_release(&q->lock, 0u);
            atom::fence_seq_cst();
            again = (why != kRnrWait && has_work(q)) ? 1 : 0;
        }
        if (!g.bcast(again)) return;
    }
}

/// True when a waiter on this QP should drive it: it waits for a receive on the peer, or
/// it sits in ERROR with WQEs left to flush.
GV_HOST_DEVICE bool needs_progress(const QpContext* q) {
    if (atom::load_acquire(&q->rnr_waiting)) return true;
    if (load_state(q) != QpState::Error) return false;
    uint32_t pi = mlx5::read_sq_dbrec(q->dbrec, q->sys != 0);
    return ((pi - uint32_t(atom::load_acquire(&q->sq_ci))) & 0xffff) != 0 ||
           rq_pending(q, atom::load_acquire(&q->rq_ci)) != 0;
}

}  // namespace gv::detail::soft
