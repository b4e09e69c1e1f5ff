// The host objects: thin RAII wrappers that route to the context's backend.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>

#include "core/backend.hpp"
#include "cuda/cuda_rt.hpp"
#include "gpuverbs/device/completion_queue_device.cuh"
#include "gpuverbs/gpuverbs.hpp"

namespace gv {

using detail::hex;

const char* backend_name(Backend b) {
    switch (b) {
        case Backend::Auto: return "auto";
        case Backend::Soft: return "soft";
        case Backend::Mlx5: return "mlx5";
        case Backend::Verbs: return "verbs";
    }
    return "?";
}

const char* qp_state_name(QpState s) {
    switch (s) {
        case QpState::Reset: return "RESET";
        case QpState::Init: return "INIT";
        case QpState::Rtr: return "RTR";
        case QpState::Rts: return "RTS";
        case QpState::Sqd: return "SQD";
        case QpState::Sqe: return "SQE";
        case QpState::Error: return "ERROR";
    }
    return "?";
}

// ---- Context ----------------------------------------------------------------------------

Context::Context(const ContextOptions& o) : impl_(std::make_shared<Impl>()) {
    GV_REQUIRE(o.gpu >= -2, "ContextOptions::gpu " + std::to_string(o.gpu) +
                                " invalid: expected -2 (auto), -1 (CPU threads) or a GPU index");
    int gpu = o.gpu;
    if (gpu == -2) gpu = detail::cuda::device_count() > 0 ? 0 : -1;
    Backend b = o.backend;
    std::string device = o.device;
    if (b == Backend::Auto) {
        detail::BackendChoice c = detail::choose_backend(detail::probe_backend_facts(), o.device);
        b = c.backend;
        device = c.device;
        impl_->selection = "Backend::Auto chose " + std::string(backend_name(b)) + ": " + c.reason;
    } else {
        impl_->selection = std::string("Backend::") + backend_name(b) + " asked for";
    }
    switch (b) {
        case Backend::Auto: break;  // resolved above
        case Backend::Soft: impl_->ops = detail::open_soft(gpu, o.shared_arena_bytes); break;
        case Backend::Mlx5: impl_->ops = detail::open_mlx5(device, gpu, o.mlx5); break;
        case Backend::Verbs: impl_->ops = detail::open_verbs(device, gpu, o.verbs); break;
    }
    const std::string details = impl_->ops->details();
    if (!details.empty()) impl_->selection += "; " + details;
}

namespace detail {
Context make_context(std::unique_ptr<BackendOps> ops, std::string selection) {
    auto impl = std::make_shared<Context::Impl>();
    impl->ops = std::move(ops);
    impl->selection = std::move(selection);
    return Context(std::move(impl));
}
}  // namespace detail
Context::~Context() = default;
Backend Context::backend() const { return impl_->ops->kind(); }
int Context::gpu() const { return impl_->ops->gpu(); }
std::string Context::name() const { return impl_->ops->name(); }
const std::string& Context::selection() const { return impl_->selection; }
bool Context::cuda_built() { return detail::cuda::built(); }
bool Context::cuda_used() { return detail::cuda::used(); }
int Context::gpu_count() { return detail::cuda::device_count(); }

// ---- ProtectionDomain -------------------------------------------------------------------
struct ProtectionDomain::Impl {
    Context ctx;
    uint32_t pd;
};

ProtectionDomain::ProtectionDomain(const Context& ctx)
    : impl_(std::make_unique<Impl>(Impl{ctx, ctx.impl()->ops->pd_alloc()})) {}
ProtectionDomain::~ProtectionDomain() {
    if (impl_) impl_->ctx.impl()->ops->pd_free(impl_->pd);
}
ProtectionDomain::ProtectionDomain(ProtectionDomain&&) noexcept = default;
ProtectionDomain& ProtectionDomain::operator=(ProtectionDomain&&) noexcept = default;
const Context& ProtectionDomain::context() const { return impl_->ctx; }
uint32_t ProtectionDomain::handle() const { return impl_->pd; }

// ---- MemoryRegion -----------------------------------------------------------------------
struct MemoryRegion::Impl {
    Context ctx;
    void* addr;
    size_t length;
    uint32_t access;
    detail::MrInfo info;
};

MemoryRegion::MemoryRegion(const ProtectionDomain& pd, void* addr, size_t length, uint32_t access) {
    auto info = pd.context().impl()->ops->mr_register(pd.handle(), addr, length, access);
    impl_ = std::make_unique<Impl>(Impl{pd.context(), addr, length, access, info});
}
MemoryRegion::~MemoryRegion() {
    if (impl_) impl_->ctx.impl()->ops->mr_deregister(impl_->info);
}
MemoryRegion::MemoryRegion(MemoryRegion&&) noexcept = default;
MemoryRegion& MemoryRegion::operator=(MemoryRegion&& o) noexcept {
    if (this != &o) {
        if (impl_) impl_->ctx.impl()->ops->mr_deregister(impl_->info);
        impl_ = std::move(o.impl_);
    }
    return *this;
}
uint32_t MemoryRegion::lkey() const { return impl_->info.lkey; }
uint32_t MemoryRegion::rkey() const { return impl_->info.rkey; }
void* MemoryRegion::addr() const { return impl_->addr; }
size_t MemoryRegion::length() const { return impl_->length; }
uint32_t MemoryRegion::access() const { return impl_->access; }
bool MemoryRegion::is_device_memory() const { return impl_->info.device_memory; }
RemoteBuffer MemoryRegion::remote() const {
    return {reinterpret_cast<uint64_t>(impl_->addr), impl_->length, impl_->info.rkey, impl_->access};
}

// ---- SharedBuffer -----------------------------------------------------------------------
namespace detail {
namespace {
/// Bytes of the anonymous mapping that holds `bytes` (whole pages; bytes below SIZE_MAX - page).
size_t mapped_bytes(size_t bytes) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    return (bytes + page - 1) / page * page;
}
}  // namespace

void* BackendOps::shared_alloc(size_t bytes) {
    const int g = gpu();
    if (g >= 0) {
        cuda::DeviceGuard on(g);
        return cuda::dev_alloc(bytes);  // zeroed
    }
    if (bytes > SIZE_MAX - size_t(sysconf(_SC_PAGESIZE)))
        throw InvalidUsage("SharedBuffer of " + std::to_string(bytes) +
                           " bytes: more than this host can map");
    void* p = mmap(nullptr, mapped_bytes(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                   0);  // page-aligned, zeroed
    if (p == MAP_FAILED)
        throw SystemError("SharedBuffer of " + std::to_string(bytes) + " bytes on " + name() + ": mmap",
                          errno);
    return p;
}
void BackendOps::shared_free(void* p, size_t bytes) noexcept {
    if (!p) return;
    if (gpu() >= 0) {
        try {
            cuda::DeviceGuard on(gpu());
            cuda::dev_free(p);
        } catch (...) {
        }
        return;
    }
    munmap(p, mapped_bytes(bytes));
}
}  // namespace detail

struct SharedBuffer::Impl {
    Context ctx;
    void* p;
    size_t bytes;
};

SharedBuffer::SharedBuffer(const Context& ctx, size_t bytes) {
    GV_REQUIRE(bytes > 0, "SharedBuffer of 0 bytes: expected at least 1");
    void* p = ctx.impl()->ops->shared_alloc(bytes);
    impl_ = std::make_unique<Impl>(Impl{ctx, p, bytes});
}
SharedBuffer::~SharedBuffer() {
    if (impl_) impl_->ctx.impl()->ops->shared_free(impl_->p, impl_->bytes);
}
SharedBuffer::SharedBuffer(SharedBuffer&&) noexcept = default;
SharedBuffer& SharedBuffer::operator=(SharedBuffer&& o) noexcept {
    if (this != &o) {
        if (impl_) impl_->ctx.impl()->ops->shared_free(impl_->p, impl_->bytes);
        impl_ = std::move(o.impl_);
    }
    return *this;
}
void* SharedBuffer::data() const { return impl_ ? impl_->p : nullptr; }
size_t SharedBuffer::size() const { return impl_ ? impl_->bytes : 0; }

// ---- the QP-CQ registry ----------------------------------------------------------------
namespace detail {
void CqBackend::attach(QpBackend* qp, bool send, bool recv) {
    std::lock_guard<std::mutex> lock(mu_);
    attach_slots(qp->handle(), send, recv);
    if (std::find(qps_.begin(), qps_.end(), qp) == qps_.end()) qps_.push_back(qp);
}
void CqBackend::detach(QpBackend* qp) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find(qps_.begin(), qps_.end(), qp);
    if (it == qps_.end()) return;
    qps_.erase(it);
    try {  // writes CQ memory: fails on a failed CUDA context, when nothing needs undoing
        detach_slots(qp->handle().q.qpn);
    } catch (...) {
    }
}
void CqBackend::drive_attached() {
    std::lock_guard<std::mutex> lock(mu_);
    for (QpBackend* q : qps_) q->drive();
}
}  // namespace detail

