// The verbs backend (Backend::Verbs): the table of operations over a Provider (a libibverbs
// device, or the sink of the tests) and the context's proxy threads.
#include "verbs/verbs_backend.hpp"

#include "cuda/cuda_rt.hpp"
#include "verbs/device.hpp"

namespace gv::detail::verbs {

VerbsBackend::VerbsBackend(std::unique_ptr<Provider> provider, int gpu, const VerbsOptions& o)
    : provider_(std::move(provider)), gpu_(gpu), opts_(o) {
    GV_REQUIRE(o.proxy_threads >= 1 && o.proxy_threads <= 256,
               "VerbsOptions::proxy_threads " + std::to_string(o.proxy_threads) + " out of range: expected 1 .. 256");
    flush_gpu_ = decide_gpudirect_flush(gpu, o.gpudirect_flush);
    proxy_ = std::make_unique<Proxy>(o.proxy_threads, o.max_idle_sleep_us, o.cpu_posts_inline, gpu < 0);
}

int decide_gpudirect_flush(int gpu, VerbsOptions::GpuDirectFlush mode) {
    using F = VerbsOptions::GpuDirectFlush;
    if (gpu < 0 || mode == F::Never) return -1;
    if (mode == F::Always) {
        if (!cuda::gpudirect_flush_supported(gpu))
            throw NotSupported("VerbsOptions::gpudirect_flush = Always, but GPU " + std::to_string(gpu) +
                               " cannot flush GPUDirect RDMA writes (cudaDevAttrGPUDirectRDMAFlushWritesOptions "
                               "lacks the host option): use Auto or Never");
        return gpu;
    }
    const int ordering = cuda::gpudirect_writes_ordering(gpu);
    if (ordering >= 100) return -1;  // the owning GPU's kernels see the writes in order
    if (cuda::gpudirect_flush_supported(gpu)) return gpu;
    std::fprintf(stderr,
                 "gpuverbs: GPU %d does not order GPUDirect RDMA writes for its kernels "
                 "(cudaDevAttrGPUDirectRDMAWritesOrdering = %d) and cannot flush them "
                 "(cudaDevAttrGPUDirectRDMAFlushWritesOptions lacks the host option): a kernel may see a "
                 "READ's, atomic's or receive's completion before its data in GPU memory\n",
                 gpu, ordering);
    return -1;
}

VerbsBackend::~VerbsBackend() { proxy_.reset(); }

MrInfo VerbsBackend::mr_register(uint32_t pd, void* addr, size_t length, uint32_t access) {
    GV_REQUIRE(addr != nullptr, "memory region at address 0: expected host memory or GPU memory");
    GV_REQUIRE(length > 0, "memory region of length 0: expected at least 1 byte");
    GV_REQUIRE((access & ~uint32_t(kAllAccess)) == 0,
               "access " + hex(access) + " has unknown bits: expected kLocalWrite, kRemoteWrite, "
               "kRemoteRead, kRemoteAtomic");
    int owner = -1;
    const auto kind = cuda::built() ? cuda::pointer_kind(addr, &owner) : cuda::PtrKind::Host;
    GV_REQUIRE(kind != cuda::PtrKind::Managed,
               "managed (cudaMallocManaged) memory cannot be registered: use cudaMalloc or host memory");
    // gv::Access has the bit values of ibv_access_flags.
    return provider_->mr_register(pd, addr, length, access, kind == cuda::PtrKind::Device);
}

std::unique_ptr<CqBackend> VerbsBackend::cq_create(const CqOptions& o) { return std::make_unique<VerbsCq>(gpu_, o); }

std::unique_ptr<QpBackend> VerbsBackend::qp_create(uint32_t pd, const QpOptions& o, CqBackend* scq, CqBackend* rcq) {
    auto* s = dynamic_cast<VerbsCq*>(scq);
    auto* r = dynamic_cast<VerbsCq*>(rcq);
    GV_REQUIRE(s && r, "the QP's CQs belong to another backend");
    return std::make_unique<VerbsQp>(*this, pd, o, s, r);
}

Proxy* proxy_of(const Context& ctx) {
    auto* be = dynamic_cast<VerbsBackend*>(ctx.impl()->ops.get());
    return be ? &be->proxy() : nullptr;
}

ProxyQp* proxy_qp_of(const dev::QpHandle& h) {
    if (h.backend != Backend::Verbs || h.verbs.host_arg == nullptr) return nullptr;
    return &static_cast<VerbsQp*>(h.verbs.host_arg)->proxy_qp();
}

}  // namespace gv::detail::verbs

namespace gv::detail {

std::unique_ptr<BackendOps> open_verbs_on(std::unique_ptr<verbs::Provider> provider, int gpu,
                                          const VerbsOptions& options) {
    if (gpu >= 0) {
        if (!cuda::built())
            throw NotSupported("verbs backend with GPU " + std::to_string(gpu) +
                               ": gpuverbs was built without CUDA; use ContextOptions::gpu = -1");
        const int n = cuda::device_count();
        GV_REQUIRE(gpu < n, "GPU " + std::to_string(gpu) + " asked for, but " + std::to_string(n) +
                                " GPU(s) are visible");
        cuda::set_device(gpu);
    }
    return std::make_unique<verbs::VerbsBackend>(std::move(provider), gpu, options);
}

std::unique_ptr<BackendOps> open_verbs(const std::string& device, int gpu, const VerbsOptions& options) {
    std::unique_ptr<verbs::Provider> p;
    try {
        p = verbs::open_device_provider(device);
    } catch (const NotSupported& e) {
        throw NotSupported(std::string("Backend::Verbs needs an RDMA device: ") + e.what());
    }
    return open_verbs_on(std::move(p), gpu, options);
}

}  // namespace gv::detail
