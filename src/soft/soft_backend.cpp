// Host side of the software RDMA device: CQs, registration, and the backend's operations. Its
// QPs (the verbs state machine, connecting to a peer in this or another process) are
// soft_qp.cpp; the device itself (arena, allocation, MR table) is soft_device.hpp; the data
// path is include/gpuverbs/detail/soft/exec.cuh.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "core/backend.hpp"
#include "core/cq_clean.hpp"
#include "soft/soft_device.hpp"
#include "soft/soft_queues.hpp"
#include "cuda/cuda_rt.hpp"
#include "gpuverbs/device/completion_queue_device.cuh"

namespace gv::detail::softdev {

// ---------------------------------------------------------------------------------------
SoftCq::SoftCq(std::shared_ptr<SoftDevice> dev, const CqOptions& o) : dev_(std::move(dev)) {
    GV_REQUIRE(o.depth >= 1 && o.depth <= (1u << 22),
               "CQ depth " + std::to_string(o.depth) + " out of range: expected 1 .. 4194304");
    device_ = queue_on_device(*dev_, o.memory);
    memory_ = device_ ? MemoryKind::Device : MemoryKind::Host;
    cnt_ = std::max<uint32_t>(2, next_pow2(o.depth));
    ring_bytes_ = size_t(cnt_) * 64;
    q_ = dev_->alloc(ring_bytes_ + 128 + kSlots * sizeof(dev::CqQpSlot), device_);
    // Every CQE starts invalid (opcode 0xf) and owned by hardware.
    std::vector<uint8_t> init(ring_bytes_, 0);
    for (uint32_t i = 0; i < cnt_; ++i) init[size_t(i) * 64 + 63] = MLX5_CQE_INVALID << 4;
    dev_->write(q_, 0, init.data(), init.size());
    slots_.assign(kSlots, dev::CqQpSlot{});
    s_ = dev_->alloc(sizeof(soft::CqState), dev_->on_gpu());
    soft::CqState st{};
    st.cqes = q_.at<mlx5_cqe64>(0);
    st.dbrec = q_.at<uint32_t>(ring_bytes_);
    st.log_cnt = log2u(cnt_);
    st.sys = device_ ? 0 : 1;
    st.cqn = cqn_ = dev_->alloc_cqn();
    st.overrun = q_.at<uint32_t>(ring_bytes_ + 72);
    st.ci = q_.at<unsigned long long>(ring_bytes_ + 64);
    dev_->write(s_, 0, &st, sizeof st);
}

SoftCq::~SoftCq() {
    dev_->release(q_);
    dev_->release(s_);
}

dev::CqHandle SoftCq::handle() const {
    dev::CqHandle h{};
    h.cqes = q_.at<mlx5_cqe64>(0);
    // No record: the executor reads the pollers' consumer index (soft::CqState::ci), so pollers
    // do not move it (poll_cq).
    h.dbrec = nullptr;
    h.ci = q_.at<unsigned long long>(ring_bytes_ + 64);
    h.overrun = q_.at<uint32_t>(ring_bytes_ + 72);
    h.slots = q_.at<dev::CqQpSlot>(ring_bytes_ + 128);
    h.slot_mask = kSlots - 1;
    h.log_cnt = log2u(cnt_);
    // Completions from another GPU's executor (xgpu): pollers acquire at system scope.
    h.sys = device_ && !xgpu_ ? 0 : 1;
    h.host_reachable = device_ ? 0 : 1;
    h.cqn = cqn_;
    return h;
}

void SoftCq::mark_cross_gpu() {
    std::lock_guard<std::mutex> lock(mu_);
    if (xgpu_) return;
    dev_->write_val<uint32_t>(s_, offsetof(soft::CqState, sys), 1u);
    dev_->write_val<uint32_t>(s_, offsetof(soft::CqState, xgpu), 1u);
    xgpu_ = true;
}

void SoftCq::attach_slots(const dev::QpHandle& qp, bool send, bool recv) {
    std::lock_guard<std::mutex> lock(mu_);
    const uint32_t qpn = qp.q.qpn;
    for (uint32_t i = 0; i < kSlots; ++i) {
        uint32_t idx = (qpn + i) & (kSlots - 1);
        dev::CqQpSlot& s = slots_[idx];
        if (s.qpn != 0 && s.qpn != 0xffffffffu && s.qpn != qpn) continue;
        s.qpn = qpn;
        s.sq_log_bb = qp.q.sq_log_bb;
        s.sq = qp.q.sq;
        if (send) s.sq_retired = &qp.q.ctr->sq_retired;
        if (recv) s.rq_retired = &qp.q.ctr->rq_retired;
        dev_->write(q_, ring_bytes_ + 128 + idx * sizeof s, &s, sizeof s);
        return;
    }
    throw InvalidUsage("CQ " + std::to_string(cqn_) + " already serves " + std::to_string(kSlots) +
                       " QPs, its maximum");
}

void SoftCq::clean(uint32_t qpn) {
    std::lock_guard<std::mutex> lock(mu_);
    const uint32_t log = log2u(cnt_), mask = cnt_ - 1;
    const auto ci = dev_->read_val<unsigned long long>(q_, ring_bytes_ + 64);
    uint8_t op_own;
    auto first = dev_->read_val<mlx5_cqe64>(q_, size_t(ci & mask) * 64);
    if (!mlx5::cqe_ready(&first, uint32_t(ci), log, false, &op_own)) return;  // nothing unpolled
    std::vector<mlx5_cqe64> ring(cnt_);
    dev_->read(q_, 0, ring.data(), ring_bytes_);
    const uint32_t freed = clean_cq_ring(ring.data(), log, ci, qpn, false, [&](size_t idx, const mlx5_cqe64& e) {
        dev_->write(q_, idx * 64, &e, sizeof e);
    });
    if (!freed) return;
    const unsigned long long nci = ci + freed;
    dev_->write_val(q_, ring_bytes_ + 64, nci);
    dev_->write_val(q_, ring_bytes_ + mlx5::kCqSetCi * 4, mlx5::to_be32(uint32_t(nci) & 0xffffff));
}

void SoftCq::detach_slots(uint32_t qpn) {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t i = 0; i < kSlots; ++i) {
        uint32_t idx = (qpn + i) & (kSlots - 1);
        dev::CqQpSlot& s = slots_[idx];
        if (s.qpn == 0) return;
        if (s.qpn != qpn) continue;
        s = dev::CqQpSlot{};
        s.qpn = 0xffffffffu;  // tombstone: probing continues past it
        dev_->write(q_, ring_bytes_ + 128 + idx * sizeof s, &s, sizeof s);
        return;
    }
}

}  // namespace gv::detail::softdev