// ---- CompletionQueue --------------------------------------------------------------------
// The Impls of CompletionQueue and QueuePair take their context when they are made: a
// default-constructed Context member would open the default device first (gpu = -2: GPU 0
// when there is one), a CUDA call in every CPU-only process, and a GPU context besides.
struct CompletionQueue::Impl {
    explicit Impl(const Context& c) : ctx(c) {}
    Context ctx;
    std::unique_ptr<detail::CqBackend> be;
};

CompletionQueue::CompletionQueue(const Context& ctx, const CqOptions& o)
    : impl_(std::make_unique<Impl>(ctx)) {
    impl_->be = ctx.impl()->ops->cq_create(o);
}
CompletionQueue::~CompletionQueue() = default;
CompletionQueue::CompletionQueue(CompletionQueue&&) noexcept = default;
CompletionQueue& CompletionQueue::operator=(CompletionQueue&&) noexcept = default;
dev::CqHandle CompletionQueue::device_handle() const { return impl_->be->handle(); }
uint32_t CompletionQueue::depth() const { return impl_->be->depth(); }
uint32_t CompletionQueue::cqn() const { return impl_->be->handle().cqn; }
MemoryKind CompletionQueue::memory() const { return impl_->be->memory(); }

std::vector<Completion> CompletionQueue::poll(uint32_t max) {
    GV_REQUIRE(impl_->be->host_pollable(),
               "CQ " + std::to_string(cqn()) + " lives in GPU memory: poll it from a kernel, or create "
               "it with CqOptions::memory = MemoryKind::Host to poll from CPU threads");
    std::vector<Completion> out(max);
    auto h = impl_->be->handle();
    out.resize(dev::poll_cq(h, out.data(), max));
    return out;
}

