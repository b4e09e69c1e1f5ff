// The verbs backend's QPs: the rings device code posts into (host memory, the software
// device's layout), the state word it reads, and the device QP under them, driven by a proxy
// thread. The host's transitions go to the device QP first, then to the state word.
#include <algorithm>
#include <cstring>

#include "gpuverbs/mlx5/wqe.cuh"
#include "verbs/verbs_backend.hpp"

namespace gv::detail::verbs {

namespace {
uint32_t next_pow2(uint64_t v) {
    uint64_t p = 1;
    while (p < v) p <<= 1;
    return uint32_t(p);
}
uint32_t log2u(uint32_t v) {
    uint32_t l = 0;
    while ((1u << l) < v) ++l;
    return l;
}
constexpr uint32_t kMaxInline = 972;  // 63 ds - ctrl - raddr - 4-byte header
constexpr uint32_t kMaxSge = 8;       // as on the software device
}  // namespace

VerbsQp::VerbsQp(VerbsBackend& be, uint32_t pd, const QpOptions& o, VerbsCq* scq, VerbsCq* rcq)
    : be_(be), scq_(scq), rcq_(rcq), opts_(o) {
    GV_REQUIRE(o.max_send_sge >= 1 && o.max_send_sge <= kMaxSge,
               "max_send_sge " + std::to_string(o.max_send_sge) + " out of range: expected 1 .. " +
                   std::to_string(kMaxSge));
    GV_REQUIRE(o.max_recv_sge >= 1 && o.max_recv_sge <= kMaxSge,
               "max_recv_sge " + std::to_string(o.max_recv_sge) + " out of range: expected 1 .. " +
                   std::to_string(kMaxSge));
    GV_REQUIRE(o.max_inline <= kMaxInline, "max_inline " + std::to_string(o.max_inline) +
                                               " too large: an mlx5 WQE carries at most " +
                                               std::to_string(kMaxInline) + " inline bytes");
    GV_REQUIRE(o.sq_depth >= 1, "sq_depth 0: expected at least 1 WQE");
    GV_REQUIRE(o.rq_depth >= 1, "rq_depth 0: expected at least 1 receive WQE");
    if (o.memory == MemoryKind::Device)
        throw NotSupported("QP queues in GPU memory (MemoryKind::Device) on the verbs backend: its proxy thread "
                           "reads them, so they are pinned host memory kernels reach (use MemoryKind::Default "
                           "or Host)");
    // Ring sizes as on the software device (the same device code posts into them).
    const uint32_t ds = std::max<uint32_t>({2 + o.max_send_sge, 4, 2 + mlx5::inline_ds(o.max_inline)});
    const uint64_t bbs = uint64_t(o.sq_depth) * mlx5::ds_to_bbs(ds);
    GV_REQUIRE(bbs <= 32768, "send queue too large: " + std::to_string(o.sq_depth) + " WQEs of " +
                                 std::to_string(mlx5::ds_to_bbs(ds)) +
                                 " WQEBBs exceed the 32768 WQEBBs of an mlx5 ring");
    GV_REQUIRE(o.rq_depth <= 32768, "rq_depth " + std::to_string(o.rq_depth) + " exceeds 32768");
    sq_bbs_ = std::max<uint32_t>(next_pow2(bbs), 4);
    rq_cnt_ = next_pow2(o.rq_depth);
    rq_stride_ = std::max<uint32_t>(16, next_pow2(o.max_recv_sge * 16));
    sq_bytes_ = size_t(sq_bbs_) * 64;
    rq_bytes_ = size_t(rq_cnt_) * rq_stride_;
    // [send ring][receive ring][doorbell record, 64][counters][state word, syndrome]
    state_off_ = sq_bytes_ + rq_bytes_ + 64 + sizeof(dev::QpCounters);
    mem_ = HostMem(state_off_ + 64, be.gpu());

    // The device QP: as many work requests as the rings can hold (the device may grant
    // fewer: the proxy then holds the rest back), and every receive entry's segments.
    QpConfig c;
    c.sq_depth = sq_bbs_;
    c.rq_depth = rq_cnt_;
    c.max_send_sge = o.max_send_sge;
    c.max_recv_sge = rq_stride_ / 16;
    c.max_inline = o.max_inline;
    c.port = be.options().port;
    c.gid_index = be.options().gid_index;
    port_ = be.provider().qp_create(pd, c);
    const QpCaps& g = port_->caps();
    GV_REQUIRE(g.max_inline >= o.max_inline,
               "the device grants " + std::to_string(g.max_inline) + " inline bytes, fewer than max_inline " +
                   std::to_string(o.max_inline));

    pq_.port = port_.get();
    pq_.q = handle().q;
    pq_.rq_stride = rq_stride_;
    pq_.scq = scq_->ring();
    pq_.rcq = rcq_->ring();
    pq_.state = state_word();
    pq_.syndrome = syndrome_word();
    pq_.max_send_wr = std::max(1u, g.sq_depth);
    pq_.max_recv_wr = std::max(1u, g.rq_depth);
    pq_.max_send_sge = std::max(1u, g.max_send_sge);
    pq_.max_recv_sge = std::max(1u, g.max_recv_sge);
    // Half the granted depth: at least two signaled work requests are in any full queue.
    pq_.sig_interval = std::max(1u, pq_.max_send_wr / 2);
    pq_.gpudirect_flush_gpu = be_.gpudirect_flush_gpu();
    pq_.reset_progress();
    be_.proxy().attach(&pq_);
}

VerbsQp::~VerbsQp() {
    // The proxy lets go first (synchronously): nothing reads the rings or writes completions
    // of this QP after that. Then its unpolled completions leave its CQs, and the device QP
    // goes (what it still had in flight is dropped, as ibv_destroy_qp does).
    be_.proxy().detach(&pq_);
    scq_->clean(pq_.q.qpn);
    if (rcq_ != scq_) rcq_->clean(pq_.q.qpn);
    port_.reset();
}

dev::QpHandle VerbsQp::handle() const {
    dev::QpHandle h{};
    h.q.sq = mem_.at(0);
    h.q.rq = mem_.at(sq_bytes_);
    h.q.dbrec = mem_.at<uint32_t>(sq_bytes_ + rq_bytes_);
    h.q.ctr = mem_.at<dev::QpCounters>(sq_bytes_ + rq_bytes_ + 64);
    h.q.qpn = port_ ? port_->qpn() : 0;  // the device's QP number: ctrl segments carry it
    h.q.sq_log_bb = log2u(sq_bbs_);
    h.q.rq_log_cnt = log2u(rq_cnt_);
    h.q.rq_log_stride = log2u(rq_stride_);
    h.q.max_inline = opts_.max_inline;
    h.q.max_send_sge = opts_.max_send_sge;
    h.q.max_recv_sge = opts_.max_recv_sge;
    h.q.sys = 1;
    h.q.host_reachable = 1;
    h.scq = scq_->handle();
    h.rcq = rcq_->handle();
    h.backend = Backend::Verbs;
    h.verbs.state = state_word();
    h.verbs.host_step = &VerbsQp::step_from_host;
    h.verbs.host_arg = const_cast<VerbsQp*>(this);
    return h;
}

void VerbsQp::step_from_host(void* self) {
    auto* q = static_cast<VerbsQp*>(self);
    q->be_.proxy().step_inline(&q->pq_);
}

void VerbsQp::drive() { be_.proxy().kick(&pq_); }

QpState VerbsQp::state() const { return port_->state(); }

uint8_t VerbsQp::error_syndrome() const { return uint8_t(atom::load_acquire(syndrome_word(), true)); }

// Release: the device QP's transition happened before; the proxy (acquire) acts on it.
void VerbsQp::set_state(QpState s) { atom::store_release(state_word(), uint32_t(s), true); }

void VerbsQp::to_init(const InitAttr& a) {
    port_->to_init(a);
    set_state(QpState::Init);
    drive();
}

void VerbsQp::to_rtr(const RtrAttr& a) {
    const std::string bad = check_endpoint_extra(Backend::Verbs, a.remote_extra);
    GV_REQUIRE(bad.empty(), "RtrAttr::remote_extra of a verbs QP: " + bad);
    port_->to_rtr(a);
    set_state(QpState::Rtr);
}

void VerbsQp::to_rts(const RtsAttr& a) {
    port_->to_rts(a);
    set_state(QpState::Rts);
    drive();  // WQEs posted before RTS are posted now
}

void VerbsQp::to_error() {
    port_->to_error();
    set_state(QpState::Error);
    drive();
}

void VerbsQp::reset() {
    be_.proxy().detach(&pq_);
    try {
        port_->reset();
        // Completions of the old life still in the device's CQ are dropped.
        ibv_wc wc[16];
        while (port_->poll(16, wc) > 0) {
        }
        std::memset(mem_.at(0), 0, state_off_);  // rings, doorbell records, counters
        scq_->clean(pq_.q.qpn);
        if (rcq_ != scq_) rcq_->clean(pq_.q.qpn);
        atom::store_release(syndrome_word(), 0u, true);
        set_state(QpState::Reset);
        pq_.reset_progress();
    } catch (...) {
        be_.proxy().attach(&pq_);
        throw;
    }
    be_.proxy().attach(&pq_);
}

QpEndpoint VerbsQp::endpoint() const { return port_->endpoint(); }

}  // namespace gv::detail::verbs
