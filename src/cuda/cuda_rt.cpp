#include "cuda/cuda_rt.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "gpuverbs/errors.hpp"

#if GV_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#endif

namespace gv::detail::cuda {

namespace {
std::atomic<bool> g_used{false};
}  // namespace

bool used() { return g_used.load(std::memory_order_relaxed); }
void touch() { g_used.store(true, std::memory_order_relaxed); }

#if GV_HAVE_CUDA

#define GV_CUDA(call)                                                         \
    do {                                                                      \
        cudaError_t e_ = (call);                                              \
        if (e_ != cudaSuccess) throw_cuda(#call, int(e_), __FILE__, __LINE__); \
    } while (0)

bool built() { return true; }

int device_count() {
    touch();
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // no driver or no GPU: not an error here
        return 0;
    }
    return n;
}

void set_device(int gpu) {
    touch();
    GV_CUDA(cudaSetDevice(gpu));
}

namespace {
/// True when the calling thread has a current CUDA context (cuCtxGetCurrent, looked up through
/// the runtime so the library does not link libcuda). Unknown (no entry point): true.
bool thread_has_context() {
    using Fn = CUresult (*)(CUcontext*);
    static Fn fn = reinterpret_cast<Fn>(driver_entry_point("cuCtxGetCurrent"));
    if (!fn) return true;
    CUcontext c = nullptr;
    return fn(&c) == CUDA_SUCCESS && c != nullptr;
}
}  // namespace

DeviceGuard::DeviceGuard(int gpu) {
    if (gpu < 0) return;
    touch();
    int cur = -1;
    const bool had = thread_has_context();
    if (cudaGetDevice(&cur) != cudaSuccess) {
        cudaGetLastError();
        cur = -1;
    }
    if (cur == gpu) return;
    GV_CUDA(cudaSetDevice(gpu));
    if (had && cur >= 0) prev_ = cur;
}
DeviceGuard::~DeviceGuard() {
    if (prev_ >= 0 && cudaSetDevice(prev_) != cudaSuccess) cudaGetLastError();
}

void device_uuid(int gpu, uint8_t out[16]) {
    touch();
    cudaDeviceProp p{};
    GV_CUDA(cudaGetDeviceProperties(&p, gpu));
    std::memcpy(out, p.uuid.bytes, 16);
}
int device_of_uuid(const uint8_t uuid[16]) {
    const int n = device_count();
    for (int g = 0; g < n; ++g) {
        uint8_t u[16];
        device_uuid(g, u);
        if (std::memcmp(u, uuid, 16) == 0) return g;
    }
    return -1;
}
std::string pci_bus_id(int gpu) {
    touch();
    char b[32] = {};
    if (cudaDeviceGetPCIBusId(b, sizeof b, gpu) != cudaSuccess) {
        cudaGetLastError();
        return "";
    }
    return b;
}
int can_access_peer(int gpu, int peer) {
    touch();
    // Tests on a host whose GPUs do have peer access make them look as if they had none, so the
    // refusals are exercised end to end there too (tests/gpu/two_gpu_test.cu, two_gpu_xproc_test.cu).
    if (const char* t = std::getenv("GV_TEST_NO_PEER_ACCESS"); t && *t && *t != '0') return 0;
    int v = 0;
    if (cudaDeviceCanAccessPeer(&v, gpu, peer) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return v;
}
void enable_peer_access(int gpu, int peer) {
    DeviceGuard g(gpu);
    const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();
        return;
    }
    if (e != cudaSuccess) throw_cuda(("cudaDeviceEnablePeerAccess(" + std::to_string(peer) + ") on GPU " +
                                      std::to_string(gpu)).c_str(),
                                     int(e), __FILE__, __LINE__);
}

void* dev_alloc(size_t bytes) {
    touch();
    void* p = nullptr;
    GV_CUDA(cudaMalloc(&p, bytes));
    memset_device(p, 0, bytes);
    return p;
}
void dev_free(void* p) {
    if (p) cudaFree(p);
}
void* host_alloc(size_t bytes, void** dev) {
    touch();
    void* p = nullptr;
    GV_CUDA(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    GV_CUDA(cudaHostGetDevicePointer(dev, p, 0));
    std::memset(p, 0, bytes);
    return p;
}
void host_free(void* p) {
    if (p) cudaFreeHost(p);
}
void* stream() {
    // One per process and device is enough: control copies are small and rare.
    static thread_local int dev = -1;
    static cudaStream_t streams[64] = {};
    static std::mutex mu;
    touch();
    GV_CUDA(cudaGetDevice(&dev));
    std::lock_guard<std::mutex> lock(mu);
    if (dev < 0 || dev >= 64) throw_invalid("GPU index out of range", __FILE__, __LINE__);
    if (!streams[dev]) GV_CUDA(cudaStreamCreateWithFlags(&streams[dev], cudaStreamNonBlocking));
    return streams[dev];
}
void copy_to_device(void* dst, const void* src, size_t n) {
    auto s = static_cast<cudaStream_t>(stream());
    GV_CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s));
    GV_CUDA(cudaStreamSynchronize(s));
}
void copy_from_device(void* dst, const void* src, size_t n) {
    auto s = static_cast<cudaStream_t>(stream());
    GV_CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s));
    GV_CUDA(cudaStreamSynchronize(s));
}
void memset_device(void* dst, int v, size_t n) {
    // A memset runs on a stream of the GPU that holds dst (cudaMemsetAsync refuses another
    // GPU's stream: cudaErrorInvalidValue, seen on the two-H200 machine when the calling
    // thread's current GPU was the other one). Copies need no such care (unified addressing).
    int gpu = -1;
    const bool device = pointer_kind(dst, &gpu) == PtrKind::Device;
    DeviceGuard guard(device ? gpu : -1);
    auto s = static_cast<cudaStream_t>(stream());
    GV_CUDA(cudaMemsetAsync(dst, v, n, s));
    GV_CUDA(cudaStreamSynchronize(s));
}

