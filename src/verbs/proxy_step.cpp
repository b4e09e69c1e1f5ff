// One step of a verbs QP by its holder (ProxyStep, proxy.hpp): the device's completions
// written back as CQEs, the rings' receive and send WQEs translated and posted, and what is
// left flushed in ERROR. The threads and the hand-over between holders: proxy.cpp.
#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "cuda/cuda_rt.hpp"
#include "gpuverbs/device/atomic.cuh"
#include "verbs/proxy.hpp"
#include "verbs/status.hpp"

namespace gv::detail::verbs {

// ---- one QP's step ------------------------------------------------------------------------

size_t ProxyStep::step(ProxyQp& p) {
    // The state the host last moved the QP to (or ERROR from this thread). Acquire: the
    // host's device-side transition (ibv_modify_qp) happened before its release store.
    const QpState st = QpState(atom::load_acquire(p.state, true));
    if (!p.error && (st == QpState::Error || st == QpState::Sqe)) enter_error(p, 0, false);  // the user's to_error
    // Receives first (a SEND this step posts may bring the peer's answer, which needs them),
    // then the sends, then the completions: a WQE just committed reaches the device before the
    // poll of earlier work (ibv_poll_cq, the CQEs it makes), which used to stand on the path of
    // every message (a ping-pong's every WRITE: the last work request of a list is signaled, so
    // each one's completion waits in the CQ when the next is committed). What the poll frees (the
    // device's queue, the track ring) lets held-back sends go in the same step.
    size_t work = post_recvs(p, st);
    work += post_sends(p, st);
    if (p.send_inflight || p.recv_inflight) {
        const size_t polled = poll(p);
        work += polled;
        if (polled) work += post_sends(p, st);
    }
    p.note_quiet();
    return work;
}

void ProxyStep::push(ProxyQp& p, CqRing* cq, const mlx5::CqeFields& f) {
    bump(ctr_.cqes);
    // A full CQ loses the completion and moves the QP to ERROR, as on the software device.
    if (!cq->push(f)) enter_error(p, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, true);
}

void ProxyStep::enter_error(ProxyQp& p, uint8_t syndrome, bool move_device) {
    // The first cause is kept (0: the user moved it there; a flush names no cause).
    if (syndrome && syndrome != MLX5_CQE_SYNDROME_WR_FLUSH_ERR) {
        uint32_t expect = 0;
        __atomic_compare_exchange_n(p.syndrome, &expect, uint32_t(syndrome), false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED);
    }
    if (p.error) return;
    p.error = true;
    p.halted = false;
    // The device's QP first (what is in flight then flushes), so that whoever sees ERROR in
    // the state word, or the error CQE written after it, finds QueuePair::state() ERROR too.
    if (move_device) {
        try {
            p.port->to_error();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "gpuverbs proxy: moving QP 0x%x to ERROR failed: %s\n", p.q.qpn, e.what());
        }
    }
    // Release: device code that sees ERROR sees the syndrome written before it.
    atom::store_release(p.state, uint32_t(QpState::Error), true);
}

// ---- completions ----------------------------------------------------------------------------

size_t ProxyStep::poll(ProxyQp& p) {
    const int n = p.port->poll(int(kProxyBatch), s_.wc.get());
    if (n < 0) {
        std::fprintf(stderr, "gpuverbs proxy: polling the CQ of QP 0x%x failed (errno %d): the QP goes to ERROR\n",
                     p.q.qpn, -n);
        enter_error(p, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, true);
        return 0;
    }
    bump(ctr_.completions, uint64_t(n));
    if (p.gpudirect_flush_gpu >= 0 && n > 0 && batch_wrote_local(p, n)) flush_gpudirect(p);
    for (int i = 0; i < n; ++i) {
        if (wr_is_recv(s_.wc[i].wr_id)) on_recv(p, s_.wc[i]);
        else on_send(p, s_.wc[i]);
    }
    return size_t(n);
}

namespace {
/// Work whose completion means the device wrote local memory: a READ's or atomic's result.
bool writes_local(uint8_t mlx5_opcode) {
    return mlx5_opcode == MLX5_OPCODE_RDMA_READ || mlx5_opcode == MLX5_OPCODE_ATOMIC_CS ||
           mlx5_opcode == MLX5_OPCODE_ATOMIC_FA || mlx5_opcode == MLX5_OPCODE_ATOMIC_MASKED_CS ||
           mlx5_opcode == MLX5_OPCODE_ATOMIC_MASKED_FA;
}
}  // namespace

