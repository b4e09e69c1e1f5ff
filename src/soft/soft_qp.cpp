// Host side of the software RDMA device's QPs: the verbs state machine, connecting to a peer in
// this or another process (soft_queues.hpp). The CQs, registration and the backend's
// operations are soft_backend.cpp; the device itself (arena, allocation, MR table) is
// soft_device.hpp; the data path is include/gpuverbs/detail/soft/exec.cuh.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "core/backend.hpp"
#include "soft/arena.hpp"
#include "soft/peer_watch.hpp"
#include "soft/soft_device.hpp"
#include "soft/soft_queues.hpp"
#include "cuda/cuda_rt.hpp"
#include "gpuverbs/detail/soft/doorbell.cuh"

namespace gv::detail {

using detail::hex;
using softdev::log2u;
using softdev::Mem;
using softdev::next_pow2;
using softdev::queue_on_device;
using softdev::SoftCq;
using softdev::SoftDevice;
namespace {

// ---------------------------------------------------------------------------------------
constexpr uint32_t kMaxInline = 972;  // 63 ds - ctrl - raddr - 4-byte header

class SoftQp final : public QpBackend {
public:
    SoftQp(std::shared_ptr<SoftDevice> dev, uint32_t pd, const QpOptions& o, SoftCq* scq, SoftCq* rcq)
        : dev_(std::move(dev)), scq_(scq), rcq_(rcq) {
        GV_REQUIRE(o.max_send_sge >= 1 && o.max_send_sge <= soft::kMaxSge,
                   "max_send_sge " + std::to_string(o.max_send_sge) + " out of range: expected 1 .. " +
                       std::to_string(soft::kMaxSge));
        GV_REQUIRE(o.max_recv_sge >= 1 && o.max_recv_sge <= soft::kMaxSge,
                   "max_recv_sge " + std::to_string(o.max_recv_sge) + " out of range: expected 1 .. " +
                       std::to_string(soft::kMaxSge));
        GV_REQUIRE(o.max_inline <= kMaxInline, "max_inline " + std::to_string(o.max_inline) +
                                                   " too large: the software device carries at most " +
                                                   std::to_string(kMaxInline) + " inline bytes");
        GV_REQUIRE(o.sq_depth >= 1, "sq_depth 0: expected at least 1 WQE");
        GV_REQUIRE(o.rq_depth >= 1, "rq_depth 0: expected at least 1 receive WQE");
        device_ = queue_on_device(*dev_, o.memory);
        uint32_t ds = std::max<uint32_t>({2 + o.max_send_sge, 4, 2 + mlx5::inline_ds(o.max_inline)});
        uint64_t bbs = uint64_t(o.sq_depth) * mlx5::ds_to_bbs(ds);
        GV_REQUIRE(bbs <= 32768, "send queue too large: " + std::to_string(o.sq_depth) + " WQEs of " +
                                     std::to_string(mlx5::ds_to_bbs(ds)) +
                                     " WQEBBs exceed the 32768 WQEBBs of an mlx5 ring");
        GV_REQUIRE(o.rq_depth <= 32768, "rq_depth " + std::to_string(o.rq_depth) + " exceeds 32768");
        sq_bbs_ = std::max<uint32_t>(next_pow2(bbs), 4);
        rq_cnt_ = next_pow2(o.rq_depth);
        rq_stride_ = std::max<uint32_t>(16, next_pow2(o.max_recv_sge * 16));
        sq_bytes_ = size_t(sq_bbs_) * 64;
        rq_bytes_ = size_t(rq_cnt_) * rq_stride_;
        opts_ = o;
        // Whatever fails from here on (allocation, a CQ out of QP slots) must undo what was
        // done: no destructor runs for a half-built object.
        try {
            build(pd, o);
        } catch (...) {
            teardown();
            throw;
        }
    }
    ~SoftQp() override {
        try {
            teardown();
        } catch (...) {  // a failed CUDA context (see SoftDevice::release): nothing to undo
        }
    }

