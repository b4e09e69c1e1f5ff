#include "mlx5/gpu_access.hpp"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cctype>
#include <vector>

#include "cuda/cuda_rt.hpp"
#include "gpuverbs/errors.hpp"

#if GV_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#endif

namespace gv::detail::mlx5be {

#if GV_HAVE_CUDA
namespace {
std::string lower(std::string s) {
    for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    return s;
}
size_t page_size() { return size_t(sysconf(_SC_PAGESIZE)); }
}  // namespace
#endif

#if GV_HAVE_CUDA

namespace {


std::string cuda_err(cudaError_t e) { return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"; }

int driver_attribute(int gpu, CUdevice_attribute attr) {
    CUresult (*get)(CUdevice*, int) = nullptr;
    CUresult (*attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
    if (!detail::cuda::driver_fn("cuDeviceGet", get) || !detail::cuda::driver_fn("cuDeviceGetAttribute", attribute))
        return -1;
    CUdevice d = 0;
    int v = 0;
    if (get(&d, gpu) != CUDA_SUCCESS || attribute(&v, attr, d) != CUDA_SUCCESS) return -1;
    return v;
}

}  // namespace

int gpu_count(std::string* why_none) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (why_none) *why_none = "cudaGetDeviceCount failed: " + cuda_err(e);
        return 0;
    }
    if (n == 0 && why_none) *why_none = "the CUDA driver reports no GPU";
    return n;
}

GpuFacts probe_gpu(int gpu) {
    GpuFacts f;
    std::string why;
    int n = gpu_count(&why);
    if (gpu < 0 || gpu >= n) {
        f.error = n == 0 ? why : "GPU " + std::to_string(gpu) + " asked for, " + std::to_string(n) + " visible";
        return f;
    }
    f.present = true;
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, gpu) == cudaSuccess) f.name = p.name;
    cudaGetLastError();
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, gpu) == cudaSuccess) f.pci_bus_id = lower(bus);
    cudaGetLastError();
    if (!f.pci_bus_id.empty()) {
        char real[PATH_MAX];
        std::string link = "/sys/bus/pci/devices/" + f.pci_bus_id;
        if (realpath(link.c_str(), real)) f.sysfs = real;
    }
    f.dmabuf = driver_attribute(gpu, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED);
    f.gdr_writes_ordering = cuda::gpudirect_writes_ordering(gpu);  // the verbs proxy's flush decision reads the same
    f.gdr_supported = driver_attribute(gpu, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED);
    cudaDriverGetVersion(&f.driver_version);
    cudaGetLastError();
    return f;
}

HostMapper::~HostMapper() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [base, r] : runs_)
        if (r.owned) cudaHostUnregister(reinterpret_cast<void*>(r.base));
    runs_.clear();
}

void* HostMapper::map(void* p, size_t n, bool io) {
    if (gpu_ < 0) return p;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const size_t pg = page_size();
    const uintptr_t lo = a & ~(pg - 1), hi = (a + n + pg - 1) & ~(pg - 1);
    std::lock_guard<std::mutex> lock(mu_);
    // A run that covers the whole range: one more user.
    for (auto& [base, r] : runs_) {
        if (r.base <= lo && hi <= r.base + r.bytes) {
            ++r.users;
            return reinterpret_cast<void*>(r.dev + (a - r.base));
        }
    }
    // Partial overlaps with an earlier run cannot be registered again (CUDA refuses
    // overlapping registrations): such callers register page-sized pieces (a doorbell record,
    // a UAR), which never overlap partially.
    for (auto& [base, r] : runs_)
        if (lo < r.base + r.bytes && r.base < hi)
            throw InvalidUsage("host memory " + hex(lo) + "+" + std::to_string(hi - lo) +
                               " overlaps a registered range " + hex(r.base) + "+" + std::to_string(r.bytes) +
                               " only partly");
    cudaSetDevice(gpu_);
    unsigned flags = cudaHostRegisterPortable | cudaHostRegisterMapped | (io ? cudaHostRegisterIoMemory : 0);
    cudaError_t e = cudaHostRegister(reinterpret_cast<void*>(lo), hi - lo, flags);
    bool owned = true;
    if (e == cudaErrorHostMemoryAlreadyRegistered && !io) {
        // Pinned by someone else (cudaHostAlloc'd memory): use its mapping, never unregister it.
        cudaGetLastError();
        owned = false;
    } else if (e != cudaSuccess) {
        cudaGetLastError();
        throw CudaError("cudaHostRegister(" + hex(lo) + ", " + std::to_string(hi - lo) + " bytes, Portable|Mapped" +
                            (io ? "|IoMemory" : "") + ") failed: " + cuda_err(e),
                        int(e));
    }
    void* d = nullptr;
    e = cudaHostGetDevicePointer(&d, reinterpret_cast<void*>(lo), 0);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (owned) cudaHostUnregister(reinterpret_cast<void*>(lo));
        throw CudaError("cudaHostGetDevicePointer(" + hex(lo) + ") failed: " + cuda_err(e), int(e));
    }
    runs_[lo] = Run{lo, hi - lo, reinterpret_cast<uintptr_t>(d), 1, io, owned};
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(d) + (a - lo));
}