// Whether the first n polled completions retire work that wrote local memory: a successful
// receive (a SEND's or WRITE-with-immediate's data), or a successful send completion that
// retires (itself, or the unsignaled work before it, in RC order) a READ or an atomic.
bool ProxyStep::batch_wrote_local(const ProxyQp& p, int n) const {
    const uint64_t cap = p.track.size();
    uint64_t h = p.head;
    for (int i = 0; i < n; ++i) {
        const ibv_wc& wc = s_.wc[i];
        if (wc.status != IBV_WC_SUCCESS) continue;  // errors and flushes wrote nothing to wait for
        if (wr_is_recv(wc.wr_id)) return true;
        const uint64_t pos = wr_pos_near(wc.wr_id, p.sq_ci);
        while (h != p.tail) {
            const ProxyQp::Track& e = p.track[h & (cap - 1)];
            ++h;
            if (e.kind == SendKind::Post && writes_local(e.opcode)) return true;
            if (e.pos == pos) break;
        }
    }
    return false;
}

// The device's writes into GPU memory that these completions announce reach the GPU's
// kernels before the CQEs do: the NIC wrote the data, then its completion, and the proxy saw
// the completion; without the GPU's own ordering (VerbsOptions::gpudirect_flush) the data may
// still be in flight towards GPU memory, so the flush comes between the poll and the CQEs.
// A failed flush moves the QP to ERROR (its data cannot be vouched for); the completions of
// this batch are still written, after the state.
void ProxyStep::flush_gpudirect(ProxyQp& p) {
    try {
        cuda::flush_gpudirect_writes(p.gpudirect_flush_gpu);
        bump(ctr_.gpudirect_flushes);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gpuverbs proxy: QP 0x%x: flushing GPUDirect writes failed: %s; the QP goes to ERROR\n",
                     p.q.qpn, e.what());
        enter_error(p, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, true);
    }
}

// A WQE completed without a completion of its own: unsignaled work requests before a
// signaled one (they succeeded with it) or before a flushed one on a provider that flushes
// only some (they were flushed: errors always complete), and NOPs.
void ProxyStep::complete_implicit(ProxyQp& p, const ProxyQp::Track& e, uint8_t syndrome) {
    if (syndrome || e.user_signaled) push(p, p.scq, local_send_cqe(p.q.qpn, e.pos, e.opcode, syndrome));
}

void ProxyStep::on_send(ProxyQp& p, const ibv_wc& wc) {
    const uint64_t pos = wr_pos_near(wc.wr_id, p.sq_ci);
    // RC completes in order: whatever precedes this work request is done. Before a success or
    // the first error it succeeded; before a flush it was flushed.
    const uint8_t before = wc.status == IBV_WC_WR_FLUSH_ERR ? uint8_t(MLX5_CQE_SYNDROME_WR_FLUSH_ERR) : 0;
    while (p.head != p.tail) {
        ProxyQp::Track& e = p.track[p.head & (p.track.size() - 1)];
        if (e.pos == pos || e.kind == SendKind::Malformed) break;  // nothing is posted past a malformed one
        if (e.kind == SendKind::Post) --p.send_inflight;
        complete_implicit(p, e, before);
        ++p.head;
    }
    if (p.head == p.tail || p.track[p.head & (p.track.size() - 1)].pos != pos) {
        std::fprintf(stderr, "gpuverbs proxy: QP 0x%x: a completion for WQE position %llu, which is not in flight\n",
                     p.q.qpn, static_cast<unsigned long long>(pos));
        return;
    }
    const ProxyQp::Track e = p.track[p.head & (p.track.size() - 1)];
    ++p.head;
    --p.send_inflight;
    if (wc.status == IBV_WC_SUCCESS) {
        if (e.user_signaled) push(p, p.scq, send_cqe(wc, p.q.qpn, e.pos, e.opcode, e.byte_len));
    } else {
        // The device moved the QP to ERROR itself. State first, then the error CQE.
        enter_error(p, wc_status_to_syndrome(wc.status), false);
        push(p, p.scq, send_cqe(wc, p.q.qpn, e.pos, e.opcode, e.byte_len));
    }
    complete_head(p);
}