    dev::QpHandle handle() const override {
        dev::QpHandle h{};
        h.q.sq = q_.at(0);
        h.q.rq = q_.at(sq_bytes_);
        h.q.dbrec = dbrec();
        h.q.ctr = counters();
        h.q.qpn = qpn_;
        h.q.sq_log_bb = log2u(sq_bbs_);
        h.q.rq_log_cnt = log2u(rq_cnt_);
        h.q.rq_log_stride = log2u(rq_stride_);
        h.q.max_inline = opts_.max_inline;
        h.q.max_send_sge = opts_.max_send_sge;
        h.q.max_recv_sge = opts_.max_recv_sge;
        // Connected to another GPU (xgpu): the peer's executor there reads our receive queue,
        // so posters publish at system scope (handles taken after connect).
        h.q.sys = device_ && !xgpu_ ? 0 : 1;
        h.q.host_reachable = device_ ? 0 : 1;
        h.scq = scq_->handle();
        h.rcq = rcq_->handle();
        h.backend = Backend::Soft;
        h.soft.ctx = s_.at<soft::QpContext>(0);
        const soft::MrTable mrs = dev_->mr_table();
        h.soft.mrs = mrs.entries;
        h.soft.mr_cap = mrs.capacity;
        if (dev_->on_gpu()) {
            // Launched on this QP's GPU, whatever the calling thread's current device.
            h.soft.host_doorbell = cuda::soft_doorbell_at_fn();
            h.soft.host_arg = const_cast<cuda::SoftDoorbellTarget*>(&target_);
        }
        return h;
    }

    void drive() override { soft::drive(handle()); }

    QpState state() const override {
        return QpState(dev_->read_val<uint32_t>(s_, offsetof(soft::QpContext, state)));
    }
    uint8_t error_syndrome() const override {
        return uint8_t(dev_->read_val<uint32_t>(s_, offsetof(soft::QpContext, syndrome)));
    }

    void to_init(const InitAttr& a) override {
        QpState cur = state();
        check_transition(cur, QpState::Init);
        GV_REQUIRE((a.access & ~uint32_t(kAllAccess)) == 0,
                   "InitAttr::access " + hex(a.access) + " has unknown bits: expected kLocalWrite, "
                   "kRemoteWrite, kRemoteRead, kRemoteAtomic");
        GV_REQUIRE(a.port == 1, "port " + std::to_string(a.port) + ": the software device has port 1 only");
        set(offsetof(soft::QpContext, access), a.access);
        set(offsetof(soft::QpContext, state), uint32_t(QpState::Init));
    }

    void to_rtr(const RtrAttr& a) override {
        check_transition(state(), QpState::Rtr);
        GV_REQUIRE(a.path_mtu == 256 || a.path_mtu == 512 || a.path_mtu == 1024 || a.path_mtu == 2048 ||
                       a.path_mtu == 4096,
                   "path_mtu " + std::to_string(a.path_mtu) + " invalid: expected 256, 512, 1024, 2048 or 4096");
        GV_REQUIRE(a.rq_psn < (1u << 24), "rq_psn " + hex(a.rq_psn) + " exceeds 24 bits");
        GV_REQUIRE(a.min_rnr_timer <= 31, "min_rnr_timer " + std::to_string(a.min_rnr_timer) +
                                              " out of range: expected 0 .. 31");
        GV_REQUIRE(a.max_dest_rd_atomic <= 16, "max_dest_rd_atomic " + std::to_string(a.max_dest_rd_atomic) +
                                                   " out of range: expected 0 .. 16");
        const std::string bad = soft::check_extra(a.remote_extra);
        GV_REQUIRE(bad.empty(), "RtrAttr::remote_extra is not a software-device endpoint part: " + bad);
        const soft::Locator loc = soft::decode(a.remote_extra);
        const bool foreign = loc.pid != 0 && loc.pid != dev_->pid();
        const soft::PeerFacts facts = gather(loc, !foreign);
        const soft::PeerPlan plan = soft::plan_peer(facts);
        const std::string who =
            "remote QP " + hex(a.remote_qpn) + (foreign ? " of process " + std::to_string(loc.pid) : std::string());
        if (plan.path == soft::PeerPath::Refused)
            throw NotSupported("cannot connect " + dev_->name() + " QP " + hex(qpn_) + " to " + who + ": " + plan.why);
        const bool cross_gpu = plan.path == soft::PeerPath::CrossGpu;
        if (foreign) {
            connect_foreign(a.remote_qpn, loc, cross_gpu ? facts.peer_gpu : -1);
        } else if (cross_gpu) {
            connect_other_gpu(a.remote_qpn, facts.peer_gpu);
        } else {
            soft::QpContext* peer = dev_->qp_find(a.remote_qpn);
            GV_REQUIRE(peer != nullptr, "remote QP " + hex(a.remote_qpn) + " does not exist on software device " +
                                            dev_->name() + " (peers must be on the same device, or on another GPU "
                                            "of this host: same process and the same ContextOptions::gpu, or "
                                            "an endpoint that says which GPU)");
            set(offsetof(soft::QpContext, remote), peer);
            set(offsetof(soft::QpContext, remote_mrs), dev_->mr_table());
            dev_->qp_link(qpn_, a.remote_qpn, dev_.get());
        }
        // Before RTR: the peer's executor reads these flags once our state lets it in.
        set_cross_gpu(cross_gpu);
        set(offsetof(soft::QpContext, remote_qpn), a.remote_qpn);
        set(offsetof(soft::QpContext, min_rnr_timer), a.min_rnr_timer);
        set(offsetof(soft::QpContext, state), uint32_t(QpState::Rtr));
        if (foreign) watch_peer(loc.pid);
    }

