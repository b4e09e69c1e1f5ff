#include "verbs/sink.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/backend.hpp"
#include "gpuverbs/errors.hpp"
#include "verbs/memory.hpp"

namespace gv::detail::verbs {

namespace {
ibv_wc_opcode wc_opcode_of(ibv_wr_opcode op) {
    switch (op) {
        case IBV_WR_RDMA_WRITE:
        case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
        case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
        case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
        case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
        default: return IBV_WC_SEND;
    }
}
}  // namespace

// ---- records ------------------------------------------------------------------------------

std::vector<SinkWr> SinkDevice::records() const {
    std::lock_guard<std::mutex> lock(mu_);
    return rec_;
}

std::vector<SinkWr> SinkDevice::records(uint32_t qpn) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<SinkWr> out;
    for (const SinkWr& r : rec_)
        if (r.qpn == qpn) out.push_back(r);
    return out;
}

void SinkDevice::clear_records() {
    std::lock_guard<std::mutex> lock(mu_);
    rec_.clear();
}

uint64_t SinkDevice::send_wrs(uint32_t qpn) const {
    std::lock_guard<std::mutex> lock(mu_);
    const Qp* q = find(qpn);
    return q ? q->sends : 0;
}

uint64_t SinkDevice::recv_wrs(uint32_t qpn) const {
    std::lock_guard<std::mutex> lock(mu_);
    const Qp* q = find(qpn);
    return q ? q->recvs : 0;
}

uint64_t SinkDevice::total_send_wrs() const {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t n = 0;
    for (const auto& kv : qps_) n += kv.second.sends;
    return n;
}

uint32_t SinkDevice::max_outstanding(uint32_t qpn) const {
    std::lock_guard<std::mutex> lock(mu_);
    const Qp* q = find(qpn);
    return q ? q->max_out : 0;
}

QpState SinkDevice::state(uint32_t qpn) const {
    std::lock_guard<std::mutex> lock(mu_);
    const Qp* q = find(qpn);
    return q ? q->state : QpState::Reset;
}

void SinkDevice::hold(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = on;
    if (!on)
        for (auto& kv : qps_) run(kv.second);
}

void SinkDevice::fail_send(uint32_t qpn, uint64_t nth, ibv_wc_status status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (Qp* q = find(qpn)) q->fail_send[nth] = status;
}

void SinkDevice::fail_recv(uint32_t qpn, uint64_t nth, ibv_wc_status status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (Qp* q = find(qpn)) q->fail_recv[nth] = status;
}

SinkDevice::Qp* SinkDevice::find(uint32_t qpn) {
    auto it = qps_.find(qpn);
    return it == qps_.end() ? nullptr : &it->second;
}
const SinkDevice::Qp* SinkDevice::find(uint32_t qpn) const {
    auto it = qps_.find(qpn);
    return it == qps_.end() ? nullptr : &it->second;
}

void SinkDevice::record(uint32_t qpn, const ibv_send_wr& wr) {
    if (!opts_.record) return;
    SinkWr r;
    r.qpn = qpn;
    r.call = calls_;
    r.wr_id = wr.wr_id;
    r.opcode = wr.opcode;
    r.send_flags = wr.send_flags;
    r.imm_data = wr.imm_data;
    if (wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
        r.remote_addr = wr.wr.atomic.remote_addr;
        r.rkey = wr.wr.atomic.rkey;
        r.compare_add = wr.wr.atomic.compare_add;
        r.swap = wr.wr.atomic.swap;
    } else {
        r.remote_addr = wr.wr.rdma.remote_addr;
        r.rkey = wr.wr.rdma.rkey;
    }
    r.sge.assign(wr.sg_list, wr.sg_list + wr.num_sge);
    if (wr.send_flags & IBV_SEND_INLINE)
        for (int i = 0; i < wr.num_sge; ++i) {
            const auto* p = reinterpret_cast<const uint8_t*>(wr.sg_list[i].addr);
            r.inline_data.insert(r.inline_data.end(), p, p + wr.sg_list[i].length);
        }
    rec_.push_back(std::move(r));
}

void SinkDevice::record(uint32_t qpn, const ibv_recv_wr& wr) {
    if (!opts_.record) return;
    SinkWr r;
    r.qpn = qpn;
    r.call = calls_;
    r.recv = true;
    r.wr_id = wr.wr_id;
    r.sge.assign(wr.sg_list, wr.sg_list + wr.num_sge);
    rec_.push_back(std::move(r));
}