std::vector<Completion> CompletionQueue::wait(uint32_t n, uint64_t timeout_ms, bool allow_errors) {
    GV_REQUIRE(impl_->be->host_pollable(),
               "CQ " + std::to_string(cqn()) + " lives in GPU memory: wait on it from a kernel, or create "
               "it with CqOptions::memory = MemoryKind::Host");
    std::vector<Completion> out(n);
    auto h = impl_->be->handle();
    // Timeouts past the clock's range (kWaitForever among them) mean no deadline; added to
    // now() they would overflow into one in the past.
    const bool bounded = timeout_ms < (uint64_t(1) << 40);  // 2^40 ms: 34 years
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(bounded ? timeout_ms : 0);
    uint32_t got = 0;
    while (got < n) {
        uint32_t k = dev::poll_cq(h, out.data() + got, n - got);
        got += k;
        if (k) continue;
        if (dev::cq_overrun(h))
            throw CompletionError("CQ " + std::to_string(cqn()) + " overran (depth " +
                                  std::to_string(depth()) + "): completions were lost", 0);
        impl_->be->drive_attached();
        if (bounded && std::chrono::steady_clock::now() > deadline)
            throw TimeoutError("CQ " + std::to_string(cqn()) + ": " + std::to_string(got) + " of " +
                               std::to_string(n) + " completions within " + std::to_string(timeout_ms) + " ms");
        std::this_thread::yield();
    }
    if (!allow_errors) {
        for (auto& c : out) {
            if (!c.ok())
                throw CompletionError(std::string("completion error ") + mlx5::syndrome_name(c.status) +
                                          " (syndrome " + hex(c.status) + ") on QP " + hex(c.qpn) +
                                          ", WQE index " + std::to_string(c.wqe_counter),
                                      c.status);
        }
    }
    return out;
}

// ---- QueuePair --------------------------------------------------------------------------
struct QueuePair::Impl {
    explicit Impl(const Context& c) : ctx(c) {}  // (see CompletionQueue::Impl)
    Context ctx;
    QpOptions opts;
    // The CQs' Impls, not the CompletionQueue objects in opts: those may be moved from
    // after the QP was created, while an Impl stays where it is.
    CompletionQueue::Impl* cqs[2];
    std::unique_ptr<detail::QpBackend> be;
};

