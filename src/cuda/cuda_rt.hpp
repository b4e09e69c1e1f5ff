// The few CUDA runtime calls the host side needs, behind one small interface, so that a
// build without CUDA compiles the same code (each call then throws NotSupported).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpuverbs/device/handles.hpp"

namespace gv::detail::cuda {

bool built();
/// True once this process made a CUDA runtime call through these functions (Context::cuda_used).
bool used();
/// Records that a CUDA call is about to be made (every function here that makes one calls it).
void touch();
int device_count();
void set_device(int gpu);

void* dev_alloc(size_t bytes);
void dev_free(void* p);
/// Pinned, mapped host memory; *dev receives the pointer kernels use.
void* host_alloc(size_t bytes, void** dev);
void host_free(void* p);

void copy_to_device(void* dst, const void* src, size_t n);
void copy_from_device(void* dst, const void* src, size_t n);
void memset_device(void* dst, int v, size_t n);

enum class PtrKind { Host, Device, Managed, PinnedHost };
/// What kind of memory p is; *gpu receives the owning GPU for Device.
PtrKind pointer_kind(const void* p, int* gpu);
/// Makes host memory reachable from the GPU. Returns true when this call registered it
/// (and so must unregister it); *dev receives the GPU's pointer for p.
bool host_register(void* p, size_t len, void** dev);
void host_unregister(void* p);
/// The GPU pointer of already pinned host memory.
void* host_device_pointer(void* p);

void synchronize();
/// The library's own non-blocking stream (control copies and executor launches), so
/// they never wait for user kernels on the legacy default stream.
void* stream();

/// GPU memory mapped at the same address in every process that imports it (cuda_vmm.cpp).
struct VmmRange {
    uint64_t base = 0;
    uint64_t size = 0;
    int fd = -1;          ///< POSIX descriptor other processes duplicate (pidfd_getfd)
    uint64_t handle = 0;  ///< CUmemGenericAllocationHandle
};
/// Allocation granularity of shareable memory on `gpu` (sizes and addresses are multiples).
size_t vmm_granularity(int gpu);
/// Allocates `size` bytes on `gpu`, mapped at an address pick(arg) proposes (up to
/// `attempts` proposals; the first free one is taken).
VmmRange vmm_create(int gpu, size_t size, uint64_t (*pick)(void*), void* pick_arg, int attempts);
void vmm_destroy(VmmRange& v);
/// Maps process pid's allocation (its descriptor fd) at base in this process, for good.
void vmm_import(int gpu, uint32_t pid, int fd, uint64_t base, uint64_t size);

/// Launches the software device's executor for a QP (src/soft/soft_doorbell.cu).
using DoorbellFn = void (*)(void* qp_context, dev::HostDoorbell what);
DoorbellFn soft_doorbell_fn();

}  // namespace gv::detail::cuda
