// The software RDMA device's executor: consumes mlx5 WQEs exactly as a ConnectX would.
//
// Written once for CUDA thread groups and CPU threads. Whoever rings a QP's doorbell
// (commits) tries to take the QP's execution lock; the holder drains every WQE published
// on the QP in order, then re-checks for work published while it held the lock, so two
// committers never reorder a QP and no published WQE is left behind. The group's leader
// parses and validates each WQE and fills a copy plan; every thread of the group copies
// its share; a fence and a group barrier separate consecutive WQEs (RC ordering).
#pragma once

#include <cstring>

#include "gpuverbs/device/atomic.cuh"
#include "gpuverbs/mlx5/cqe.cuh"
#include "gpuverbs/mlx5/wqe.cuh"
#include "gpuverbs/soft/state.cuh"

namespace gv::soft {

// ---- execution groups ---------------------------------------------------------------

/// One thread executes alone (a CPU thread, or a CUDA thread that commits by itself).
struct ThreadGroup {
    GV_HOST_DEVICE uint32_t rank() const { return 0; }
    GV_HOST_DEVICE uint32_t size() const { return 1; }
    GV_HOST_DEVICE bool leader() const { return true; }
    GV_HOST_DEVICE void sync() const {}
    GV_HOST_DEVICE uint64_t bcast(uint64_t v) const { return v; }
};

#if defined(__CUDACC__)
/// The active lanes of a warp execute together; the lowest active lane leads.
struct WarpGroup {
    unsigned mask;
    uint32_t r, n, lead;
    __device__ WarpGroup() {
        mask = __activemask();
        uint32_t lane = threadIdx.x & 31;  // lanes are numbered within the warp
        asm("mov.u32 %0, %%laneid;" : "=r"(lane));
        r = __popc(mask & ((1u << lane) - 1));
        n = __popc(mask);
        lead = __ffs(mask) - 1;
    }
    __device__ uint32_t rank() const { return r; }
    __device__ uint32_t size() const { return n; }
    __device__ bool leader() const { return r == 0; }
    __device__ void sync() const { __syncwarp(mask); }
    __device__ uint64_t bcast(uint64_t v) const {
        // __syncwarp orders the leader's earlier memory writes (the plan) before the
        // other lanes' reads; the shuffle alone does not.
        __syncwarp(mask);
        return __shfl_sync(mask, (unsigned long long)v, lead);
    }
};

/// Every thread of the block executes together; thread 0 leads.
struct BlockGroup {
    __device__ uint32_t rank() const {
        return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    }
    __device__ uint32_t size() const { return blockDim.x * blockDim.y * blockDim.z; }
    __device__ bool leader() const { return rank() == 0; }
    __device__ void sync() const { __syncthreads(); }
    __device__ uint64_t bcast(uint64_t v) const {
        __shared__ unsigned long long slot;
        __syncthreads();  // earlier readers of slot are done
        if (leader()) slot = v;
        __syncthreads();  // also orders the leader's plan writes before everyone's reads
        return slot;
    }
};
#endif

// ---- cooperative copy ---------------------------------------------------------------

template <typename T, typename G>
GV_HOST_DEVICE void copy_words(const G& g, T* d, const T* s, uint64_t n) {
    const uint64_t step = g.size();
    uint64_t i = g.rank();
    // Four independent loads in flight per thread before the stores.
    for (; i + 3 * step < n; i += 4 * step) {
        T a = s[i], b = s[i + step], c = s[i + 2 * step], e = s[i + 3 * step];
        d[i] = a;
        d[i + step] = b;
        d[i + 2 * step] = c;
        d[i + 3 * step] = e;
    }
    for (; i < n; i += step) d[i] = s[i];
}

#if defined(__CUDACC__)
/// Copies a short range (head or tail of a copy) alone, in the widest aligned stores the
/// mutual alignment `unit` allows, so an aligned 2-, 4- or 8-byte value (a flag) is never
/// written byte by byte: a poller sees it change at once, as with a NIC's DMA.
__device__ __forceinline__ void copy_small(uint8_t* d, const uint8_t* s, uint64_t n, uint32_t unit) {
    while (n) {
        const uintptr_t a = reinterpret_cast<uintptr_t>(d);
        if (unit >= 8 && n >= 8 && !(a & 7)) {
            *reinterpret_cast<uint64_t*>(d) = *reinterpret_cast<const uint64_t*>(s);
            d += 8, s += 8, n -= 8;
        } else if (unit >= 4 && n >= 4 && !(a & 3)) {
            *reinterpret_cast<uint32_t*>(d) = *reinterpret_cast<const uint32_t*>(s);
            d += 4, s += 4, n -= 4;
        } else if (unit >= 2 && n >= 2 && !(a & 1)) {
            *reinterpret_cast<uint16_t*>(d) = *reinterpret_cast<const uint16_t*>(s);
            d += 2, s += 2, n -= 2;
        } else {
            *d++ = *s++;
            --n;
        }
    }
}
#endif

/// The group copies len bytes from src to dst (executor pointers). Returns whether the
/// calling thread stored anything (only those threads need to fence).
template <typename G>
GV_HOST_DEVICE bool group_copy(const G& g, uint64_t dst, uint64_t src, uint64_t len) {
    if (len == 0) return false;
#if GV_DEVICE_CODE
    auto* d = reinterpret_cast<uint8_t*>(dst);
    const auto* s = reinterpret_cast<const uint8_t*>(src);
    const uint64_t x = dst ^ src;
    const uint32_t unit = (x & 15) == 0 ? 16 : (x & 7) == 0 ? 8 : (x & 3) == 0 ? 4 : (x & 1) == 0 ? 2 : 1;
    // Head up to the unit's alignment and tail after the last whole unit: one thread, in
    // the widest aligned stores; the units in between: the whole group.
    uint64_t head = (unit - (dst & (unit - 1))) & (unit - 1);
    if (head > len) head = len;
    const uint64_t words = (len - head) / unit;
    const uint64_t tail = len - head - words * unit;
    if (g.rank() == 0 && head) copy_small(d, s, head, unit);
    uint8_t* bd = d + head;
    const uint8_t* bs = s + head;
    switch (unit) {
        case 16: copy_words(g, reinterpret_cast<uint4*>(bd), reinterpret_cast<const uint4*>(bs), words); break;
        case 8: copy_words(g, reinterpret_cast<uint64_t*>(bd), reinterpret_cast<const uint64_t*>(bs), words); break;
        case 4: copy_words(g, reinterpret_cast<uint32_t*>(bd), reinterpret_cast<const uint32_t*>(bs), words); break;
        case 2: copy_words(g, reinterpret_cast<uint16_t*>(bd), reinterpret_cast<const uint16_t*>(bs), words); break;
        default: copy_words(g, bd, bs, words); break;
    }
    if (tail && g.rank() == 0) copy_small(bd + words * unit, bs + words * unit, tail, unit);
    // Threads store only when their rank is below the number of pieces (all < len).
    return g.rank() < len;
#else
    (void)g;
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), len);
    return true;