// ---- QPs ----------------------------------------------------------------------------------

uint32_t SinkDevice::create_qp(const QpCaps& caps) {
    std::lock_guard<std::mutex> lock(mu_);
    Qp q;
    q.qpn = next_qpn_++;
    q.caps = caps;
    qps_[q.qpn] = std::move(q);
    return next_qpn_ - 1;
}

void SinkDevice::destroy_qp(uint32_t qpn) {
    std::lock_guard<std::mutex> lock(mu_);
    qps_.erase(qpn);
}

uint32_t SinkDevice::new_key() {
    std::lock_guard<std::mutex> lock(mu_);
    next_key_ += 0x101;  // never MLX5_INVALID_LKEY (0x100)
    return next_key_;
}

void SinkDevice::transition(uint32_t qpn, QpState to, uint32_t remote_qpn) {
    std::lock_guard<std::mutex> lock(mu_);
    Qp* q = find(qpn);
    if (!q) throw InvalidUsage("sink QP " + hex(qpn) + " does not exist");
    const QpState from = q->state;
    const bool ok = (to == QpState::Init && (from == QpState::Reset || from == QpState::Init)) ||
                    (to == QpState::Rtr && from == QpState::Init) ||
                    (to == QpState::Rts && (from == QpState::Rtr || from == QpState::Rts)) ||
                    to == QpState::Error || to == QpState::Reset;
    if (!ok)
        throw VerbsError(std::string("sink QP ") + hex(qpn) + ": invalid transition " + qp_state_name(from) +
                             " -> " + qp_state_name(to),
                         EINVAL);
    if (to == QpState::Error) {
        to_error(*q);
        return;
    }
    if (to == QpState::Reset) {
        const QpCaps caps = q->caps;
        *q = Qp{};
        q->qpn = qpn;
        q->caps = caps;
        return;
    }
    if (to == QpState::Rtr) q->peer = remote_qpn;
    q->state = to;
    if (to == QpState::Rts) run(*q);
}

void SinkDevice::to_error(Qp& q) {
    q.state = QpState::Error;
    // Everything outstanding completes flushed, signaled or not (errors always complete).
    while (!q.sq.empty()) {
        complete_send(q, q.sq.front(), IBV_WC_WR_FLUSH_ERR, 0);
        q.sq.pop_front();
    }
    while (!q.rq.empty()) {
        complete_recv(q, q.rq.front().wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, 0, false, 0);
        q.rq.pop_front();
    }
}

// ---- posting ------------------------------------------------------------------------------

int SinkDevice::post_send(uint32_t qpn, ibv_send_wr* wr, ibv_send_wr** bad) {
    std::lock_guard<std::mutex> lock(mu_);
    ++calls_;
    Qp* q = find(qpn);
    if (!q) {
        *bad = wr;
        return EINVAL;
    }
    for (ibv_send_wr* w = wr; w; w = w->next) {
        // What rxe refuses: a QP that is not ready yet (it takes work in ERROR, and flushes it).
        if (q->state != QpState::Rts && q->state != QpState::Sqd && q->state != QpState::Error) {
            *bad = w;
            return EINVAL;
        }
        if (w->num_sge < 0 || uint32_t(w->num_sge) > q->caps.max_send_sge) {
            *bad = w;
            return EINVAL;
        }
        if (w->send_flags & IBV_SEND_INLINE) {
            uint64_t len = 0;
            for (int i = 0; i < w->num_sge; ++i) len += w->sg_list[i].length;
            if (len > q->caps.max_inline) {
                *bad = w;
                return EINVAL;
            }
        }
        if (q->sends - q->freed >= q->caps.sq_depth) {  // the send queue is full
            *bad = w;
            return ENOMEM;
        }
        record(qpn, *w);
        const uint64_t seq = q->sends++;
        q->max_out = std::max<uint32_t>(q->max_out, uint32_t(q->sends - q->freed));
        if (!opts_.loopback && !hold_ && q->sq.empty() && q->fail_send.empty() &&
            (q->state == QpState::Rts || q->state == QpState::Sqd)) {
            // Completed at once, nothing kept (the rate measurements' path).
            if (w->send_flags & IBV_SEND_SIGNALED) {
                ibv_wc wc{};
                wc.wr_id = w->wr_id;
                wc.status = IBV_WC_SUCCESS;
                wc.opcode = wc_opcode_of(w->opcode);
                wc.qp_num = qpn;
                q->cq.push_back(Wc{wc, seq, true});
            }
            continue;
        }
        Send s;
        s.wr = *w;
        s.wr.next = nullptr;
        s.sge.assign(w->sg_list, w->sg_list + w->num_sge);
        if (w->send_flags & IBV_SEND_INLINE) {
            // The provider copies an inline payload during the call: the caller may reuse it.
            for (int i = 0; i < w->num_sge; ++i) {
                const auto* p = reinterpret_cast<const uint8_t*>(w->sg_list[i].addr);
                s.inl.insert(s.inl.end(), p, p + w->sg_list[i].length);
            }
            s.sge.assign(1, ibv_sge{0, uint32_t(s.inl.size()), 0});
        }
        s.seq = seq;
        q->sq.push_back(std::move(s));
    }
    run(*q);
    return 0;
}