void ProxyStep::on_recv(ProxyQp& p, const ibv_wc& wc) {
    const uint64_t index = wr_pos_near(wc.wr_id, p.rq_ci);
    --p.recv_inflight;
    if (wc.status != IBV_WC_SUCCESS) enter_error(p, wc_status_to_syndrome(wc.status), false);
    push(p, p.rcq, recv_cqe(wc, p.q.qpn, index));
}

// The WQEs at the head that need no device completion: NOPs (done once everything before
// them is), and a malformed WQE (its error CQE, then ERROR).
void ProxyStep::complete_head(ProxyQp& p) {
    while (p.head != p.tail) {
        const ProxyQp::Track e = p.track[p.head & (p.track.size() - 1)];
        if (e.kind == SendKind::Post) return;
        ++p.head;
        if (e.kind == SendKind::Nop) {
            complete_implicit(p, e, p.error ? uint8_t(MLX5_CQE_SYNDROME_WR_FLUSH_ERR) : 0);
            continue;
        }
        // Malformed. In ERROR it is flushed like the rest (one larger than what was published
        // still reports LOCAL_QP_OP_ERR, as on the software device).
        uint8_t syn = e.syndrome;
        if (p.error && !e.oversize) syn = MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
        // The device's QP to ERROR first (receives in flight flush), then the state, then the
        // CQE: device code that polls the error finds the QP in ERROR.
        enter_error(p, syn, true);
        push(p, p.scq, local_send_cqe(p.q.qpn, e.pos, e.opcode, syn));
    }
}

// ---- posting --------------------------------------------------------------------------------

size_t ProxyStep::post_sends(ProxyQp& p, QpState st) {
    if (p.error) return flush_sends(p);
    if (st != QpState::Rts && st != QpState::Sqd) return 0;  // held until RTS, as on the device
    // Ordering, GPU to proxy. A poster writes its WQE (plain stores into pinned host memory),
    // publishes it with a system-scope release (sq_ready), and the committer moves the
    // doorbell record with a CAS between system-scope fences (mlx5::advance_dbrec): the
    // fence orders every WQE store the committer observed (cumulativity) before the record's
    // store, and PCIe delivers the GPU's posted writes to host memory in that order. Here an
    // acquire load of the record (x86: a plain load, never reordered with later loads; the
    // compiler keeps the WQE loads after it) then the WQE loads: every WQE the record covers
    // is seen whole. The same holds for a CPU poster (release CAS, acquire load).
    const uint32_t pi = mlx5::read_sq_dbrec(p.q.dbrec, true);
    // The record holds the producer index's low 16 bits; rings are at most 2^15 WQEBBs, so the
    // difference modulo 2^16 is the published count.
    uint32_t published = (pi - uint32_t(p.sq_ci)) & 0xffff;
    if (!published) return 0;
    const SendLimits lim{p.q.qpn, p.q.max_inline, p.max_send_sge};
    const uint64_t cap = p.track.size();
    uint32_t n = 0;
    size_t read = 0;
    ibv_send_wr* prev = nullptr;
    while (published && !p.halted && n < kProxyBatch && p.tail - p.head < cap) {
        SendSlot& s = s_.sslot[n];
        const SendTranslation t = translate_send(p.q.sq, p.q.sq_log_bb, p.sq_ci, published, lim, s,
                                                 s_.inl.get() + size_t(n) * kMaxInlineCopy);
        if (t.kind == SendKind::Post) {
            // Backpressure: never more in flight than the verbs QP was granted. The WQE stays
            // in the ring (its slot is not retired) and is read again once room frees.
            if (p.send_inflight >= p.max_send_wr) {
                bump(ctr_.backpressure);
                break;
            }
            // Selective signaling: unsignaled work requests free their send-queue slots only
            // when a later signaled one completes, so a run of them is signaled internally
            // every sig_interval (half the granted depth): the queue never fills with work
            // nobody will hear about. Internal completions make no CQE (wr_id says so).
            if (s.wr.send_flags & IBV_SEND_SIGNALED) {
                p.unsignaled = 0;
            } else if (++p.unsignaled >= p.sig_interval) {
                s.wr.send_flags |= IBV_SEND_SIGNALED;
                p.unsignaled = 0;
            }
            s.wr.next = nullptr;
            if (prev) prev->next = &s.wr;
            prev = &s.wr;
            ++n;
            ++p.send_inflight;
        } else if (t.kind == SendKind::Malformed) {
            p.halted = true;  // completed (error CQE, ERROR) once everything before it is
        }
        ProxyQp::Track& e = p.track[p.tail & (cap - 1)];
        e = ProxyQp::Track{p.sq_ci, t.bbs, t.byte_len, t.kind, t.opcode, t.syndrome, t.user_signaled, t.oversize};
        ++p.tail;
        p.sq_ci += t.bbs;
        published -= t.bbs;
        ++read;
    }
    bump(ctr_.send_wqes, read);
    // The last work request of every list is signaled (internally if the WQE did not ask):
    // then whatever is in flight is followed by a completion, and a NOP or malformed WQE read
    // after it (completed here once everything before it is) never waits for work that may
    // never come. One completion per list at most, which the proxy drops.
    if (prev && !(prev->send_flags & IBV_SEND_SIGNALED)) {
        prev->send_flags |= IBV_SEND_SIGNALED;
        p.unsignaled = 0;
    }
    if (n) {
        ibv_send_wr* bad = nullptr;
        bump(ctr_.post_calls);
        const int rc = p.port->post_send(&s_.sslot[0].wr, &bad);
        if (rc) rewind_sends(p, bad, rc);
        else bump(ctr_.send_wrs, n);
    }
    complete_head(p);
    return read;
}

