// The verbs backend's CQs: the user-visible ring (the software device's layout, in host
// memory) and its registry of QPs; and the host memory both CQs and QPs live in.
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/cq_clean.hpp"
#include "cuda/cuda_rt.hpp"
#include "gpuverbs/device/completion_queue_device.cuh"
#include "verbs/verbs_backend.hpp"

namespace gv::detail::verbs {

// ---- host memory ----------------------------------------------------------------------------

HostMem::HostMem(size_t bytes, int gpu) : bytes_(bytes) {
    if (gpu >= 0) {
        cuda::set_device(gpu);
        void* d = nullptr;
        p_ = cuda::host_alloc(bytes, &d);  // zeroed
        pinned_ = true;
        if (d != p_) {
            cuda::host_free(p_);
            p_ = nullptr;
            throw NotSupported("the verbs backend needs unified addressing (pinned host memory at the same "
                               "address on CPU and GPU)");
        }
        return;
    }
    const size_t rounded = (bytes + 4095) & ~size_t(4095);
    p_ = std::aligned_alloc(4096, rounded);
    if (!p_) throw SystemError("verbs backend: allocating " + std::to_string(rounded) + " bytes of queue memory", ENOMEM);
    std::memset(p_, 0, rounded);
}

HostMem::~HostMem() {
    if (!p_) return;
    if (pinned_) {
        try {
            cuda::host_free(p_);
        } catch (...) {
        }
    } else {
        std::free(p_);
    }
}

HostMem::HostMem(HostMem&& o) noexcept
    : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), pinned_(o.pinned_) {}

HostMem& HostMem::operator=(HostMem&& o) noexcept {
    if (this != &o) {
        HostMem tmp(std::move(*this));
        p_ = std::exchange(o.p_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
        pinned_ = o.pinned_;
    }
    return *this;
}

// ---- CQ -------------------------------------------------------------------------------------

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
// Layout after the ring: the doorbell record (+0: consumer index word), the consumer index
// pollers share (+64), the overrun flag (+72), then (+128) the QP slot table.
constexpr size_t kCiOff = 64, kOverrunOff = 72, kSlotsOff = 128;
}  // namespace

VerbsCq::VerbsCq(int gpu, const CqOptions& o) {
    GV_REQUIRE(o.depth >= 1 && o.depth <= (1u << 22),
               "CQ depth " + std::to_string(o.depth) + " out of range: expected 1 .. 4194304");
    if (o.memory == MemoryKind::Device)
        throw NotSupported("CQ in GPU memory (MemoryKind::Device) on the verbs backend: its proxy thread writes "
                           "the CQEs, so the ring is pinned host memory (use MemoryKind::Default or Host)");
    cnt_ = std::max<uint32_t>(2, next_pow2(o.depth));
    ring_bytes_ = size_t(cnt_) * 64;
    mem_ = HostMem(ring_bytes_ + kSlotsOff + kSlots * sizeof(dev::CqQpSlot), gpu);
    // Every CQE starts invalid (opcode 0xf) and owned by hardware.
    for (uint32_t i = 0; i < cnt_; ++i) *mem_.at(size_t(i) * 64 + 63) = MLX5_CQE_INVALID << 4;
    ring_.cqes = mem_.at<mlx5_cqe64>(0);
    ring_.dbrec = mem_.at<uint32_t>(ring_bytes_);
    ring_.overrun = mem_.at<uint32_t>(ring_bytes_ + kOverrunOff);
    ring_.log_cnt = log2u(cnt_);
    static std::atomic<uint32_t> cqns{0};
    cqn_ = 0x8000 + cqns.fetch_add(1);
}

dev::CqHandle VerbsCq::handle() const {
    dev::CqHandle h{};
    h.cqes = mem_.at<mlx5_cqe64>(0);
    h.dbrec = mem_.at<uint32_t>(ring_bytes_);
    h.ci = mem_.at<unsigned long long>(ring_bytes_ + kCiOff);
    h.overrun = mem_.at<uint32_t>(ring_bytes_ + kOverrunOff);
    h.slots = mem_.at<dev::CqQpSlot>(ring_bytes_ + kSlotsOff);
    h.slot_mask = kSlots - 1;
    h.log_cnt = log2u(cnt_);
    h.sys = 1;
    h.host_reachable = 1;
    h.cqn = cqn_;
    return h;
}

// The slot table pollers free queue slots by (dev::cq_retire), as the software device keeps it.
void VerbsCq::attach_slots(const dev::QpHandle& qp, bool send, bool recv) {
    std::lock_guard<std::mutex> lock(mu_);
    auto* slots = mem_.at<dev::CqQpSlot>(ring_bytes_ + kSlotsOff);
    const uint32_t qpn = qp.q.qpn;
    for (uint32_t i = 0; i < kSlots; ++i) {
        dev::CqQpSlot& s = slots[(qpn + i) & (kSlots - 1)];
        if (s.qpn != 0 && s.qpn != 0xffffffffu && s.qpn != qpn) continue;
        dev::CqQpSlot n = s.qpn == qpn ? s : dev::CqQpSlot{};
        n.sq_log_bb = qp.q.sq_log_bb;
        n.sq = qp.q.sq;
        if (send) n.sq_retired = &qp.q.ctr->sq_retired;
        if (recv) n.rq_retired = &qp.q.ctr->rq_retired;
        n.qpn = qpn;
        // The pointers first, the QP number (what pollers look the slot up by) last.
        s.sq_log_bb = n.sq_log_bb;
        s.sq = n.sq;
        s.sq_retired = n.sq_retired;
        s.rq_retired = n.rq_retired;
        atom::store_release(&s.qpn, qpn, true);
        return;
    }
    throw InvalidUsage("CQ " + std::to_string(cqn_) + " already serves " + std::to_string(kSlots) +
                       " QPs, its maximum");
}

void VerbsCq::detach_slots(uint32_t qpn) {
    std::lock_guard<std::mutex> lock(mu_);
    auto* slots = mem_.at<dev::CqQpSlot>(ring_bytes_ + kSlotsOff);
    for (uint32_t i = 0; i < kSlots; ++i) {
        dev::CqQpSlot& s = slots[(qpn + i) & (kSlots - 1)];
        if (s.qpn == 0) return;
        if (s.qpn != qpn) continue;
        atom::store_release(&s.qpn, 0xffffffffu, true);  // tombstone: probing continues past it
        s.sq = nullptr;
        s.sq_retired = nullptr;
        s.rq_retired = nullptr;
        return;
    }
}

// As SoftCq::clean: later entries move towards the producer over the removed ones, the
// consumer index advances past the gap.
void VerbsCq::clean(uint32_t qpn) {
    std::lock_guard<std::mutex> lock(mu_);
    auto* ci_p = mem_.at<unsigned long long>(ring_bytes_ + kCiOff);
    const unsigned long long ci = atom::load_acquire(ci_p, true);
    // The ring itself (host memory): clean_cq_ring stores the moved entries there.
    const uint32_t freed =
        clean_cq_ring(mem_.at<mlx5_cqe64>(0), log2u(cnt_), ci, qpn, true, [](size_t, const mlx5_cqe64&) {});
    if (!freed) return;
    const unsigned long long nci = ci + freed;
    atom::store_release(ci_p, nci, true);
    mlx5::update_cq_dbrec(mem_.at<uint32_t>(ring_bytes_), uint32_t(nci), true);
}

}  // namespace gv::detail::verbs