int SinkDevice::post_recv(uint32_t qpn, ibv_recv_wr* wr, ibv_recv_wr** bad) {
    std::lock_guard<std::mutex> lock(mu_);
    ++calls_;
    Qp* q = find(qpn);
    if (!q || q->state == QpState::Reset) {
        *bad = wr;
        return EINVAL;
    }
    for (ibv_recv_wr* w = wr; w; w = w->next) {
        if (w->num_sge < 0 || uint32_t(w->num_sge) > q->caps.max_recv_sge) {
            *bad = w;
            return EINVAL;
        }
        if (q->rq.size() >= q->caps.rq_depth) {
            *bad = w;
            return ENOMEM;
        }
        record(qpn, *w);
        const uint64_t seq = q->recvs++;
        auto f = q->fail_recv.find(seq);
        if (q->state == QpState::Error) {
            complete_recv(*q, w->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, 0, false, 0);
        } else if (f != q->fail_recv.end()) {
            complete_recv(*q, w->wr_id, f->second, IBV_WC_RECV, 0, 0, false, 0);
            to_error(*q);
        } else if (!opts_.loopback) {
            complete_recv(*q, w->wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, 0, 0, false, 0);  // at once
        } else {
            q->rq.push_back(Recv{w->wr_id, std::vector<ibv_sge>(w->sg_list, w->sg_list + w->num_sge), seq});
        }
    }
    if (opts_.loopback) run_senders_to(qpn);
    return 0;
}

int SinkDevice::poll(uint32_t qpn, int n, ibv_wc* wc) {
    std::lock_guard<std::mutex> lock(mu_);
    Qp* q = find(qpn);
    if (!q) return -EINVAL;
    int k = 0;
    while (k < n && !q->cq.empty()) {
        const Wc& w = q->cq.front();
        wc[k++] = w.wc;
        if (w.send) q->freed = std::max(q->freed, w.seq + 1);  // frees its slot and those before
        q->cq.pop_front();
    }
    return k;
}

void SinkDevice::run_senders_to(uint32_t qpn) {
    for (auto& kv : qps_)
        if (kv.second.peer == qpn) run(kv.second);
}

// ---- execution ----------------------------------------------------------------------------

void SinkDevice::complete_send(Qp& q, const Send& s, ibv_wc_status st, uint32_t byte_len) {
    if (st == IBV_WC_SUCCESS && !(s.wr.send_flags & IBV_SEND_SIGNALED)) return;
    ibv_wc wc{};
    wc.wr_id = s.wr.wr_id;
    wc.status = st;
    wc.opcode = wc_opcode_of(s.wr.opcode);
    wc.byte_len = byte_len;
    wc.qp_num = q.qpn;
    q.cq.push_back(Wc{wc, s.seq, true});
}

void SinkDevice::complete_recv(Qp& q, uint64_t wr_id, ibv_wc_status st, ibv_wc_opcode op, uint32_t byte_len,
                               uint32_t imm, bool with_imm, uint32_t src_qp) {
    ibv_wc wc{};
    wc.wr_id = wr_id;
    wc.status = st;
    wc.opcode = op;
    wc.byte_len = byte_len;
    wc.qp_num = q.qpn;
    wc.src_qp = src_qp;
    if (with_imm) {
        wc.wc_flags |= IBV_WC_WITH_IMM;
        wc.imm_data = imm;
    }
    q.cq.push_back(Wc{wc, 0, false});
}