#endif
}

// ---- memory-region checks -----------------------------------------------------------

GV_HOST_DEVICE const MrEntry* mr_lookup(const MrTable& t, uint32_t key) {
    uint32_t idx = key >> 8;
    if (t.entries == nullptr || idx >= t.capacity) return nullptr;
    const MrEntry* e = &t.entries[idx];
    // Relaxed: registration completed (host side) before the key was handed to posters.
    if (!atom::load_relaxed(&e->valid) || e->key != key) return nullptr;
    return e;
}

/// True when table t belongs to another process than the executing QP q (whose own table is
/// local_mrs): then only regions in the owner's shared arena may be touched, a private
/// address of another process means nothing here.
GV_HOST_DEVICE bool mr_foreign(const MrTable& t, const QpState* q) { return t.owner != q->local_mrs.owner; }

/// True when q's peer belongs to q's own process. An executor runs only its own process's
/// QPs: another process's WQEs point at that process's private memory too. Reads q's own
/// state only (remote_mrs is q's copy of the peer's table descriptor): after a peer process
/// died nothing of it needs to be read.
GV_HOST_DEVICE bool peer_in_process(const QpState* q) { return q->remote_mrs.owner == q->local_mrs.owner; }

/// The last region the leader resolved in a table: consecutive WQEs mostly use the same
/// keys, and each lookup is a dependent chain of memory loads.
struct MrCache {
    const MrEntry* tab = nullptr;
    uint32_t key = 0;
    uint32_t pd = 0, access = 0, sys = 0, shared = 0;
    uint64_t addr = 0, length = 0;
    int64_t xlate = 0;
};

GV_HOST_DEVICE uint64_t mr_resolve_cached(const MrTable& t, MrCache& c, uint32_t key, uint32_t pd,
                                          uint64_t addr, uint64_t len, uint32_t need, uint32_t* sys,
                                          bool foreign = false) {
    if (c.tab != t.entries || c.key != key || !c.tab) {
        const MrEntry* e = mr_lookup(t, key);
        if (!e) return 0;
        c.tab = t.entries;
        c.key = key;
        c.pd = e->pd;
        c.access = e->access;
        c.sys = e->sys;
        c.shared = e->shared;
        c.addr = e->addr;
        c.length = e->length;
        c.xlate = e->xlate;
    }
    if (c.pd != pd || (c.access & need) != need) return 0;
    if (foreign && !c.shared) return 0;
    if (addr < c.addr || len > c.length || addr - c.addr > c.length - len) return 0;
    if (sys) *sys |= c.sys;
    uint64_t p = uint64_t(int64_t(addr) + c.xlate);
    return p ? p : 1;
}