    void to_rts(const RtsAttr& a) override {
        check_transition(state(), QpState::Rts);
        GV_REQUIRE(a.sq_psn < (1u << 24), "sq_psn " + hex(a.sq_psn) + " exceeds 24 bits");
        GV_REQUIRE(a.timeout <= 31, "timeout " + std::to_string(a.timeout) + " out of range: expected 0 .. 31");
        GV_REQUIRE(a.retry_cnt <= 7, "retry_cnt " + std::to_string(a.retry_cnt) + " out of range: expected 0 .. 7");
        GV_REQUIRE(a.rnr_retry <= 7, "rnr_retry " + std::to_string(a.rnr_retry) +
                                         " out of range: expected 0 .. 7 (7 = forever)");
        GV_REQUIRE(a.max_rd_atomic <= 16,
                   "max_rd_atomic " + std::to_string(a.max_rd_atomic) + " out of range: expected 0 .. 16");
        set(offsetof(soft::QpContext, rnr_retry), a.rnr_retry);
        set(offsetof(soft::QpContext, state), uint32_t(QpState::Rts));
        kick(dev::HostDoorbell::SendQueue);  // WQEs posted before RTS run now
    }

    void to_error() override {
        set(offsetof(soft::QpContext, state), uint32_t(QpState::Error));
        kick(dev::HostDoorbell::Flush);
    }

    void reset() override {
        PeerWatch::instance().cancel(watch_id_);
        watch_id_ = 0;
        set(offsetof(soft::QpContext, state), uint32_t(QpState::Reset));
        scq_->clean(qpn_);
        if (rcq_ != scq_) rcq_->clean(qpn_);
        std::vector<uint8_t> zero(q_.bytes, 0);
        dev_->write(q_, 0, zero.data(), zero.size());
        set(offsetof(soft::QpContext, sq_ci), 0ull);
        set(offsetof(soft::QpContext, rq_ci), 0ull);
        set(offsetof(soft::QpContext, lock), 0u);
        set(offsetof(soft::QpContext, syndrome), 0u);
        set(offsetof(soft::QpContext, rnr_waiting), 0u);
        set(offsetof(soft::QpContext, rnr_count), 0u);
        set(offsetof(soft::QpContext, remote), static_cast<soft::QpContext*>(nullptr));
        set(offsetof(soft::QpContext, remote_mrs), dev_->mr_table());
        set_cross_gpu(false);
        dev_->qp_link(qpn_, 0, nullptr);
    }

    QpEndpoint endpoint() const override {
        QpEndpoint e;
        e.backend = Backend::Soft;
        e.qpn = qpn_;
        e.psn = 0;
        e.mtu = 4096;
        e.device = dev_->name();
        e.extra = soft::encode(dev_->locator(s_.at<soft::QpContext>(0), reachable()));
        return e;
    }

private:
    // The queue memory's layout (to_init allocates it): send ring, receive ring, doorbell
    // record (64 bytes), the posting counters.
    uint32_t* dbrec() const { return q_.at<uint32_t>(sq_bytes_ + rq_bytes_); }
    dev::QpCounters* counters() const { return q_.at<dev::QpCounters>(sq_bytes_ + rq_bytes_ + 64); }

