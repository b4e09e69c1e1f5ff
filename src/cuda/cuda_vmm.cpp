// GPU memory that other processes map at the same virtual address: CUDA's virtual memory
// management API (cuMemCreate, a fixed-address cuMemAddressReserve, POSIX file-descriptor
// export). The driver functions are looked up through the runtime
// (cudaGetDriverEntryPointByVersion), so the library does not link libcuda and still loads
// on machines without a driver.
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/cuda_rt.hpp"
#include "gpuverbs/errors.hpp"

#if GV_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#endif

namespace gv::detail::cuda {

namespace {
std::string hexs(uint64_t v) {
    char b[32];
    std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
    return b;
}
}  // namespace

#if GV_HAVE_CUDA

namespace {

struct Driver {
    CUresult (*getErrorString)(CUresult, const char**) = nullptr;
    CUresult (*granularity)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) = nullptr;
    CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long) = nullptr;
    CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
    CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
    CUresult (*addrFree)(CUdeviceptr, size_t) = nullptr;
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
    CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
    CUresult (*setAccess)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
    CUresult (*exportHandle)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long) = nullptr;
    CUresult (*importHandle)(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType) = nullptr;
};

template <class F>
void lookup(const char* name, F& fn) {
    touch();
    if (!driver_fn(name, fn))
        throw NotSupported(std::string("the CUDA driver lacks ") + name +
                           " (virtual memory management, needed for memory shared across processes)");
}

const Driver& drv() {
    static Driver d;
    static std::once_flag once;
    static std::string failure;
    std::call_once(once, [] {
        try {
            lookup("cuGetErrorString", d.getErrorString);
            lookup("cuMemGetAllocationGranularity", d.granularity);
            lookup("cuMemCreate", d.create);
            lookup("cuMemRelease", d.release);
            lookup("cuMemAddressReserve", d.reserve);
            lookup("cuMemAddressFree", d.addrFree);
            lookup("cuMemMap", d.map);
            lookup("cuMemUnmap", d.unmap);
            lookup("cuMemSetAccess", d.setAccess);
            lookup("cuMemExportToShareableHandle", d.exportHandle);
            lookup("cuMemImportFromShareableHandle", d.importHandle);
        } catch (const Error& e) {
            failure = e.what();
        }
    });
    if (!failure.empty()) throw NotSupported(failure);
    return d;
}

[[noreturn]] void fail(const char* call, CUresult r, const std::string& what) {
    const char* s = nullptr;
    if (drv().getErrorString) drv().getErrorString(r, &s);
    throw CudaError(what + ": " + call + " failed: " + (s ? s : "unknown error") + " (" + std::to_string(int(r)) + ")",
                    int(r));
}

CUmemAllocationProp prop_for(int gpu) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = gpu;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return prop;
}

/// Maps handle h over [base, base+size) for read/write by `gpu`; undoes the reservation on failure.
void map_rw(int gpu, CUmemGenericAllocationHandle h, CUdeviceptr base, size_t size, const std::string& what) {
    const Driver& d = drv();
    CUresult r = d.map(base, size, 0, h, 0);
    if (r != CUDA_SUCCESS) {
        d.addrFree(base, size);
        fail("cuMemMap", r, what);
    }
    CUmemAccessDesc acc{};
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = gpu;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = d.setAccess(base, size, &acc, 1);
    if (r != CUDA_SUCCESS) {
        d.unmap(base, size);
        d.addrFree(base, size);
        fail("cuMemSetAccess", r, what);
    }
}

}  // namespace

size_t vmm_granularity(int gpu) {
    DeviceGuard guard(gpu);
    CUmemAllocationProp prop = prop_for(gpu);
    size_t g = 0;
    CUresult r = drv().granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (r != CUDA_SUCCESS) fail("cuMemGetAllocationGranularity", r, "GPU " + std::to_string(gpu));
    return g;
}

VmmRange vmm_create(int gpu, size_t size, uint64_t (*pick)(void*), void* pick_arg, int attempts) {
    DeviceGuard guard(gpu);
    const Driver& d = drv();
    const std::string what = "shared GPU arena of " + std::to_string(size >> 20) + " MiB on GPU " + std::to_string(gpu);
    CUmemAllocationProp prop = prop_for(gpu);
    CUmemGenericAllocationHandle h = 0;
    CUresult r = d.create(&h, size, &prop, 0);
    if (r != CUDA_SUCCESS) fail("cuMemCreate", r, what);
    CUdeviceptr base = 0;
    for (int i = 0; i < attempts && !base; ++i) {
        CUdeviceptr want = pick(pick_arg), got = 0;
        // The address is a request: the driver answers with another one when that range
        // is taken; only the exact address is of use (peers map it at the same place).
        if (d.reserve(&got, size, 0, want, 0) != CUDA_SUCCESS) continue;
        if (got == want) base = got;
        else d.addrFree(got, size);
    }
    if (!base) {
        d.release(h);
        throw SystemError(what + ": no free address range at the addresses tried (" + std::to_string(attempts) +
                              " attempts)",
                          EEXIST);
    }
    try {
        map_rw(gpu, h, base, size, what);
    } catch (...) {
        d.release(h);
        throw;
    }
    int fd = -1;
    r = d.exportHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS) {
        d.unmap(base, size);
        d.addrFree(base, size);
        d.release(h);
        fail("cuMemExportToShareableHandle", r, what);
    }
    VmmRange v;
    v.base = base;
    v.size = size;
    v.fd = fd;
    v.handle = h;
    return v;
}

