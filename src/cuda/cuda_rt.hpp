// The few CUDA runtime calls the host side needs, behind one small interface, so that a
// build without CUDA compiles the same code (each call then throws NotSupported).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gpuverbs/device/handles.hpp"

namespace gv::detail::cuda {

bool built();
/// True once this process made a CUDA runtime call through these functions (Context::cuda_used).
bool used();
/// Records that a CUDA call is about to be made (every function here that makes one calls it).
void touch();
int device_count();
void set_device(int gpu);

/// Makes `gpu` the calling thread's current device for its lifetime, then restores the
/// device the thread had, so the library never moves a multi-GPU application's current
/// device. A thread that had no CUDA context yet keeps `gpu` (restoring "device 0" would
/// create a context on GPU 0 in a process that only ever uses another GPU). gpu < 0: nothing.
class DeviceGuard {
public:
    explicit DeviceGuard(int gpu);
    ~DeviceGuard();
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

private:
    int prev_ = -1;  ///< the device to restore, or -1
};

/// GPUDirect RDMA writes into `gpu` (a NIC's writes into its memory): how far its own ordering
/// reaches (cudaDevAttrGPUDirectRDMAWritesOrdering: 0 none, 100 the owning GPU's kernels see
/// them in order, 200 every device does), -1 when unknown (no CUDA, or the query failed).
int gpudirect_writes_ordering(int gpu);
/// Whether cudaDeviceFlushGPUDirectRDMAWrites works on `gpu` (its flush-options attribute).
bool gpudirect_flush_supported(int gpu);
/// Blocks until every GPUDirect RDMA write that reached `gpu` before the call is visible to
/// its kernels (cudaDeviceFlushGPUDirectRDMAWrites, to the owner), on any thread (the GPU is
/// made current for the call). Throws CudaError naming the call.
void flush_gpudirect_writes(int gpu);

/// The 16-byte identity of GPU `gpu` (cudaDeviceProp::uuid): the same GPU has the same UUID
/// in every process, whatever CUDA_VISIBLE_DEVICES renumbers.
void device_uuid(int gpu, uint8_t out[16]);
/// The ordinal, in this process, of the GPU with that UUID; -1 when no visible GPU has it
/// (CUDA_VISIBLE_DEVICES hides it, or it is not on this host).
int device_of_uuid(const uint8_t uuid[16]);
/// "0000:19:00.0" (cudaDeviceGetPCIBusId), or "" when it cannot be asked.
std::string pci_bus_id(int gpu);
/// cudaDeviceCanAccessPeer(gpu, peer): 1 or 0.
int can_access_peer(int gpu, int peer);

/// A CUDA driver API function, looked up through the runtime (cudaGetDriverEntryPointByVersion,
/// ABI of CUDA 12.0) so that the library does not link libcuda; null when the driver lacks it
/// (the runtime's error state is cleared), and always null in a build without CUDA.
/// `version`: the CUDA version whose ABI of the function is wanted (12040 for one that came
/// with 12.4).
void* driver_entry_point(const char* name, int version = 12000);
/// driver_entry_point() into a typed function pointer: false (fn untouched) when absent.
template <class F>
bool driver_fn(const char* name, F& fn, int version = 12000) {
    void* p = driver_entry_point(name, version);
    if (p) fn = reinterpret_cast<F>(p);
    return p != nullptr;
}
/// cudaDeviceEnablePeerAccess(peer) with `gpu` current (already enabled: fine): kernels of
/// `gpu` then reach cudaMalloc'd memory of `peer`. Throws CudaError with the reason.
void enable_peer_access(int gpu, int peer);

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
/// Grants read/write access to [base, base+size) (a mapped VMM range of this process) to every
/// GPU in `gpus` (cuMemSetAccess with one descriptor per GPU; the peers reach the memory over
/// NVLink or PCIe peer-to-peer). Never creates multicast objects (docs/two-gpus.md).
void vmm_set_access(uint64_t base, uint64_t size, const std::vector<int>& gpus, const std::string& what);

/// Launches the software device's executor for a QP (src/soft/soft_doorbell.cu) on the
/// calling thread's current device, one kernel per call; arg: the QP's soft::QpContext.
using DoorbellFn = void (*)(void* qp_context, dev::HostDoorbell what);
DoorbellFn soft_doorbell_fn();
/// A GPU's doorbell board (src/soft/board.hpp): CPU doorbells batched into one executor
/// kernel at a time for every QP rung, instead of a launch per doorbell.
struct Board;
/// The board of software device on `gpu`; null when GV_DOORBELL_BOARD_SLOTS=0 (or no CUDA).
Board* board_open(int gpu);
/// Waits for the board's kernels, then frees it.
void board_close(Board* b) noexcept;
/// Gives a QP (its soft::QpContext) a slot; -1 when the board is full or null (the QP's
/// doorbells then launch a kernel each).
int board_attach(Board* b, void* qp_context);
/// Frees the slot; when it returns, no kernel of the board touches the QP any more.
void board_detach(Board* b, int slot);

/// Where a QP's executor runs when CPU threads ring it: on its device's GPU, whatever the
/// calling thread's current device is (two GPUs in one process).
struct SoftDoorbellTarget {
    void* qp_context;      ///< the QP's soft::QpContext
    int gpu;               ///< the device's GPU
    Board* board = nullptr;  ///< the device's board, if the QP has a slot on it
    int slot = -1;
};
/// The same launch on target->gpu; arg: a SoftDoorbellTarget that lives as long as the QP.
DoorbellFn soft_doorbell_at_fn();

/// Loads the executor kernel on `gpu` now, when a software device opens there, not at its first
/// launch. CUDA loads kernels lazily by default (CUDA_MODULE_LOADING=LAZY since 12.2), and
/// loading one may wait for the GPU's running kernels to finish: a CPU thread's first commit
/// (or the stand-in NIC's first doorbell) would then stall behind an application kernel that
/// spins until that very work lands, until the kernel gave up. Throws CudaError with the reason.
void load_executor(int gpu);
/// Whether the executor kernel is loaded on `gpu`: 1 yes, 0 no, -1 the driver cannot say
/// (cuFuncIsLoaded needs CUDA 12.4) or no CUDA. For tests.
int executor_loaded(int gpu);

}  // namespace gv::detail::cuda