    /// What plan_peer needs to know about the peer `loc` (CUDA is asked only when both devices
    /// are on GPUs with different identities).
    soft::PeerFacts gather(const soft::Locator& loc, bool same_process) const {
        soft::PeerFacts f;
        f.local_gpu = dev_->gpu();
        f.local_uuid = dev_->uuid();
        f.same_process = same_process;
        f.peer_uuid_known = loc.uuid_known;
        f.peer_uuid = loc.gpu_uuid;
        if (f.local_gpu < 0 || !f.peer_uuid_known || !soft::is_gpu(f.peer_uuid) || f.peer_uuid == f.local_uuid)
            return f;
        f.visible_gpus = cuda::device_count();
        f.peer_gpu = cuda::device_of_uuid(f.peer_uuid.data());
        if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
            f.visible_devices_set = true;
            f.visible_devices = v;
        }
        if (f.peer_gpu >= 0 && f.peer_gpu != f.local_gpu) {
            f.can_access_peer = cuda::can_access_peer(f.local_gpu, f.peer_gpu);
            if (same_process) f.peer_can_access = cuda::can_access_peer(f.peer_gpu, f.local_gpu);
        }
        return f;
    }

    /// The QP (its state and CQs) is connected to a peer on another GPU, or no longer: sets
    /// QpContext::xgpu and system-scope ordering of its queues (base: host memory only), and
    /// marks both CQs (state.cuh's kScopePeer says what that changes).
    void set_cross_gpu(bool on) {
        if (on == xgpu_) return;
        if (on) {
            scq_->mark_cross_gpu();
            rcq_->mark_cross_gpu();
        }
        set(offsetof(soft::QpContext, sys), uint32_t(on || !device_ ? 1 : 0));
        set(offsetof(soft::QpContext, xgpu), uint32_t(on ? 1 : 0));
        xgpu_ = on;
    }

    /// RTR against a QP of this process on another GPU: find its device, let each GPU reach
    /// the other's memory (peer access both ways, each arena granted to the other GPU), then
    /// point at its state and MR table as for a peer of this device.
    void connect_other_gpu(uint32_t remote_qpn, int peer_gpu) {
        auto other = SoftDevice::existing(peer_gpu);
        if (!other)
            throw InvalidUsage("remote QP " + hex(remote_qpn) + " is of the software device of GPU " +
                               std::to_string(peer_gpu) + ", which this process no longer has (its last Context "
                               "was destroyed)");
        soft::QpContext* peer = other->qp_find(remote_qpn);
        GV_REQUIRE(peer != nullptr, "remote QP " + hex(remote_qpn) + " does not exist on software device " +
                                        other->name() + " (destroyed, or the endpoint is stale)");
        dev_->link_gpu(*other);
        set(offsetof(soft::QpContext, remote), peer);
        set(offsetof(soft::QpContext, remote_mrs), other->mr_table());
        dev_->qp_link(qpn_, remote_qpn, other.get());
    }