void HostMapper::unmap(void* p, size_t n) noexcept {
    if (gpu_ < 0) return;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = runs_.begin(); it != runs_.end(); ++it) {
        Run& r = it->second;
        if (r.base <= a && a + n <= r.base + r.bytes) {
            if (--r.users == 0) {
                if (r.owned) cudaHostUnregister(reinterpret_cast<void*>(r.base));
                cudaGetLastError();
                runs_.erase(it);
            }
            return;
        }
    }
}

std::string try_map_io(int gpu, void* page, size_t n) {
    if (gpu < 0) return "no GPU";
    const uintptr_t a = reinterpret_cast<uintptr_t>(page);
    const size_t pg = page_size();
    const uintptr_t lo = a & ~(pg - 1), hi = (a + n + pg - 1) & ~(pg - 1);
    cudaSetDevice(gpu);
    cudaError_t e = cudaHostRegister(reinterpret_cast<void*>(lo), hi - lo,
                                     cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterIoMemory);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return "cudaHostRegister(UAR page " + hex(lo) + ", " + std::to_string(hi - lo) +
               " bytes, Portable|Mapped|IoMemory) failed: " + cuda_err(e);
    }
    void* d = nullptr;
    e = cudaHostGetDevicePointer(&d, reinterpret_cast<void*>(lo), 0);
    cudaHostUnregister(reinterpret_cast<void*>(lo));
    if (e != cudaSuccess) {
        cudaGetLastError();
        return "cudaHostGetDevicePointer(UAR page " + hex(lo) + ") failed: " + cuda_err(e);
    }
    return "";
}

GpuBlock gpu_alloc(int gpu, size_t bytes, size_t align, int fill) {
    GpuBlock b;
    cudaSetDevice(gpu);
    const size_t total = bytes + align;
    cudaError_t e = cudaMalloc(&b.base, total);
    if (e != cudaSuccess) {
        cudaGetLastError();
        throw CudaError("cudaMalloc(" + std::to_string(total) + ") of queue memory failed: " + cuda_err(e), int(e));
    }
    b.ptr = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(b.base) + align - 1) & ~uintptr_t(align - 1));
    b.bytes = bytes;
    e = cudaMemset(b.ptr, fill, bytes);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        cudaGetLastError();
        cudaFree(b.base);
        throw CudaError("cudaMemset of queue memory failed: " + cuda_err(e), int(e));
    }
    return b;
}

void gpu_free(GpuBlock& b) noexcept {
    if (b.base) cudaFree(b.base);
    b = GpuBlock{};
}

int gpu_dmabuf_fd(void* ptr, size_t bytes, std::string* err) {
    CUresult (*get)(void*, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long) = nullptr;
    if (!detail::cuda::driver_fn("cuMemGetHandleForAddressRange", get)) {
        *err = "cuMemGetHandleForAddressRange is not offered by this CUDA driver (needs driver >= 515)";
        return -1;
    }
    int fd = -1;
    CUresult r = get(&fd, CUdeviceptr(reinterpret_cast<uintptr_t>(ptr)), bytes, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (r != CUDA_SUCCESS) {
        const char* name = nullptr;
        CUresult (*getname)(CUresult, const char**) = nullptr;
        if (detail::cuda::driver_fn("cuGetErrorName", getname)) getname(r, &name);
        *err = "cuMemGetHandleForAddressRange(" + hex(reinterpret_cast<uintptr_t>(ptr)) + ", " + std::to_string(bytes) +
               " bytes, DMA_BUF_FD) failed: " + (name ? name : ("CUresult " + std::to_string(int(r))));
        return -1;
    }
    return fd;
}

#else  // !GV_HAVE_CUDA

int gpu_count(std::string* why_none) {
    if (why_none) *why_none = "gpuverbs was built without CUDA (no nvcc at configure time)";
    return 0;
}
GpuFacts probe_gpu(int) {
    GpuFacts f;
    f.error = "gpuverbs was built without CUDA (no nvcc at configure time)";
    return f;
}
HostMapper::~HostMapper() = default;
void* HostMapper::map(void* p, size_t, bool) {
    if (gpu_ < 0) return p;
    throw NotSupported("mapping host memory for a GPU: gpuverbs was built without CUDA");
}
void HostMapper::unmap(void*, size_t) noexcept {}
std::string try_map_io(int, void*, size_t) { return "gpuverbs was built without CUDA"; }
GpuBlock gpu_alloc(int, size_t, size_t, int) { throw NotSupported("GPU queue memory: gpuverbs was built without CUDA"); }
void gpu_free(GpuBlock& b) noexcept { b = GpuBlock{}; }
int gpu_dmabuf_fd(void*, size_t, std::string* err) {
    *err = "gpuverbs was built without CUDA";
    return -1;
}

#endif

}  // namespace gv::detail::mlx5be
