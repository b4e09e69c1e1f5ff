// Protection domain and memory regions (RAII): host memory with ibv_reg_mr; GPU memory with
// ibv_reg_dmabuf_mr on a CUDA dma-buf, else ibv_reg_mr through nvidia-peermem (docs/verbs.md).
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace gv::detail::verbs {

class Device;

class Pd {
public:
    explicit Pd(const Device& dev);
    ~Pd();
    Pd(Pd&&) noexcept;
    Pd& operator=(Pd&&) noexcept;
    Pd(const Pd&) = delete;
    Pd& operator=(const Pd&) = delete;

    ibv_pd* get() const { return pd_; }
    const std::string& device_name() const { return dev_name_; }

private:
    ibv_pd* pd_ = nullptr;
    std::string dev_name_;
};

/// How a region was registered.
enum class MrPath { Host, GpuDmaBuf, GpuPeerMem };
const char* mr_path_name(MrPath p);

/// The facts the GPU registration order depends on.
struct GpuRegFacts {
    bool cuda_built = false;      ///< this build has CUDA (GV_HAVE_CUDA)
    bool dmabuf_supported = false;  ///< CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED of the pointer's GPU
    bool peermem_loaded = false;  ///< nvidia-peermem (or the legacy nv_peer_mem) is loaded
};
/// dma-buf first, nvidia-peermem second; NotSupported naming both missing paths and their
/// fixes when neither is there (or when the build has no CUDA). Pure.
MrPath choose_gpu_path(const GpuRegFacts& f);
/// /sys/module/nvidia_peermem or /sys/kernel/mm/memory_peers/nv_mem exists.
bool peermem_loaded();

/// Checks an access mask (bits of enum ibv_access_flags, as gv::Access): only the local write,
/// remote write, remote read and remote atomic bits (plus IBV_ACCESS_RELAXED_ORDERING), and
/// remote write or atomic only with local write (verbs refuses them otherwise). InvalidUsage.
void check_access(uint32_t access);

class Mr {
public:
    /// Registers host memory [addr, addr + length) with ibv_reg_mr.
    static Mr host(const Pd& pd, void* addr, size_t length, uint32_t access);
    /// Registers GPU memory (a cudaMalloc'd or cuMemCreate'd range): dma-buf when the GPU
    /// supports it (ibv_reg_dmabuf_mr on the page-aligned range, offset of addr into it,
    /// iova = addr, so peers address it by its virtual address), else ibv_reg_mr when
    /// nvidia-peermem is loaded, else NotSupported naming both. A failing ibv_reg_dmabuf_mr
    /// falls back to nvidia-peermem when loaded, else throws VerbsError with its errno.
    static Mr gpu(const Pd& pd, void* addr, size_t length, uint32_t access);

    ~Mr();
    Mr(Mr&&) noexcept;
    Mr& operator=(Mr&&) noexcept;
    Mr(const Mr&) = delete;
    Mr& operator=(const Mr&) = delete;

    ibv_mr* get() const { return mr_; }
    uint32_t lkey() const { return mr_ ? mr_->lkey : 0; }
    uint32_t rkey() const { return mr_ ? mr_->rkey : 0; }
    void* addr() const { return addr_; }
    size_t length() const { return length_; }
    uint32_t access() const { return access_; }
    MrPath path() const { return path_; }

private:
    Mr(ibv_mr* mr, void* addr, size_t length, uint32_t access, MrPath path)
        : mr_(mr), addr_(addr), length_(length), access_(access), path_(path) {}

    ibv_mr* mr_ = nullptr;
    void* addr_ = nullptr;
    size_t length_ = 0;
    uint32_t access_ = 0;
    MrPath path_ = MrPath::Host;
};

}  // namespace gv::detail::verbs