// ibv_post_send took the list up to `bad`: the rest was not posted. Those WQEs are forgotten
// here and read again from the ring (they are not retired: their slots hold them).
void ProxyStep::rewind_sends(ProxyQp& p, const ibv_send_wr* bad, int rc) {
    const uint64_t cap = p.track.size();
    const uint64_t from = wr_pos_near(bad ? bad->wr_id : s_.sslot[0].wr.wr_id, p.sq_ci);
    uint64_t posted = 0;
    while (p.tail != p.head && p.track[(p.tail - 1) & (cap - 1)].pos >= from) {
        --p.tail;
        const ProxyQp::Track& e = p.track[p.tail & (cap - 1)];
        if (e.kind == SendKind::Post) --p.send_inflight;
        if (e.kind == SendKind::Malformed) p.halted = false;
    }
    if (bad)
        for (const ibv_send_wr* w = &s_.sslot[0].wr; w && w != bad; w = w->next) ++posted;
    bump(ctr_.send_wrs, posted);
    p.sq_ci = from;
    p.unsignaled = p.sig_interval;  // the next one is signaled: nothing relies on what was lost
    if (rc == ENOMEM) {  // the device's queue is full after all: try again later
        bump(ctr_.backpressure);
        return;
    }
    QpState s = QpState::Error;
    try {
        s = p.port->state();
    } catch (const std::exception&) {
    }
    if (s == QpState::Error || s == QpState::Sqe) {
        enter_error(p, 0, false);  // the device moved it (its error completion names why)
        return;
    }
    if (s != QpState::Rts) return;  // being moved by the host: the state word follows
    // The provider refused this work request in RTS (EINVAL: something the WQE format allows
    // and the device does not): it fails as a malformed WQE would.
    const mlx5::WqeReader w(p.q.sq, p.q.sq_log_bb, from);
    p.track[p.tail & (cap - 1)] = ProxyQp::Track{from, w.bbs(), 0, SendKind::Malformed, w.opcode(),
                                                 uint8_t(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR), w.signaled(), false};
    ++p.tail;
    p.sq_ci = from + w.bbs();
    p.halted = true;
    std::fprintf(stderr, "gpuverbs proxy: QP 0x%x: the device refused the work request of WQE %llu (errno %d): "
                 "it completes with LOCAL_QP_OP_ERR\n", p.q.qpn, static_cast<unsigned long long>(from), rc);
}