QueuePair::QueuePair(const ProtectionDomain& pd, const QpOptions& o) : impl_(std::make_unique<Impl>(pd.context())) {
    GV_REQUIRE(o.send_cq, "QpOptions::send_cq is required: expected a CompletionQueue of the QP's context");
    GV_REQUIRE(o.recv_cq, "QpOptions::recv_cq is required: expected a CompletionQueue of the QP's context");
    GV_REQUIRE(o.send_cq->impl() && o.recv_cq->impl(), "QpOptions names a moved-from CompletionQueue");
    impl_->opts = o;
    impl_->cqs[0] = o.send_cq->impl();
    impl_->cqs[1] = o.recv_cq->impl();
    detail::CqBackend* scq = impl_->cqs[0]->be.get();
    detail::CqBackend* rcq = impl_->cqs[1]->be.get();
    impl_->be = pd.context().impl()->ops->qp_create(pd.handle(), o, scq, rcq);
    try {
        if (scq == rcq) {
            scq->attach(impl_->be.get(), true, true);
        } else {
            scq->attach(impl_->be.get(), true, false);
            rcq->attach(impl_->be.get(), false, true);
        }
    } catch (...) {
        scq->detach(impl_->be.get());
        rcq->detach(impl_->be.get());
        throw;
    }
}
QueuePair::~QueuePair() {
    if (!impl_) return;
    // Detached first: pollers and host waits must not reach the QP while it goes away.
    for (CompletionQueue::Impl* cq : impl_->cqs) cq->be->detach(impl_->be.get());
    impl_->be.reset();
}
QueuePair::QueuePair(QueuePair&&) noexcept = default;
QueuePair& QueuePair::operator=(QueuePair&&) noexcept = default;

uint32_t QueuePair::qpn() const { return impl_->be->handle().q.qpn; }
QpState QueuePair::state() const { return impl_->be->state(); }
uint8_t QueuePair::error_syndrome() const { return impl_->be->error_syndrome(); }
void QueuePair::to_init(const InitAttr& a) { impl_->be->to_init(a); }
void QueuePair::to_rtr(const RtrAttr& a) { impl_->be->to_rtr(a); }
void QueuePair::to_rts(const RtsAttr& a) { impl_->be->to_rts(a); }
void QueuePair::to_error() { impl_->be->to_error(); }
void QueuePair::reset() { impl_->be->reset(); }
QpEndpoint QueuePair::endpoint() const { return impl_->be->endpoint(); }
dev::QpHandle QueuePair::device_handle() const { return impl_->be->handle(); }
const QpOptions& QueuePair::options() const { return impl_->opts; }

void QueuePair::connect(const QpEndpoint& peer, const InitAttr& init, RtrAttr rtr, const RtsAttr& rts) {
    QpEndpoint me = endpoint();
    GV_REQUIRE(peer.backend == me.backend, std::string("cannot connect a ") + backend_name(me.backend) +
                                               " QP to a " + backend_name(peer.backend) + " QP");
    // A software device reaches only QPs of the same device (of this process or, through its
    // arena, of another), except that its GPU devices ("soft-gpu0", "soft-gpu1") connect across
    // GPUs of one host: the endpoint's locator says which GPU, and the backend decides. A NIC's
    // peer is on another device, usually of another host.
    if (me.backend == Backend::Soft) {
        auto soft_gpu = [](const std::string& d) { return d.rfind("soft-gpu", 0) == 0; };
        const bool same = peer.device == me.device || (soft_gpu(me.device) && soft_gpu(peer.device));
        GV_REQUIRE(same, "cannot connect a QP on " + me.device + " to one on " + peer.device);
    }
    if (state() == QpState::Reset) to_init(init);
    rtr.remote_qpn = peer.qpn;
    rtr.rq_psn = peer.psn;
    rtr.path_mtu = std::min(rtr.path_mtu, peer.mtu);
    rtr.dlid = peer.lid;
    rtr.dgid = peer.gid;
    rtr.remote_extra = peer.extra;
    to_rtr(rtr);
    // The peer expects our packets from our endpoint's PSN (it used it as its rq_psn).
    RtsAttr r = rts;
    r.sq_psn = me.psn;
    to_rts(r);
}

}  // namespace gv