/// What the group's leader remembers across the WQEs of one drain, so that the doorbell
/// record, QP states and regions are not re-read (with acquire loads) for every WQE.
struct LeaderCache {
    uint32_t pending = 0;  ///< WQEBBs known to be published past sq_ci
    uint32_t batches = 0;  ///< doorbell-record reads so far
    unsigned long long ci = 0;  ///< sq_ci as the leader advances it
    uint32_t state = 0;
    bool peer_ok = false;
    QpState* r = nullptr;
    MrCache local, remote;
};

// ---- completions --------------------------------------------------------------------

struct CqeFields {
    uint8_t cqe_opcode;
    uint8_t syndrome;
    uint8_t wqe_opcode;
    uint16_t wqe_counter;
    uint32_t qpn;
    uint32_t byte_cnt;
    uint32_t imm_be;
    uint32_t rqpn;
};

/// Writes one CQE. Returns false when the ring is full (overrun): the completion is
/// lost, as on a NIC, and the CQ is marked so pollers report it.
GV_HOST_DEVICE bool cq_push(CqState* cq, const CqeFields& f) {
    const uint32_t cnt = 1u << cq->log_cnt;
    // Slot reservation: several executors may complete into one CQ at once.
    unsigned long long slot = atom::fetch_add(&cq->prod, 1ull);
    // The consumer publishes how far it has read in the doorbell record (24 bits); the
    // slot is free when fewer than cnt entries are unread. Differences are taken modulo
    // 2^24, exact while cnt <= 2^23.
    uint32_t ci = mlx5::from_be32(atom::load_acquire(&cq->dbrec[mlx5::kCqSetCi], cq->sys != 0)) &
                  0xffffff;
    if (((uint32_t(slot) - ci) & 0xffffff) >= cnt) {
        atom::store_release(cq->overrun, 1u, cq->sys != 0);
        return false;
    }
    uint32_t w[16] = {};
    if (f.cqe_opcode == MLX5_CQE_REQ_ERR || f.cqe_opcode == MLX5_CQE_RESP_ERR) {
        mlx5_err_cqe e;
        std::memset(&e, 0, sizeof(e));
        e.syndrome = f.syndrome;
        e.s_wqe_opcode_qpn = mlx5::to_be32((uint32_t(f.wqe_opcode) << 24) | (f.qpn & 0xffffff));
        std::memcpy(w, &e, sizeof(e));
    } else {
        mlx5_cqe64 c;
        std::memset(&c, 0, sizeof(c));
        c.imm_inval_pkey = f.imm_be;
        c.byte_cnt = mlx5::to_be32(f.byte_cnt);
        c.sop_drop_qpn = mlx5::to_be32((uint32_t(f.wqe_opcode) << 24) | (f.qpn & 0xffffff));
        c.flags_rqpn = mlx5::to_be32(f.rqpn & 0xffffff);
        std::memcpy(w, &c, sizeof(c));
    }
    auto* dst = reinterpret_cast<uint32_t*>(&cq->cqes[slot & (cnt - 1)]);
    for (int i = 0; i < 15; ++i) atom::store_relaxed(&dst[i], w[i], cq->sys != 0);
    // The last word holds wqe_counter, signature and op_own. Release: the consumer that
    // acquires op_own sees the other 60 bytes.
    uint8_t owner = uint8_t((slot >> cq->log_cnt) & 1);
    uint8_t op_own = uint8_t((f.cqe_opcode << 4) | owner);
    uint32_t last = uint32_t(mlx5::to_be16(f.wqe_counter)) | (uint32_t(op_own) << 24);
    atom::store_release(&dst[15], last, cq->sys != 0);
    return true;
}

// ---- receive queue ------------------------------------------------------------------

GV_HOST_DEVICE const mlx5_wqe_data_seg* rq_wqe(const QpState* q, unsigned long long idx) {
    uint64_t mask = (1ull << q->rq_log_cnt) - 1;
    return reinterpret_cast<const mlx5_wqe_data_seg*>(q->rq + ((idx & mask) << q->rq_log_stride));
}

/// Posted but unconsumed receive WQEs (the producer index is 16 bits in the dbrec).
GV_HOST_DEVICE uint32_t rq_pending(const QpState* q, unsigned long long ci) {
    return (mlx5::read_rq_dbrec(q->dbrec, q->sys != 0) - uint32_t(ci)) & 0xffff;
}

