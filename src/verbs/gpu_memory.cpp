// Mr::gpu: GPU memory registration. The CUDA driver functions are looked up through the runtime
// (cudaGetDriverEntryPointByVersion), so the library does not link libcuda.
#include <unistd.h>

#include <cerrno>
#include <string>

#include "cuda/cuda_rt.hpp"
#include "gpuverbs/errors.hpp"
#include "verbs/device.hpp"
#include "verbs/memory.hpp"

#if GV_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#endif

namespace gv::detail::verbs {

#if GV_HAVE_CUDA

namespace {

struct Driver {
    CUresult (*getErrorName)(CUresult, const char**) = nullptr;
    CUresult (*deviceGet)(CUdevice*, int) = nullptr;
    CUresult (*deviceGetAttribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
    CUresult (*getHandleForAddressRange)(void*, CUdeviceptr, size_t, CUmemRangeHandleType,
                                         unsigned long long) = nullptr;
};


const char* cu_name(const Driver& d, CUresult r) {
    const char* s = nullptr;
    if (d.getErrorName && d.getErrorName(r, &s) == CUDA_SUCCESS && s) return s;
    return "CUDA_ERROR_?";
}

// Makes `gpu` current for the scope (registration needs its context), restoring the caller's.
struct DeviceScope {
    int saved = -1;
    explicit DeviceScope(int gpu) {
        if (cudaGetDevice(&saved) != cudaSuccess) saved = -1;
        if (saved != gpu) {
            cudaError_t e = cudaSetDevice(gpu);
            if (e != cudaSuccess) throw CudaError(std::string("cudaSetDevice failed: ") + cudaGetErrorName(e), int(e));
        } else {
            saved = -1;
        }
    }
    ~DeviceScope() {
        if (saved >= 0) cudaSetDevice(saved);
    }
};

}  // namespace

Mr Mr::gpu(const Pd& pd, void* addr, size_t length, uint32_t access) {
    if (!pd.get()) throw InvalidUsage("verbs::Mr on a moved-from Pd");
    if (!addr || length == 0)
        throw InvalidUsage("GPU memory registration: expected a non-null address and length > 0");
    check_access(access);

    cudaPointerAttributes pa{};
    cudaError_t ce = cudaPointerGetAttributes(&pa, addr);
    if (ce != cudaSuccess || pa.type != cudaMemoryTypeDevice) {
        cudaGetLastError();
        throw InvalidUsage("Mr::gpu(" + hex(reinterpret_cast<uintptr_t>(addr)) +
                           "): expected GPU device memory (cudaPointerGetAttributes says " +
                           (ce != cudaSuccess ? std::string(cudaGetErrorName(ce)) : "not device memory") +
                           "); use Mr::host for host memory");
    }
    DeviceScope scope(pa.device);

    Driver d;
    detail::cuda::driver_fn("cuGetErrorName", d.getErrorName);
    bool have_dmabuf_calls = detail::cuda::driver_fn("cuDeviceGet", d.deviceGet) &&
                             detail::cuda::driver_fn("cuDeviceGetAttribute", d.deviceGetAttribute) &&
                             detail::cuda::driver_fn("cuMemGetHandleForAddressRange", d.getHandleForAddressRange);
    GpuRegFacts f;
    f.cuda_built = true;
    f.peermem_loaded = peermem_loaded();
    if (have_dmabuf_calls) {
        CUdevice dev = 0;
        int v = 0;
        if (d.deviceGet(&dev, pa.device) == CUDA_SUCCESS &&
            d.deviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev) == CUDA_SUCCESS)
            f.dmabuf_supported = v != 0;
    }
    MrPath path = choose_gpu_path(f);  // throws NotSupported naming both paths

    std::string dmabuf_failure;
    if (path == MrPath::GpuDmaBuf) {
        // The dma-buf covers the host-page-aligned range; the MR starts at addr inside it, and
        // its iova is addr, so peers use virtual addresses as with ibv_reg_mr.
        const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
        const uint64_t a = reinterpret_cast<uintptr_t>(addr);
        const uint64_t base = a & ~(page - 1);
        const uint64_t end = (a + length + page - 1) & ~(page - 1);
        int fd = -1;
        CUresult r = d.getHandleForAddressRange(&fd, CUdeviceptr(base), size_t(end - base),
                                                CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
        if (r != CUDA_SUCCESS) {
            dmabuf_failure = std::string("cuMemGetHandleForAddressRange(") + hex(base) + ", " +
                             std::to_string(end - base) + " bytes, DMA_BUF_FD) failed: " + cu_name(d, r);
        } else {
            errno = 0;
            ibv_mr* mr = ibv_reg_dmabuf_mr(pd.get(), a - base, length, a, fd, int(access));
            int e = errno ? errno : EINVAL;
            close(fd);
            if (mr) return Mr(mr, addr, length, access, MrPath::GpuDmaBuf);
            dmabuf_failure = "ibv_reg_dmabuf_mr(" + pd.device_name() + ", offset " + std::to_string(a - base) +
                             ", " + std::to_string(length) + " bytes, iova " + hex(a) + ") failed: " +
                             errno_text(e) + " (the RDMA driver or kernel may lack dma-buf support)";
            if (!f.peermem_loaded) throw VerbsError(dmabuf_failure + "; and nvidia-peermem is not loaded (fix: `modprobe nvidia-peermem`)", e);
        }
        if (!f.peermem_loaded)
            throw NotSupported(dmabuf_failure + "; and nvidia-peermem is not loaded (fix: `modprobe nvidia-peermem`)");
    }
    errno = 0;
    ibv_mr* mr = ibv_reg_mr(pd.get(), addr, length, int(access));
    if (!mr) {
        int e = errno ? errno : EINVAL;
        throw VerbsError("ibv_reg_mr of GPU memory through nvidia-peermem (" + pd.device_name() + ", " +
                             hex(reinterpret_cast<uintptr_t>(addr)) + ", " + std::to_string(length) +
                             " bytes) failed: " + errno_text(e) +
                             (dmabuf_failure.empty() ? "" : "; dma-buf before it: " + dmabuf_failure),
                         e);
    }
    return Mr(mr, addr, length, access, MrPath::GpuPeerMem);
}

#else  // !GV_HAVE_CUDA

Mr Mr::gpu(const Pd&, void*, size_t, uint32_t) {
    GpuRegFacts f;
    f.peermem_loaded = peermem_loaded();
    choose_gpu_path(f);  // throws: no CUDA in this build
    throw NotSupported("GPU memory registration needs CUDA");
}

#endif

}  // namespace gv::detail::verbs