int gpudirect_writes_ordering(int gpu) {
    touch();
    int v = -1;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrGPUDirectRDMAWritesOrdering, gpu) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return v;
}
bool gpudirect_flush_supported(int gpu) {
    touch();
    int v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrGPUDirectRDMAFlushWritesOptions, gpu) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return (v & cudaFlushGPUDirectRDMAWritesOptionHost) != 0;
}
void flush_gpudirect_writes(int gpu) {
    DeviceGuard guard(gpu);
    GV_CUDA(cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice,
                                               cudaFlushGPUDirectRDMAWritesToOwner));
}

/// True when the CUDA driver is loaded in this process, i.e. someone (gpuverbs, the
/// application, a library) initialised CUDA. Never loads it.
bool driver_loaded() {
    void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!h) return false;
    dlclose(h);
    return true;
}

PtrKind pointer_kind(const void* p, int* gpu) {
    // Without the driver loaded nothing in this process is GPU memory, and asking the runtime
    // would initialise CUDA: a CPU-only process must not (a child it forks could not use
    // CUDA, and under MPS it would become an MPS client).
    if (!driver_loaded()) return PtrKind::Host;
    touch();
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return PtrKind::Host;
    }
    if (gpu) *gpu = a.device;
    switch (a.type) {
        case cudaMemoryTypeDevice: return PtrKind::Device;
        case cudaMemoryTypeManaged: return PtrKind::Managed;
        case cudaMemoryTypeHost: return PtrKind::PinnedHost;
        default: return PtrKind::Host;
    }
}

bool host_register(void* p, size_t len, void** dev) {
    touch();
    cudaError_t e = cudaHostRegister(p, len, cudaHostRegisterMapped | cudaHostRegisterPortable);
    bool mine = true;
    if (e == cudaErrorHostMemoryAlreadyRegistered) {
        cudaGetLastError();
        mine = false;
    } else if (e != cudaSuccess) {
        throw_cuda("cudaHostRegister(addr, length, Mapped|Portable)", int(e), __FILE__, __LINE__);
    }
    GV_CUDA(cudaHostGetDevicePointer(dev, p, 0));
    return mine;
}
void host_unregister(void* p) { cudaHostUnregister(p); }
void* host_device_pointer(void* p) {
    touch();
    void* d = nullptr;
    GV_CUDA(cudaHostGetDevicePointer(&d, p, 0));
    return d;
}
void synchronize() {
    touch();
    GV_CUDA(cudaDeviceSynchronize());
}

void* driver_entry_point(const char* name, int version) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &p, unsigned(version), cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !p) {
        cudaGetLastError();
        return nullptr;
    }
    return p;
}

#else  // no CUDA in this build

void* driver_entry_point(const char*, int) { return nullptr; }

[[noreturn]] static void no_cuda() {
    throw NotSupported("gpuverbs was built without CUDA (no nvcc found at configure time)");
}
bool built() { return false; }
int device_count() { return 0; }
void set_device(int) { no_cuda(); }
DeviceGuard::DeviceGuard(int gpu) {
    if (gpu >= 0) no_cuda();
}
DeviceGuard::~DeviceGuard() {}
void device_uuid(int, uint8_t*) { no_cuda(); }
int device_of_uuid(const uint8_t*) { return -1; }
std::string pci_bus_id(int) { return ""; }
int can_access_peer(int, int) { return 0; }
void enable_peer_access(int, int) { no_cuda(); }
void* dev_alloc(size_t) { no_cuda(); }
void dev_free(void*) {}
void* host_alloc(size_t, void**) { no_cuda(); }
void host_free(void*) {}
void copy_to_device(void*, const void*, size_t) { no_cuda(); }
void copy_from_device(void*, const void*, size_t) { no_cuda(); }
void memset_device(void*, int, size_t) { no_cuda(); }
int gpudirect_writes_ordering(int) { return -1; }
bool gpudirect_flush_supported(int) { return false; }
void flush_gpudirect_writes(int) { no_cuda(); }
PtrKind pointer_kind(const void*, int*) { return PtrKind::Host; }
bool host_register(void*, size_t, void**) { no_cuda(); }
void host_unregister(void*) {}
void* host_device_pointer(void*) { no_cuda(); }
void synchronize() {}
void* stream() { return nullptr; }
DoorbellFn soft_doorbell_fn() { return nullptr; }
DoorbellFn soft_doorbell_at_fn() { return nullptr; }
Board* board_open(int) { return nullptr; }
void board_close(Board*) noexcept {}
int board_attach(Board*, void*) { return -1; }
void board_detach(Board*, int) {}
void load_executor(int) { no_cuda(); }
int executor_loaded(int) { return -1; }

#endif

}  // namespace gv::detail::cuda