/// Completes every posted receive of a QP in ERROR with WR_FLUSH_ERR.
GV_HOST_DEVICE void flush_rq(QpState* q) {
    for (;;) {
        unsigned long long c = atom::load_acquire(&q->rq_ci);
        if (rq_pending(q, c) == 0) return;
        if (!atom::cas(&q->rq_ci, c, c + 1)) continue;
        CqeFields f{};
        f.cqe_opcode = MLX5_CQE_RESP_ERR;
        f.syndrome = MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
        f.wqe_counter = uint16_t(c);
        f.qpn = q->qpn;
        cq_push(q->rcq, f);
    }
}

GV_HOST_DEVICE void enter_error(QpState* q, uint32_t syndrome) {
    uint32_t expect = 0;
    atom::cas(&q->syndrome, expect, syndrome);
    atom::store_release(&q->state, uint32_t(kErr));
    flush_rq(q);
}

// ---- the send-queue executor --------------------------------------------------------

enum Action : uint32_t {
    kStop = 0,     ///< nothing (more) to execute now
    kExecute = 1,  ///< copy the plan's segments, then finish the WQE
    kRnrWait = 2,  ///< the WQE at sq_ci waits for a receive on the peer
};

GV_HOST_DEVICE uint8_t* sq_seg(const QpState* q, unsigned long long pos_bb, uint32_t k) {
    uint64_t ring = 64ull << q->sq_log_bb;
    return q->sq + ((pos_bb * 64 + uint64_t(k) * 16) & (ring - 1));
}


/// Validates the WQE at sq_ci and plans its data movement. Leader only.
GV_HOST_DEVICE uint32_t prepare(QpState* q, LeaderCache& lc, Plan& p) {
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
        lc.state = atom::load_relaxed(&q->state);
        // In ERROR every WQE flushes without the peer: a peer process that died is not read.
        lc.r = (lc.state == kRts || lc.state == kSqd) ? q->remote : nullptr;
        uint32_t rstate = lc.r ? atom::load_relaxed(&lc.r->state) : 0u;
        lc.peer_ok = lc.r && lc.r->remote == q && (rstate == kRtr || rstate == kRts || rstate == kSqd);
    }
    const uint32_t pending = lc.pending;
    const uint32_t state = lc.state;
    if (state != kRts && state != kSqd && state != kErr && state != kSqe) {
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
    if (state == kErr || state == kSqe) {
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
    QpState* r = lc.r;
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
GV_HOST_DEVICE void finish(QpState* q, LeaderCache& lc, const Outcome& o) {
    QpState* r = lc.r;
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
        lc.state = kErr;
    }
}

/// WQEs moving at most this many bytes are executed by the group's leader alone, with no
/// group barrier: a barrier costs more than the leader's few loads and stores.
inline constexpr uint64_t kLeaderBytes = 128;

/// Executes published WQEs until none is left (or one waits for a receive). The calling
/// group holds the QP's lock. Small WQEs run in the leader alone; a large one is handed to
/// the whole group through q->plan.
template <typename G>
GV_HOST_DEVICE uint32_t drain(QpState* q, const G& g) {
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
GV_HOST_DEVICE bool has_work(const QpState* q) {
    uint32_t pi = mlx5::from_be32(atom::load_relaxed(&q->dbrec[MLX5_SND_DBR], q->sys != 0)) & 0xffff;
    unsigned long long ci = atom::load_relaxed(&q->sq_ci);
    if (((pi - uint32_t(ci)) & 0xffff) == 0) return false;
    uint32_t s = atom::load_relaxed(&q->state);
    if (s != kRts && s != kSqd && s != kErr && s != kSqe) return false;
    return !atom::load_relaxed(&q->rnr_waiting) || atom::now_ns() >= q->rnr_deadline;
}

/// Runs a QP's published work if no other group is running it. Called by every thread of
/// the group after the doorbell record was updated.
template <typename G>
GV_HOST_DEVICE void progress(QpState* q, const G& g) {
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
GV_HOST_DEVICE bool needs_progress(const QpState* q) {
    if (atom::load_acquire(&q->rnr_waiting)) return true;
    uint32_t s = atom::load_acquire(&q->state);
    if (s != kErr) return false;
    uint32_t pi = mlx5::read_sq_dbrec(q->dbrec, q->sys != 0);
    return ((pi - uint32_t(atom::load_acquire(&q->sq_ci))) & 0xffff) != 0 ||
           rq_pending(q, atom::load_acquire(&q->rq_ci)) != 0;
}

}  // namespace gv::soft
