#include "mlx5/standin_nic.hpp"

#include <time.h>

#include <cstring>
#include <map>

#include "cuda/cuda_rt.hpp"
#include "gpuverbs/detail/mlx5/doorbell.cuh"
#include "soft/soft_device.hpp"

namespace gv::test {

using detail::MrInfo;
using detail::softdev::Mem;
using detail::softdev::SoftDevice;
namespace soft = detail::soft;

namespace {

// ---------------------------------------------------------------------------------------
class StandinCq final : public be::NicCq {
public:
    StandinCq(int gpu, std::shared_ptr<SoftDevice> dev, uint32_t cqes, be::Place place) : dev_(std::move(dev)) {
        const uint32_t log = be::log2u(cqes);
        const size_t ring = size_t(cqes) * 64;
        // As the mlx5 backend's DevX path lays a CQ out: the ring, filled with 0xff (every
        // CQE invalid, opcode 0xf), then its doorbell record. Host rings are ordinary memory,
        // as libmlx5's are; the backend maps them for kernels.
        mem_ = be::alloc_block(place == be::Place::Gpu ? gpu : -1, place, ring + 128, 4096, 0);
        be::fill_block(mem_, 0, 0xff, ring);
        ring_.cqes = mem_.at<mlx5_cqe64>(0);
        ring_.dbrec = mem_.at<uint32_t>(ring);
        ring_.log_cnt = log;
        ring_.cqn = dev_->alloc_cqn();
        ring_.place = place;
        state_ = dev_->alloc(sizeof(soft::CqState), dev_->on_gpu());
        soft::CqState st{};
        st.cqes = ring_.cqes;
        st.dbrec = ring_.dbrec;
        st.log_cnt = log;
        st.sys = 1;
        st.cqn = ring_.cqn;
        st.overrun = mem_.at<uint32_t>(ring + 64);  // a NIC's CQ error; the tests check it stays 0
        dev_->write(state_, 0, &st, sizeof st);
    }
    ~StandinCq() override {
        dev_->release(state_);
        be::free_block(mem_);
    }
    const be::CqRing& ring() const override { return ring_; }
    soft::CqState* state() const { return state_.at<soft::CqState>(0); }

private:
    std::shared_ptr<SoftDevice> dev_;
    be::Block mem_;
    Mem state_;
    be::CqRing ring_;
};

class StandinQp;

}  // namespace

// ---------------------------------------------------------------------------------------
struct StandinNic::Impl {
    int gpu;
    StandinOptions opts;
    std::shared_ptr<SoftDevice> dev;
    std::unique_ptr<detail::BackendOps> soft_ops;  // protection domains and memory regions
    std::shared_ptr<Log> log;

    std::mutex mu;
    std::vector<StandinQp*> qps;
    std::atomic<bool> stop{false};
    std::thread watcher;