size_t ProxyStep::post_recvs(ProxyQp& p, QpState st) {
    if (p.error) return flush_recvs(p);
    // Receives are taken from INIT on (a peer's early SEND finds them), not in RESET.
    if (st == QpState::Reset) return 0;
    // Acquire: the receive WQEs the record covers are seen whole (the ordering argument of
    // post_sends: post_recv publishes with a release and moves the record with a CAS).
    const uint32_t pi = mlx5::read_rq_dbrec(p.q.dbrec, true);
    uint32_t pending = (pi - uint32_t(p.rq_ci)) & 0xffff;
    if (!pending) return 0;
    const uint64_t cnt = 1ull << p.q.rq_log_cnt;
    uint32_t n = 0;
    bool bad_wqe = false;
    ibv_recv_wr* prev = nullptr;
    while (pending && n < kProxyBatch) {
        if (p.recv_inflight >= p.max_recv_wr) {
            bump(ctr_.backpressure);
            break;
        }
        const uint8_t* wqe = p.q.rq + ((p.rq_ci & (cnt - 1)) << p.q.rq_log_stride);
        RecvSlot& s = s_.rslot[n];
        if (!translate_recv(wqe, p.rq_stride, p.rq_ci, p.max_recv_sge, s)) {
            bad_wqe = true;  // more entries than the verbs QP takes
            break;
        }
        if (prev) prev->next = &s.wr;
        prev = &s.wr;
        ++n;
        ++p.recv_inflight;
        ++p.rq_ci;
        --pending;
    }
    if (n) {
        ibv_recv_wr* bad = nullptr;
        bump(ctr_.post_calls);
        const int rc = p.port->post_recv(&s_.rslot[0].wr, &bad);
        uint32_t posted = n;
        if (rc) {
            const uint64_t from = bad ? wr_pos_near(bad->wr_id, p.rq_ci) : p.rq_ci - n;
            posted = uint32_t(n - (p.rq_ci - from));
            p.recv_inflight -= uint32_t(p.rq_ci - from);
            p.rq_ci = from;
            bad_wqe = false;
            QpState s = QpState::Error;
            try {
                s = p.port->state();
            } catch (const std::exception&) {
            }
            if (s == QpState::Error || s == QpState::Sqe) enter_error(p, 0, false);
            else if (rc == ENOMEM) bump(ctr_.backpressure);
        }
        bump(ctr_.recv_wrs, posted);
    }
    if (bad_wqe) enter_error(p, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, true);
    return n;
}

// In ERROR: once nothing is in flight (the device flushed it), every WQE published since is
// completed here with WR_FLUSH_ERR, in order, never posted.
size_t ProxyStep::flush_sends(ProxyQp& p) {
    if (p.head != p.tail) {
        complete_head(p);
        if (p.head != p.tail) return 0;
    }
    const uint32_t pi = mlx5::read_sq_dbrec(p.q.dbrec, true);  // acquire, as in post_sends
    uint32_t published = (pi - uint32_t(p.sq_ci)) & 0xffff;
    size_t k = 0;
    while (published && k < kProxyBatch) {
        const mlx5::WqeReader w(p.q.sq, p.q.sq_log_bb, p.sq_ci);
        const bool fits = w.fits(published);
        const uint32_t bbs = fits ? w.bbs() : 1;
        push(p, p.scq, local_send_cqe(p.q.qpn, p.sq_ci, w.opcode(),
                                      fits ? uint8_t(MLX5_CQE_SYNDROME_WR_FLUSH_ERR)
                                           : uint8_t(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR)));
        p.sq_ci += bbs;
        published -= bbs;
        ++k;
    }
    bump(ctr_.send_wqes, k);
    return k;
}

size_t ProxyStep::flush_recvs(ProxyQp& p) {
    if (p.recv_inflight) return 0;  // the device's flushes of posted receives come first
    const uint32_t pi = mlx5::read_rq_dbrec(p.q.dbrec, true);
    uint32_t pending = (pi - uint32_t(p.rq_ci)) & 0xffff;
    size_t k = 0;
    while (pending && k < kProxyBatch) {
        push(p, p.rcq, local_recv_flush_cqe(p.q.qpn, p.rq_ci));
        ++p.rq_ci;
        --pending;
        ++k;
    }
    return k;
}

}  // namespace gv::detail::verbs