namespace gv::detail {

using detail::hex;
using softdev::make_soft_qp;
using softdev::SoftCq;
using softdev::SoftDevice;
namespace {

// ---------------------------------------------------------------------------------------
class SoftBackend final : public BackendOps {
public:
    SoftBackend(int gpu, size_t arena_bytes) : dev_(SoftDevice::get(gpu, arena_bytes)) {}
    Backend kind() const override { return Backend::Soft; }
    std::string name() const override { return dev_->name(); }
    int gpu() const override { return dev_->gpu(); }
    uint32_t pd_alloc() override { return dev_->alloc_pd(); }
    void pd_free(uint32_t) override {}

    MrInfo mr_register(uint32_t pd, void* addr, size_t length, uint32_t access) override {
        GV_REQUIRE(addr != nullptr,
                   "memory region at address 0: expected host memory or GPU memory of " + dev_->name());
        GV_REQUIRE(length > 0, "memory region of length 0: expected at least 1 byte");
        GV_REQUIRE(length <= (1ull << 47), "memory region length " + std::to_string(length) + " too large");
        GV_REQUIRE((access & ~uint32_t(kAllAccess)) == 0,
                   "access " + hex(access) + " has unknown bits: expected kLocalWrite, kRemoteWrite, "
                   "kRemoteRead, kRemoteAtomic");
        GV_REQUIRE(!(access & (kRemoteWrite | kRemoteAtomic)) || (access & kLocalWrite),
                   "remote write or remote atomic access requires kLocalWrite too (as in verbs)");
        soft::MrEntry e{};
        e.addr = reinterpret_cast<uint64_t>(addr);
        e.length = length;
        e.pd = pd;
        e.access = access;
        int owner = -1;
        auto kind = cuda::built() ? cuda::pointer_kind(addr, &owner) : cuda::PtrKind::Host;
        MrInfo info;
        bool pinned_here = false;
        if (kind == cuda::PtrKind::Device || kind == cuda::PtrKind::Managed) {
            GV_REQUIRE(kind == cuda::PtrKind::Device,
                       "managed (cudaMallocManaged) memory cannot be registered: use cudaMalloc or host memory");
            GV_REQUIRE(dev_->on_gpu(), "GPU memory (GPU " + std::to_string(owner) + ") registered on " +
                                           dev_->name() + ", which executes on CPU threads: open the "
                                           "context with ContextOptions::gpu = " + std::to_string(owner));
            e.sys = soft::kScopeGpu;
            if (owner != dev_->gpu()) {
                // Memory of another GPU of this process: reachable through peer access, which
                // this enables; its observers are that GPU's threads, so stores into it are
                // fenced, and RMWs on it made, at system scope (kScopePeer).
                const std::string why =
                    soft::check_peer_memory(dev_->gpu(), owner, cuda::can_access_peer(dev_->gpu(), owner));
                if (!why.empty()) throw NotSupported(why);
                dev_->reach_gpu(owner);
                e.sys = soft::kScopePeer;
            }
            e.xlate = 0;
            e.shared = dev_->in_arena(addr, length) ? 1 : 0;
            info.device_memory = true;
        } else if (dev_->on_gpu()) {
            cuda::DeviceGuard guard(dev_->gpu());
            void* d = nullptr;
            if (kind == cuda::PtrKind::PinnedHost) d = cuda::host_device_pointer(addr);
            else pinned_here = cuda::host_register(addr, length, &d);
            e.xlate = int64_t(reinterpret_cast<uint64_t>(d)) - int64_t(e.addr);
            e.sys = 1;
        } else {
            e.xlate = 0;
            e.sys = 1;
            e.shared = dev_->in_arena(addr, length) ? 1 : 0;
        }
        info.lkey = info.rkey = dev_->mr_add(e);  // one key serves both on this device
        if (pinned_here) {
            std::lock_guard<std::mutex> lock(mu_);
            pinned_[info.lkey] = addr;
        }
        return info;
    }
    void mr_deregister(const MrInfo& mr) override {
        dev_->mr_remove(mr.lkey);
        std::lock_guard<std::mutex> lock(mu_);
        auto it = pinned_.find(mr.lkey);
        if (it != pinned_.end()) {
            cuda::host_unregister(it->second);
            pinned_.erase(it);
        }
    }
    void* shared_alloc(size_t bytes) override { return dev_->shared_alloc(bytes); }
    void shared_free(void* p, size_t bytes) noexcept override { dev_->shared_free(p, bytes); }
    std::unique_ptr<CqBackend> cq_create(const CqOptions& o) override {
        return std::make_unique<SoftCq>(dev_, o);
    }
    std::unique_ptr<QpBackend> qp_create(uint32_t pd, const QpOptions& o, CqBackend* scq,
                                         CqBackend* rcq) override {
        auto* s = dynamic_cast<SoftCq*>(scq);
        auto* r = dynamic_cast<SoftCq*>(rcq);
        GV_REQUIRE(s && r, "the QP's CQs belong to another backend");
        GV_REQUIRE(s->device() == dev_.get() && r->device() == dev_.get(),
                   "the QP's CQs belong to another software device than its protection domain (" +
                       dev_->name() + "): create them from the same context");
        return make_soft_qp(dev_, pd, o, s, r);
    }

private:
    std::shared_ptr<SoftDevice> dev_;
    std::mutex mu_;
    std::map<uint32_t, void*> pinned_;
};

}  // namespace

std::unique_ptr<BackendOps> open_soft(int gpu, size_t arena_bytes) {
    if (gpu >= 0) {
        if (!cuda::built())
            throw NotSupported("software device on GPU " + std::to_string(gpu) +
                               ": gpuverbs was built without CUDA; use ContextOptions::gpu = -1");
        int n = cuda::device_count();
        if (gpu >= n) {
            const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
            throw InvalidUsage(soft::gpu_not_visible(gpu, n, v != nullptr, v ? v : ""));
        }
    }
    return std::make_unique<SoftBackend>(gpu, arena_bytes);
}

}  // namespace gv::detail