    void run();
    void add(StandinQp* q) {
        std::lock_guard<std::mutex> lock(mu);
        qps.push_back(q);
    }
    void remove(StandinQp* q) {
        std::lock_guard<std::mutex> lock(mu);  // the watcher holds it for a whole pass
        for (size_t i = 0; i < qps.size(); ++i)
            if (qps[i] == q) qps.erase(qps.begin() + long(i));
    }
};

namespace {

class StandinQp final : public be::NicQp {
public:
    StandinQp(StandinNic::Impl& nic, const be::QpRequest& r) : nic_(nic), dev_(nic.dev) {
        auto* scq = dynamic_cast<StandinCq*>(r.scq);
        auto* rcq = dynamic_cast<StandinCq*>(r.rcq);
        GV_REQUIRE(scq && rcq, "stand-in QP with CQs of another NIC");
        const int mem_gpu = r.place == be::Place::Gpu ? nic.gpu : -1;
        const size_t rq_bytes = size_t(r.rq_cnt) * r.rq_stride, sq_bytes = size_t(r.sq_bbs) * 64;
        // The work queue as the PRM lays it (receive ring first), then the doorbell record
        // ([0] receive, [1] send), unless a CPU thread must write it (host memory then).
        wq_ = be::alloc_block(mem_gpu, r.place, rq_bytes + sq_bytes + 64, 4096, 0);
        ring_.rq = wq_.at(0);
        ring_.sq = wq_.at(rq_bytes);
        if (r.dbrec_host) {
            // Ordinary host memory, as libmlx5's: the backend registers it (cudaHostRegister)
            // so that kernels, and the stand-in's executor kernel, reach it.
            dbrec_mem_ = be::alloc_block(-1, be::Place::Host, 64, 64, 0);
            ring_.dbrec = dbrec_mem_.at<uint32_t>(0);
            ring_.dbrec_place = be::Place::Host;
        } else {
            ring_.dbrec = wq_.at<uint32_t>(rq_bytes + sq_bytes);
            ring_.dbrec_place = r.place;
        }
        // The "UAR": a word of ordinary memory (its own page) the watcher observes.
        uar_mem_ = be::alloc_block(-1, be::Place::Host, 64, 4096, 0);
        ring_.uar = uar_mem_.at<uint64_t>(0);
        ring_.uar_io = false;
        ring_.qpn = dev_->alloc_qpn();
        ring_.sq_log_bb = be::log2u(r.sq_bbs);
        ring_.rq_log_cnt = be::log2u(r.rq_cnt);
        ring_.rq_log_stride = be::log2u(r.rq_stride);
        ring_.max_inline = r.max_inline;
        ring_.max_send_sge = r.max_send_sge;
        ring_.max_recv_sge = r.max_recv_sge;
        ring_.place = r.place;

        ctx_ = dev_->alloc(sizeof(soft::QpContext), dev_->on_gpu());
        soft::QpContext st{};
        st.qpn = ring_.qpn;
        st.pd = r.pd;
        st.state = uint32_t(QpState::Reset);
        st.sq_log_bb = ring_.sq_log_bb;
        st.rq_log_cnt = ring_.rq_log_cnt;
        st.rq_log_stride = ring_.rq_log_stride;
        st.max_send_sge = r.max_send_sge;
        st.max_recv_sge = r.max_recv_sge;
        st.max_inline = r.max_inline;
        st.sys = 1;
        st.sq = ring_.sq;
        st.rq = ring_.rq;
        st.dbrec = ring_.dbrec;
        // What the executor may run: the WQEBBs the doorbells announced (the watcher adds each
        // doorbell's advance, run()), as a ConnectX runs up to its doorbell's index.
        rung_ = dev_->alloc(sizeof(unsigned long long), dev_->on_gpu());
        dev_->write_val(rung_, 0, 0ull);
        st.sq_ready = rung_.at<unsigned long long>(0);
        st.scq = scq->state();
        st.rcq = rcq->state();
        st.local_mrs = dev_->mr_table();
        st.remote_mrs = dev_->mr_table();
        dev_->write(ctx_, 0, &st, sizeof st);
        dev_->qp_add(ring_.qpn, ctx_.at<soft::QpContext>(0), &ctx_);
        nic_.add(this);
    }
    ~StandinQp() override {
        stop();
        dev_->release(ctx_);
        dev_->release(rung_);
        be::free_block(uar_mem_);
        be::free_block(dbrec_mem_);
        be::free_block(wq_);
    }

    /// The watcher launches nothing more for this QP, no other QP's executor follows its
    /// peer pointer to it (qp_remove unlinks them), and what was launched before has finished:
    /// the backend unmaps the host rings and the doorbell record (cudaHostUnregister) right
    /// after, and an executor kernel still reading them would fault (cudaErrorIllegalAddress,
    /// seen on the H200 in the CPU-proxy instance when this ran only in the destructor, after
    /// the unmapping).
    void stop() noexcept override {
        if (stopped_) return;
        stopped_ = true;
        nic_.remove(this);
        dev_->qp_remove(ring_.qpn);
        if (on_gpu()) {
            // Launches already made run on the library's stream, in order: a read of the QP's
            // state through that stream comes after them.
            try {
                (void)state();
            } catch (...) {
            }
        }
    }

