// The CUDA side of the ConnectX backend: what the GPU offers (dma-buf, GPUDirect write
// ordering, its PCIe path), host memory and doorbell pages mapped for kernels, GPU memory
// exported as a dma-buf for a DevX umem. The driver API is reached through the runtime
// (cudaGetDriverEntryPointByVersion), so the library does not link libcuda. A build without
// CUDA compiles the same calls; they report that CUDA is missing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace gv::detail::mlx5be {

/// Facts about one GPU (what gpuverbs_info prints and the decisions take).
struct GpuFacts {
    bool present = false;       ///< the GPU exists (CUDA built, driver up, index valid)
    std::string name;           ///< "NVIDIA H200"
    std::string pci_bus_id;     ///< "0000:19:00.0" (lower case)
    std::string sysfs;          ///< /sys/bus/pci/devices/<id> resolved (its PCIe path)
    int dmabuf = -1;            ///< CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED (-1: unknown)
    int gdr_writes_ordering = -1;  ///< CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING
    int gdr_supported = -1;     ///< CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED
    int driver_version = 0;     ///< cudaDriverGetVersion (e.g. 12080)
    std::string error;          ///< why not present
};
GpuFacts probe_gpu(int gpu);
/// CUDA GPUs visible (0 without CUDA or a driver), and why there are none when so.
int gpu_count(std::string* why_none = nullptr);

/// The kernel-visible pointer of host memory somebody else allocated (libmlx5's rings, a
/// UAR page), registered with the GPU once per page run and reference-counted, so rings that
/// share a page (libmlx5 keeps several doorbell records in one) are registered by the first
/// user and unregistered by the last. On a CPU-only mapper (gpu < 0) nothing is registered:
/// the pointer is returned as it is.
class HostMapper {
public:
    explicit HostMapper(int gpu) : gpu_(gpu) {}
    ~HostMapper();
    /// io: a device's MMIO page (cudaHostRegisterIoMemory). Throws CudaError naming the call
    /// and its error when the registration fails.
    void* map(void* p, size_t n, bool io);
    void unmap(void* p, size_t n) noexcept;

private:
    struct Run {
        uintptr_t base;
        size_t bytes;
        uintptr_t dev;
        int users;
        bool io;
        bool owned;  ///< registered here (else pinned by its allocator: never unregistered here)
    };
    int gpu_;
    std::mutex mu_;
    std::map<uintptr_t, Run> runs_;  // by base
};

/// Tries to map `n` bytes of an MMIO page (a UAR) into `gpu` with
/// cudaHostRegister(Portable|Mapped|IoMemory) + cudaHostGetDevicePointer, and unmaps it
/// again. "" when it worked; otherwise the failed call and its error.
std::string try_map_io(int gpu, void* page, size_t n);

/// GPU memory (cudaMalloc, `align`-aligned, filled with `fill`), and what frees it.
struct GpuBlock {
    void* ptr = nullptr;   ///< aligned start
    void* base = nullptr;  ///< what cudaMalloc returned
    size_t bytes = 0;
};
GpuBlock gpu_alloc(int gpu, size_t bytes, size_t align, int fill);
void gpu_free(GpuBlock& b) noexcept;

/// A dma-buf file descriptor for [ptr, ptr + bytes) of GPU memory
/// (cuMemGetHandleForAddressRange); -1 and *err set when it cannot be had.
int gpu_dmabuf_fd(void* ptr, size_t bytes, std::string* err);

}  // namespace gv::detail::mlx5be