    /// RTR against a QP of another process: map its arena here at the same address (once
    /// per arena), then point at its QpState and MR table as for a local peer. peer_gpu >= 0:
    /// the peer's arena lives on that GPU (two GPUs, docs/two-gpus.md), mapped for ours.
    void connect_foreign(uint32_t remote_qpn, const soft::Locator& loc, int peer_gpu) {
        const std::string who = "remote QP " + hex(remote_qpn) + " of process " + std::to_string(loc.pid);
        if (loc.arena_size == 0)
            throw NotSupported("cannot connect to " + who +
                               ": it cannot be reached from another process (its state, queues or CQs "
                               "are not in its device's shared arena: host-memory queues or CQs on a GPU "
                               "device, a full arena (GV_GPU_ARENA_MB), or a device without one)");
        if (!reachable())
            throw NotSupported("cannot connect " + dev_->name() + " QP " + hex(qpn_) + " to " + who +
                               ": this QP's state, queues or CQs are not in the device's shared arena (" +
                               (dev_->arena_error().empty()
                                    ? std::string("host-memory queues or CQs on a GPU device, or the arena "
                                                  "was full when they were created: raise GV_GPU_ARENA_MB")
                                    : dev_->arena_error()) +
                               ")");
        GV_REQUIRE(loc.qp_context >= loc.arena_base && loc.arena_size >= sizeof(soft::QpContext) &&
                       loc.qp_context - loc.arena_base <= loc.arena_size - sizeof(soft::QpContext) &&
                       loc.qp_context % alignof(soft::QpContext) == 0,
                   who + ": QP state address " + hex(loc.qp_context) + " lies outside its arena");
        if (dev_->on_gpu()) {
            // peer_gpu >= 0: the arena's memory is on that GPU; the mapping made here is for
            // ours, which reaches it over NVLink / PCIe peer-to-peer (plan_peer checked that
            // cudaDeviceCanAccessPeer says so). Nothing else is needed: VMM memory is reached
            // through the mapping's access descriptors, not cudaDeviceEnablePeerAccess.
            (void)peer_gpu;
            cuda::DeviceGuard guard(dev_->gpu());
            import_gpu_arena(dev_->gpu(), loc.pid, loc.arena_fd, loc.arena_base, loc.arena_size);
        } else {
            import_arena(loc.pid, loc.arena_fd, loc.arena_base, loc.arena_size);
        }
        auto* peer = reinterpret_cast<soft::QpContext*>(loc.qp_context);
        // The peer wrote its QpState before it sent the endpoint; the socket round trip that
        // brought the endpoint here orders those stores before these loads.
        soft::QpContext ps{};
        if (dev_->on_gpu()) cuda::copy_from_device(&ps, peer, sizeof ps);
        else std::memcpy(&ps, peer, sizeof ps);
        GV_REQUIRE(ps.qpn == remote_qpn, who + ": its arena holds QP " + hex(ps.qpn) + " at " + hex(loc.qp_context) +
                                             " (the QP was destroyed, or the endpoint is stale)");
        soft::MrTable mrs = ps.local_mrs;
        const uint64_t tab = reinterpret_cast<uint64_t>(mrs.entries);
        GV_REQUIRE(mrs.owner == loc.pid && tab >= loc.arena_base && mrs.capacity > 0 &&
                       uint64_t(mrs.capacity) * sizeof(soft::MrEntry) <= loc.arena_size &&
                       tab - loc.arena_base <= loc.arena_size - uint64_t(mrs.capacity) * sizeof(soft::MrEntry),
                   who + ": its memory-region table is not in its arena");
        set(offsetof(soft::QpContext, remote_mrs), mrs);
        set(offsetof(soft::QpContext, remote), peer);
        dev_->qp_link(qpn_, 0, nullptr);  // remote_qpn names a QP of the other process, not of this process
    }

    /// Moves the QP to ERROR when the peer's process exits: every outstanding WQE and every
    /// posted receive then completes with WR_FLUSH_ERR, instead of waiting for a peer that
    /// will never answer. Registered once the QP is in RTR (when the peer is already gone,
    /// the callback runs at once).
    void watch_peer(uint32_t pid) {
        PeerWatch::instance().cancel(watch_id_);
        watch_id_ = 0;
        watch_id_ = PeerWatch::instance().watch(pid, [this] {
            cuda::DeviceGuard guard(dev_->gpu());  // the watcher's own thread; CPU device: nothing
            // ERROR first (executors then flush without reading the peer), then forget the
            // peer: nothing of a dead process is read from here on.
            set(offsetof(soft::QpContext, state), uint32_t(QpState::Error));
            set(offsetof(soft::QpContext, remote), static_cast<soft::QpContext*>(nullptr));
            kick(dev::HostDoorbell::Flush);
        });
    }

    /// The QP's state, queues and both CQs lie in the device's shared arena, so a peer in
    /// another process can reach them.
    bool reachable() const { return s_.arena && q_.arena && scq_->in_arena() && rcq_->in_arena(); }