void SinkDevice::run(Qp& q) {
    while (!q.sq.empty() && !hold_) {
        if (q.state == QpState::Error) {  // posted in ERROR: flushed
            complete_send(q, q.sq.front(), IBV_WC_WR_FLUSH_ERR, 0);
            q.sq.pop_front();
            continue;
        }
        if (q.state != QpState::Rts && q.state != QpState::Sqd) return;
        const Outcome o = execute(q, q.sq.front());
        if (o == Outcome::Wait) return;
        q.sq.pop_front();
        if (o == Outcome::Failed) to_error(q);  // flushes the rest
    }
}

SinkDevice::Outcome SinkDevice::execute(Qp& q, Send& s) {
    const ibv_send_wr& wr = s.wr;
    uint64_t total = 0;
    for (const ibv_sge& g : s.sge) total += g.length;
    auto f = q.fail_send.find(s.seq);
    if (f != q.fail_send.end()) {
        complete_send(q, s, f->second, 0);
        return Outcome::Failed;
    }
    if (!opts_.loopback) {
        complete_send(q, s, IBV_WC_SUCCESS, uint32_t(total));
        return Outcome::Done;
    }
    // Loopback: the peer is a sink QP of this device, ready to receive.
    Qp* r = find(q.peer);
    if (!r || (r->state != QpState::Rtr && r->state != QpState::Rts) || r->peer != q.qpn) {
        complete_send(q, s, IBV_WC_RETRY_EXC_ERR, 0);
        return Outcome::Failed;
    }
    // The gather list's bytes, in order (inline: the copy taken when it was posted).
    std::vector<uint8_t> data;
    const bool gathers = wr.opcode != IBV_WR_RDMA_READ && wr.opcode != IBV_WR_ATOMIC_FETCH_AND_ADD &&
                         wr.opcode != IBV_WR_ATOMIC_CMP_AND_SWP;
    if (gathers) {
        if (wr.send_flags & IBV_SEND_INLINE) {
            data = s.inl;
        } else {
            data.reserve(total);
            for (const ibv_sge& g : s.sge) {
                const auto* p = reinterpret_cast<const uint8_t*>(g.addr);
                data.insert(data.end(), p, p + g.length);
            }
        }
    }
    switch (wr.opcode) {
        case IBV_WR_RDMA_WRITE:
            if (!data.empty()) std::memcpy(reinterpret_cast<void*>(wr.wr.rdma.remote_addr), data.data(), data.size());
            break;
        case IBV_WR_RDMA_READ: {
            uint64_t off = 0;
            for (const ibv_sge& g : s.sge) {
                std::memcpy(reinterpret_cast<void*>(g.addr), reinterpret_cast<const void*>(wr.wr.rdma.remote_addr + off),
                            g.length);
                off += g.length;
            }
            break;
        }
        case IBV_WR_ATOMIC_FETCH_AND_ADD:
        case IBV_WR_ATOMIC_CMP_AND_SWP: {
            auto* target = reinterpret_cast<uint64_t*>(wr.wr.atomic.remote_addr);
            uint64_t old;
            std::memcpy(&old, target, 8);
            uint64_t nv = old;
            if (wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) nv = old + wr.wr.atomic.compare_add;
            else if (old == wr.wr.atomic.compare_add) nv = wr.wr.atomic.swap;
            std::memcpy(target, &nv, 8);
            std::memcpy(reinterpret_cast<void*>(s.sge[0].addr), &old, 8);
            total = 8;
            break;
        }
        case IBV_WR_RDMA_WRITE_WITH_IMM:
        case IBV_WR_SEND:
        case IBV_WR_SEND_WITH_IMM: {
            if (r->rq.empty()) return Outcome::Wait;  // waits for a receive (RNR retried forever)
            Recv rv = std::move(r->rq.front());
            r->rq.pop_front();
            const bool imm = wr.opcode != IBV_WR_SEND;
            if (wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
                if (!data.empty())
                    std::memcpy(reinterpret_cast<void*>(wr.wr.rdma.remote_addr), data.data(), data.size());
                complete_recv(*r, rv.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, uint32_t(data.size()),
                              wr.imm_data, true, q.qpn);
                break;
            }
            uint64_t room = 0;
            for (const ibv_sge& g : rv.sge) room += g.length;
            if (room < data.size()) {  // the receive is too small: both sides fail
                complete_recv(*r, rv.wr_id, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV, 0, 0, false, 0);
                to_error(*r);
                complete_send(q, s, IBV_WC_REM_INV_REQ_ERR, 0);
                return Outcome::Failed;
            }
            uint64_t off = 0;
            for (const ibv_sge& g : rv.sge) {
                if (off >= data.size()) break;
                const uint64_t k = std::min<uint64_t>(g.length, data.size() - off);
                std::memcpy(reinterpret_cast<void*>(g.addr), data.data() + off, k);
                off += k;
            }
            complete_recv(*r, rv.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, uint32_t(data.size()), wr.imm_data, imm, q.qpn);
            break;
        }
        default: break;
    }
    complete_send(q, s, IBV_WC_SUCCESS, uint32_t(total));
    return Outcome::Done;
}