    const be::QpRing& ring() const override { return ring_; }
    soft::QpContext* ctx() const { return ctx_.at<soft::QpContext>(0); }
    bool on_gpu() const { return dev_->on_gpu(); }

    void to_init(const InitAttr& a) override {
        require(state() == QpState::Reset || state() == QpState::Init, "INIT");
        set(offsetof(soft::QpContext, access), a.access);
        set(offsetof(soft::QpContext, state), uint32_t(QpState::Init));
        armed.store(true, std::memory_order_release);
    }
    void to_rtr(const RtrAttr& a) override {
        require(state() == QpState::Init, "RTR");
        soft::QpContext* peer = dev_->qp_find(a.remote_qpn);
        GV_REQUIRE(peer != nullptr, "stand-in NIC: remote QP " + detail::hex(a.remote_qpn) + " is not on it");
        set(offsetof(soft::QpContext, remote), peer);
        set(offsetof(soft::QpContext, remote_mrs), dev_->mr_table());
        set(offsetof(soft::QpContext, remote_qpn), a.remote_qpn);
        set(offsetof(soft::QpContext, min_rnr_timer), a.min_rnr_timer);
        dev_->qp_link(ring_.qpn, a.remote_qpn, dev_.get());
        set(offsetof(soft::QpContext, state), uint32_t(QpState::Rtr));
    }
    void to_rts(const RtsAttr& a) override {
        require(state() == QpState::Rtr || state() == QpState::Rts, "RTS");
        set(offsetof(soft::QpContext, rnr_retry), a.rnr_retry);
        set(offsetof(soft::QpContext, state), uint32_t(QpState::Rts));
    }
    void to_error() override { set(offsetof(soft::QpContext, state), uint32_t(QpState::Error)); }
    void reset() override {
        set(offsetof(soft::QpContext, state), uint32_t(QpState::Reset));
        set(offsetof(soft::QpContext, sq_ci), 0ull);
        set(offsetof(soft::QpContext, rq_ci), 0ull);
        set(offsetof(soft::QpContext, rq_flushed), 0ull);
        set(offsetof(soft::QpContext, lock), 0u);
        set(offsetof(soft::QpContext, syndrome), 0u);
        set(offsetof(soft::QpContext, rnr_waiting), 0u);
        set(offsetof(soft::QpContext, remote), static_cast<soft::QpContext*>(nullptr));
        std::memset(uar_mem_.p, 0, 8);
        last_raw = 0;
        last_pi = 0;
        announce(0);
    }
    /// Sets what the executor may run to `n` WQEBBs (the watcher, on a doorbell; reset).
    void announce(unsigned long long n) {
        rung = n;
        dev_->write_val(rung_, 0, n);
    }
    QpState state() const override {
        return QpState(dev_->read_val<uint32_t>(ctx_, offsetof(soft::QpContext, state)));
    }
    QpEndpoint endpoint() const override {
        QpEndpoint e;
        e.backend = Backend::Mlx5;
        e.qpn = ring_.qpn;
        e.psn = 0;
        e.gid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
        e.mtu = 4096;
        e.device = "standin-mlx5";
        return e;
    }

    /// The send doorbell record as the NIC reads it.
    uint32_t read_sq_dbrec() const {
        uint32_t v;
        if (ring_.dbrec_place == be::Place::Gpu) detail::cuda::copy_from_device(&v, &ring_.dbrec[MLX5_SND_DBR], 4);
        else v = __atomic_load_n(&ring_.dbrec[MLX5_SND_DBR], __ATOMIC_ACQUIRE);
        return mlx5::from_be32(v) & 0xffff;
    }