void vmm_destroy(VmmRange& v) {
    if (!v.base) return;
    const Driver& d = drv();
    d.unmap(v.base, v.size);
    d.addrFree(v.base, v.size);
    d.release(v.handle);
    if (v.fd >= 0) ::close(v.fd);
    v = VmmRange{};
}

void vmm_import(int gpu, uint32_t pid, int fd, uint64_t base, uint64_t size) {
    DeviceGuard guard(gpu);
    const Driver& d = drv();
    const std::string what = "importing the shared GPU arena of process " + std::to_string(pid) + " (" + hexs(base) +
                             ", " + std::to_string(size >> 20) + " MiB)";
    // The peer's descriptor, duplicated into this process (Linux 5.6+; needs the right to
    // ptrace the peer: same user, or root).
    int pfd = int(syscall(SYS_pidfd_open, pid_t(pid), 0));
    if (pfd < 0) throw SystemError(what + ": pidfd_open failed (the peer exited?)", errno);
    int local = int(syscall(SYS_pidfd_getfd, pfd, fd, 0));
    int err = errno;
    ::close(pfd);
    if (local < 0)
        throw SystemError(what + ": pidfd_getfd of its descriptor " + std::to_string(fd) +
                              " failed (the peer exited, runs as another user, or ptrace is restricted)",
                          err);
    CUmemGenericAllocationHandle h = 0;
    CUresult r = d.importHandle(&h, reinterpret_cast<void*>(static_cast<uintptr_t>(local)),
                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    ::close(local);
    if (r != CUDA_SUCCESS) fail("cuMemImportFromShareableHandle", r, what);
    CUdeviceptr got = 0;
    r = d.reserve(&got, size, 0, base, 0);
    if (r != CUDA_SUCCESS || got != base) {
        if (r == CUDA_SUCCESS) d.addrFree(got, size);
        d.release(h);
        throw SystemError(what + ": its address range is already in use in this process", EEXIST);
    }
    try {
        map_rw(gpu, h, base, size, what);
    } catch (...) {
        d.release(h);
        throw;
    }
    // The mapping holds the memory now; the handle is not needed any more. The mapping
    // stays for the life of the process, so no pointer into a peer that went away dangles.
    d.release(h);
}

void vmm_set_access(uint64_t base, uint64_t size, const std::vector<int>& gpus, const std::string& what) {
    if (gpus.empty()) return;
    touch();
    std::vector<CUmemAccessDesc> acc(gpus.size());
    for (size_t i = 0; i < gpus.size(); ++i) {
        acc[i] = CUmemAccessDesc{};
        acc[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc[i].location.id = gpus[i];
        acc[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    // One descriptor per GPU, all at once: the range stays readable and writable by every GPU
    // already listed. A GPU that cannot reach the memory's GPU (no peer-to-peer path) makes
    // this fail; callers check cudaDeviceCanAccessPeer first to say so in words.
    CUresult r = drv().setAccess(CUdeviceptr(base), size, acc.data(), acc.size());
    if (r != CUDA_SUCCESS) {
        std::string list;
        for (int g : gpus) list += (list.empty() ? "" : ", ") + std::to_string(g);
        fail("cuMemSetAccess", r, what + " (granting GPUs " + list + ")");
    }
}

#else  // no CUDA in this build

size_t vmm_granularity(int) { throw NotSupported("gpuverbs was built without CUDA"); }
VmmRange vmm_create(int, size_t, uint64_t (*)(void*), void*, int) {
    throw NotSupported("gpuverbs was built without CUDA");
}
void vmm_destroy(VmmRange&) {}
void vmm_import(int, uint32_t, int, uint64_t base, uint64_t) {
    throw NotSupported("gpuverbs was built without CUDA: cannot import the GPU arena at " + hexs(base));
}
void vmm_set_access(uint64_t, uint64_t, const std::vector<int>&, const std::string&) {
    throw NotSupported("gpuverbs was built without CUDA");
}

#endif

}  // namespace gv::detail::cuda
