#include "verbs/memory.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <utility>

#include "gpuverbs/errors.hpp"
#include "verbs/device.hpp"

namespace gv::detail::verbs {

Pd::Pd(const Device& dev) : dev_name_(dev.name()) {
    if (!dev.get()) throw InvalidUsage("verbs::Pd on a moved-from Device");
    errno = 0;
    pd_ = ibv_alloc_pd(dev.get());
    if (!pd_) {
        int e = errno ? errno : ENOMEM;
        throw VerbsError("ibv_alloc_pd(" + dev_name_ + ") failed: " + errno_text(e), e);
    }
}

Pd::~Pd() {
    if (pd_) ibv_dealloc_pd(pd_);
}

Pd::Pd(Pd&& o) noexcept : pd_(std::exchange(o.pd_, nullptr)), dev_name_(std::move(o.dev_name_)) {}

Pd& Pd::operator=(Pd&& o) noexcept {
    if (this != &o) {
        if (pd_) ibv_dealloc_pd(pd_);
        pd_ = std::exchange(o.pd_, nullptr);
        dev_name_ = std::move(o.dev_name_);
    }
    return *this;
}

const char* mr_path_name(MrPath p) {
    switch (p) {
    case MrPath::Host: return "host (ibv_reg_mr)";
    case MrPath::GpuDmaBuf: return "GPU dma-buf (ibv_reg_dmabuf_mr)";
    case MrPath::GpuPeerMem: return "GPU nvidia-peermem (ibv_reg_mr)";
    }
    return "?";
}

bool peermem_loaded() {
    struct stat st{};
    return stat("/sys/module/nvidia_peermem", &st) == 0 ||
           stat("/sys/kernel/mm/memory_peers/nv_mem", &st) == 0;
}

MrPath choose_gpu_path(const GpuRegFacts& f) {
    if (!f.cuda_built)
        throw NotSupported("GPU memory registration: this build of gpuverbs has no CUDA "
                           "(configure with nvcc found and GV_ENABLE_CUDA=ON)");
    if (f.dmabuf_supported) return MrPath::GpuDmaBuf;
    if (f.peermem_loaded) return MrPath::GpuPeerMem;
    throw NotSupported(
        "GPU memory cannot be registered for RDMA: (1) dma-buf: the GPU reports "
        "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 0 (needs the NVIDIA open kernel modules, "
        "driver >= 515, Linux >= 5.12 and rdma-core >= 34); (2) nvidia-peermem: not loaded "
        "(neither /sys/module/nvidia_peermem nor /sys/kernel/mm/memory_peers/nv_mem exists; "
        "fix: `modprobe nvidia-peermem`)");
}

void check_access(uint32_t access) {
    const uint32_t known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_RELAXED_ORDERING;
    if (access & ~known)
        throw InvalidUsage("memory access " + hex(access) + " has unknown bits " + hex(access & ~known) +
                           "; expected local write, remote write/read/atomic, relaxed ordering");
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
        throw InvalidUsage("memory access " + hex(access) +
                           ": remote write or remote atomic requires local write (as in verbs)");
}

Mr Mr::host(const Pd& pd, void* addr, size_t length, uint32_t access) {
    if (!pd.get()) throw InvalidUsage("verbs::Mr on a moved-from Pd");
    if (!addr || length == 0)
        throw InvalidUsage("memory registration of " + hex(uint64_t(reinterpret_cast<uintptr_t>(addr))) +
                           ", " + std::to_string(length) + " bytes: expected a non-null address and length > 0");
    check_access(access);
    errno = 0;
    ibv_mr* mr = ibv_reg_mr(pd.get(), addr, length, int(access));
    if (!mr) {
        int e = errno ? errno : EINVAL;
        throw VerbsError("ibv_reg_mr(" + pd.device_name() + ", " + hex(reinterpret_cast<uintptr_t>(addr)) +
                             ", " + std::to_string(length) + " bytes, access " + hex(access) +
                             ") failed: " + errno_text(e) +
                             (e == ENOMEM || e == EPERM ? "; expected enough locked memory (ulimit -l)" : ""),
                         e);
    }
    return Mr(mr, addr, length, access, MrPath::Host);
}

Mr::~Mr() {
    if (mr_) ibv_dereg_mr(mr_);
}

Mr::Mr(Mr&& o) noexcept
    : mr_(std::exchange(o.mr_, nullptr)), addr_(o.addr_), length_(o.length_), access_(o.access_), path_(o.path_) {}

Mr& Mr::operator=(Mr&& o) noexcept {
    if (this != &o) {
        if (mr_) ibv_dereg_mr(mr_);
        mr_ = std::exchange(o.mr_, nullptr);
        addr_ = o.addr_;
        length_ = o.length_;
        access_ = o.access_;
        path_ = o.path_;
    }
    return *this;
}

}  // namespace gv::detail::verbs