    uint64_t last_raw = 0;  // the watcher's view
    uint32_t last_pi = 0;
    unsigned long long rung = 0;  // WQEBBs the doorbells announced (the executor's sq_ready)
    uint64_t last_drive_ns = 0;
    /// Set once the backend moved the QP to INIT: by then it has registered the QP's host
    /// memory (rings, the doorbell record a CPU proxy writes) for kernels. Before that the
    /// watcher does not drive the QP on its timer (a doorbell comes only after that anyway): an executor kernel reading those pages unregistered
    /// faults (cudaErrorIllegalAddress, seen on the H200 with the CPU-proxy handler). A QP in
    /// RESET has nothing to retry or flush anyway.
    std::atomic<bool> armed{false};

private:
    void require(bool ok, const char* to) const {
        GV_REQUIRE(ok, std::string("stand-in NIC: QP ") + detail::hex(ring_.qpn) + " cannot move from " +
                           qp_state_name(state()) + " to " + to);
    }
    template <typename T>
    void set(size_t off, T v) {
        dev_->write_val(ctx_, off, v);
    }

    StandinNic::Impl& nic_;
    std::shared_ptr<SoftDevice> dev_;
    be::Block wq_, dbrec_mem_, uar_mem_;
    Mem ctx_, rung_;
    bool stopped_ = false;
    be::QpRing ring_;
};

uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

}  // namespace

void StandinNic::Impl::run() {
    if (dev->on_gpu()) detail::cuda::set_device(gpu);  // the executor launches and copies go to this GPU
    uint32_t idle = 0;
    while (!stop.load(std::memory_order_relaxed)) {
        bool any = false;
        {
            std::lock_guard<std::mutex> lock(mu);
            for (StandinQp* qp : qps) {
                const be::QpRing& r = qp->ring();
                const uint64_t raw = __atomic_load_n(r.uar, __ATOMIC_ACQUIRE);
                bool rang = false;
                if (raw != qp->last_raw) {
                    rang = any = true;
                    qp->last_raw = raw;
                    // Decode the 8 bytes as a ConnectX does: the producer index in the first
                    // word (bits 8..23 of its big-endian value), the QP number in the second.
                    const uint32_t w0 = mlx5::from_be32(uint32_t(raw)), w1 = mlx5::from_be32(uint32_t(raw >> 32));
                    SeenDoorbell d{w1 >> 8, (w0 >> 8) & 0xffff, qp->read_sq_dbrec(), raw};
                    std::lock_guard<std::mutex> l2(log->mu);
                    log->doorbells.push_back(d);
                    if (d.qpn != r.qpn)
                        log->problems.push_back("doorbell of QP " + detail::hex(r.qpn) + " names QP " + detail::hex(d.qpn));
                    if ((w0 & 0xff) != 0 || (w0 >> 24) != 0 || (w1 & 0xff) != 0)
                        log->problems.push_back("doorbell " + detail::hex(raw) + " has opcode, opmod or ds bits set");
                    if (((d.pi - qp->last_pi) & 0xffff) >= 0x8000)
                        log->problems.push_back("doorbell index went backwards: " + std::to_string(d.pi) + " after " +
                                                std::to_string(qp->last_pi));
                    if (((d.dbrec - d.pi) & 0xffff) >= 0x8000)
                        log->problems.push_back("doorbell index " + std::to_string(d.pi) +
                                                " is beyond the doorbell record " + std::to_string(d.dbrec));
                    // A doorbell carries the index's low 16 bits; rings hold at most 2^15 WQEBBs.
                    // One that went backwards (a problem, logged above) announces nothing.
                    const uint32_t advance = (d.pi - qp->last_pi) & 0xffff;
                    if (advance < 0x8000) qp->announce(qp->rung + advance);
                    qp->last_pi = d.pi;
                    ++log->executions;
                }
                // Execute: on the doorbell, and now and then without one (RNR retries, flushes
                // after ERROR: what a NIC's timers do).
                const uint64_t t = now_ns();
                const bool drive = t - qp->last_drive_ns > 1000000;  // 1 ms
                if (!rang && !(drive && qp->armed.load(std::memory_order_acquire))) continue;
                if (drive) qp->last_drive_ns = t;
                if (!qp->on_gpu()) {
                    soft::QpContext* q = qp->ctx();
                    soft::progress(q, detail::ThreadGroup{});
                    if (soft::load_state(q) == QpState::Error) soft::flush_rq(q);
                } else {
                    detail::cuda::soft_doorbell_fn()(qp->ctx(), rang ? dev::HostDoorbell::SendQueue
                                                                     : dev::HostDoorbell::Flush);
                }
            }
        }
        if (any) {
            idle = 0;
            continue;
        }
        if (++idle < 200) {
            atom::relax();
            continue;
        }
        timespec ts{0, 20000};
        nanosleep(&ts, nullptr);
    }
}

StandinNic::StandinNic(int gpu, const StandinOptions& o) : impl_(std::make_unique<Impl>()) {
    impl_->gpu = gpu;
    impl_->opts = o;
    impl_->soft_ops = detail::open_soft(gpu);
    impl_->dev = SoftDevice::get(gpu, 0);
    static std::shared_ptr<Log> shared = std::make_shared<Log>();
    log_ = shared;
    impl_->log = log_;
    impl_->watcher = std::thread([this] { impl_->run(); });
}

StandinNic::~StandinNic() {
    impl_->stop.store(true);
    if (impl_->watcher.joinable()) impl_->watcher.join();
}

be::Capabilities StandinNic::capabilities(int gpu) {
    be::Capabilities c;
    c.cuda_built = detail::cuda::built();
    c.gpu = gpu;
    c.devx = impl_->opts.devx;
    if (!c.devx) c.devx_error = "stand-in: DevX switched off";
    c.dmabuf = impl_->opts.dmabuf;
    c.peermem = impl_->opts.peermem;
    c.uar_mappable = impl_->opts.uar_mappable;
    c.uar_map_error = impl_->opts.uar_map_error;
    c.peer_mapping_override = impl_->opts.peer_mapping_override;
    c.pcie = impl_->opts.pcie;
    c.gdr_writes_ordering = impl_->opts.gdr_writes_ordering;
    return c;
}

uint32_t StandinNic::pd_alloc() { return impl_->soft_ops->pd_alloc(); }
void StandinNic::pd_free(uint32_t pd) { impl_->soft_ops->pd_free(pd); }
MrInfo StandinNic::mr_register(uint32_t pd, void* addr, size_t length, uint32_t access) {
    return impl_->soft_ops->mr_register(pd, addr, length, access);
}
void StandinNic::mr_deregister(const MrInfo& mr) { impl_->soft_ops->mr_deregister(mr); }

std::unique_ptr<be::NicCq> StandinNic::create_cq(uint32_t cqes, be::Place place) {
    return std::make_unique<StandinCq>(impl_->gpu, impl_->dev, cqes, place);
}

std::unique_ptr<be::NicQp> StandinNic::create_qp(const be::QpRequest& r) {
    GV_REQUIRE(!(r.place == be::Place::Gpu && !impl_->dev->on_gpu()), "stand-in: GPU rings on a CPU-only device");
    return std::make_unique<StandinQp>(*impl_, r);
}

gv::Context standin_context(int gpu, const StandinOptions& so, const gv::Mlx5Options& mo,
                            std::shared_ptr<StandinNic::Log>* log) {
    auto nic = std::make_unique<StandinNic>(gpu, so);
    if (log) *log = nic->log();
    auto ops = be::open_on(std::move(nic), gpu, mo);
    std::string sel = "stand-in NIC: " + be::describe(*ops);
    return detail::make_context(std::move(ops), sel);
}

}  // namespace gv::test