    void build(uint32_t pd, const QpOptions& o) {
        q_ = dev_->alloc(sq_bytes_ + rq_bytes_ + 64 + sizeof(dev::QpCounters), device_);
        s_ = dev_->alloc(sizeof(soft::QpContext), dev_->on_gpu());
        qpn_ = dev_->alloc_qpn();
        target_.qp_context = s_.at<soft::QpContext>(0);
        target_.gpu = dev_->gpu();
        target_.board = dev_->board();
        target_.slot = cuda::board_attach(target_.board, target_.qp_context);

        soft::QpContext st{};
        st.qpn = qpn_;
        st.pd = pd;
        st.state = uint32_t(QpState::Reset);
        st.sq_log_bb = log2u(sq_bbs_);
        st.rq_log_cnt = log2u(rq_cnt_);
        st.rq_log_stride = log2u(rq_stride_);
        st.max_send_sge = o.max_send_sge;
        st.max_recv_sge = o.max_recv_sge;
        st.max_inline = o.max_inline;
        st.sys = device_ ? 0 : 1;
        st.sq = q_.at(0);
        st.rq = q_.at(sq_bytes_);
        st.dbrec = dbrec();
        st.sq_ready = &counters()->sq_ready;
        st.scq = scq_->state();
        st.rcq = rcq_->state();
        st.local_mrs = dev_->mr_table();
        st.remote_mrs = dev_->mr_table();
        dev_->write(s_, 0, &st, sizeof st);
        dev_->qp_add(qpn_, s_.at<soft::QpContext>(0), &s_);
    }
    /// Undoes build(), also a partial one. The host objects detached the QP from its CQs
    /// before (backend.hpp's registry).
    void teardown() {
        PeerWatch::instance().cancel(watch_id_);  // the callback touches this object
        watch_id_ = 0;
        if (target_.slot >= 0) {
            try {  // fails only on a failed CUDA context
                cuda::board_detach(target_.board, target_.slot);
            } catch (...) {
            }
            target_.slot = -1;
        }
        if (qpn_) {
            dev_->qp_remove(qpn_);
            try {  // writes and reads CQ memory: fails on a failed CUDA context
                scq_->clean(qpn_);
                if (rcq_ != scq_) rcq_->clean(qpn_);
            } catch (...) {
            }
        }
        dev_->release(q_);
        dev_->release(s_);
    }

    template <typename T>
    void set(size_t off, T v) {
        dev_->write_val(s_, off, v);
    }
    static void check_transition(QpState from, QpState to) {
        bool ok = (from == QpState::Reset && to == QpState::Init) ||
                  (from == QpState::Init && (to == QpState::Init || to == QpState::Rtr)) ||
                  (from == QpState::Rtr && to == QpState::Rts) ||
                  ((from == QpState::Rts || from == QpState::Sqd) && to == QpState::Rts);
        GV_REQUIRE(ok, std::string("invalid QP transition ") + qp_state_name(from) + " -> " + qp_state_name(to) +
                           ": allowed are RESET->INIT, INIT->INIT, INIT->RTR, RTR->RTS, RTS->RTS, and "
                           "any->ERROR / any->RESET");
    }
    /// Runs the executor after a host-side change (CPU threads run it directly; a GPU
    /// device gets a launch).
    void kick(dev::HostDoorbell what) {
        auto h = handle();
        if (!dev_->on_gpu()) {
            soft::progress(h.soft.ctx, ThreadGroup{});
            if (what == dev::HostDoorbell::Flush) soft::flush_rq(h.soft.ctx);
        } else {
            h.soft.host_doorbell(h.soft.host_arg, what);
        }
    }

    std::shared_ptr<SoftDevice> dev_;
    SoftCq* scq_;
    SoftCq* rcq_;
    bool device_ = false;
    uint32_t qpn_ = 0, sq_bbs_ = 0, rq_cnt_ = 0, rq_stride_ = 0;
    size_t sq_bytes_ = 0, rq_bytes_ = 0;
    QpOptions opts_;
    Mem q_, s_;
    uint64_t watch_id_ = 0;  ///< PeerWatch registration while connected to another process
    bool xgpu_ = false;      ///< connected to a peer on another GPU (QpContext::xgpu)
    cuda::SoftDoorbellTarget target_{};  ///< host_arg of the handles: where CPU doorbells launch
};

}  // namespace

std::unique_ptr<QpBackend> softdev::make_soft_qp(std::shared_ptr<SoftDevice> dev, uint32_t pd, const QpOptions& o,
                                                 SoftCq* scq, SoftCq* rcq) {
    return std::make_unique<SoftQp>(std::move(dev), pd, o, scq, rcq);
}

}  // namespace gv::detail