// ---- the provider -------------------------------------------------------------------------

namespace {

class SinkPort final : public Port {
public:
    SinkPort(std::shared_ptr<SinkDevice> dev, const QpCaps& caps) : dev_(std::move(dev)), caps_(caps) {
        qpn_ = dev_->create_qp(caps_);
    }
    ~SinkPort() override { dev_->destroy_qp(qpn_); }
    uint32_t qpn() const override { return qpn_; }
    const QpCaps& caps() const override { return caps_; }
    int post_send(ibv_send_wr* wr, ibv_send_wr** bad) override { return dev_->post_send(qpn_, wr, bad); }
    int post_recv(ibv_recv_wr* wr, ibv_recv_wr** bad) override { return dev_->post_recv(qpn_, wr, bad); }
    int poll(int n, ibv_wc* wc) override { return dev_->poll(qpn_, n, wc); }
    QpState state() const override { return dev_->state(qpn_); }
    QpEndpoint endpoint() const override {
        QpEndpoint e;
        e.backend = Backend::Verbs;
        e.qpn = qpn_;
        e.psn = (qpn_ * 2654435761u) & 0xffffff;
        e.mtu = 4096;
        e.device = "sink";
        return e;
    }
    void to_init(const InitAttr&) override { dev_->transition(qpn_, QpState::Init); }
    void to_rtr(const RtrAttr& a) override { dev_->transition(qpn_, QpState::Rtr, a.remote_qpn); }
    void to_rts(const RtsAttr&) override { dev_->transition(qpn_, QpState::Rts); }
    void to_error() override { dev_->transition(qpn_, QpState::Error); }
    void reset() override { dev_->transition(qpn_, QpState::Reset); }

private:
    std::shared_ptr<SinkDevice> dev_;
    QpCaps caps_;
    uint32_t qpn_ = 0;
};

class SinkProvider final : public Provider {
public:
    explicit SinkProvider(std::shared_ptr<SinkDevice> dev) : dev_(std::move(dev)) {}
    std::string name() const override { return "sink"; }
    uint32_t pd_alloc() override { return ++pds_; }
    void pd_free(uint32_t) override {}
    MrInfo mr_register(uint32_t, void* addr, size_t length, uint32_t access, bool gpu) override {
        GV_REQUIRE(addr != nullptr && length > 0, "sink: memory region of no bytes");
        check_access(access);
        MrInfo m;
        m.lkey = dev_->new_key();
        m.rkey = m.lkey ^ 0x5a0000u;  // a different value: a swapped key shows in the records
        m.device_memory = gpu;
        return m;
    }
    void mr_deregister(const MrInfo&) override {}
    std::unique_ptr<Port> qp_create(uint32_t, const QpConfig& c) override {
        const SinkOptions& o = dev_->options();
        QpCaps caps;
        caps.sq_depth = std::max(1u, std::min(c.sq_depth, o.max_send_wr));
        caps.rq_depth = std::max(1u, std::min(c.rq_depth, o.max_recv_wr));
        caps.max_send_sge = std::min(c.max_send_sge, o.max_sge);
        caps.max_recv_sge = std::min(c.max_recv_sge, o.max_sge);
        if (c.max_inline > o.max_inline)
            throw VerbsError("sink: max_inline " + std::to_string(c.max_inline) + " exceeds the sink's " +
                                 std::to_string(o.max_inline),
                             EINVAL);
        caps.max_inline = c.max_inline;
        return std::make_unique<SinkPort>(dev_, caps);
    }

private:
    std::shared_ptr<SinkDevice> dev_;
    uint32_t pds_ = 0;
};

}  // namespace

std::unique_ptr<Provider> sink_provider(std::shared_ptr<SinkDevice> dev) {
    return std::make_unique<SinkProvider>(std::move(dev));
}

Context open_sink_context(std::shared_ptr<SinkDevice> dev, const VerbsOptions& options, int gpu) {
    return make_context(open_verbs_on(sink_provider(std::move(dev)), gpu, options),
                        "verbs backend on the sink (test mode)");
}

}  // namespace gv::detail::verbs
