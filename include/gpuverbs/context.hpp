// Context: an opened RDMA backend (the software device, a ConnectX, or a verbs device).
#pragma once

#include <memory>
#include <string>

#include "gpuverbs/errors.hpp"
#include "gpuverbs/types.hpp"

namespace gv {

class Context;
namespace detail {
class BackendOps;
/// Internal (src/core): a Context around an opened backend (the verbs sink of the tests).
Context make_context(std::unique_ptr<BackendOps> ops, std::string selection);
}  // namespace detail

/// The verbs backend (Backend::Verbs): CPU proxy threads read the WQEs kernels and CPU
/// threads publish in pinned host memory, post them to a libibverbs device and write its
/// completions back as mlx5 CQEs (docs/verbs.md).
struct VerbsOptions {
    /// Proxy threads of the context (at least 1). QPs are assigned to them round-robin when
    /// created; a thread owns its QPs' rings and device queues. How many a workload needs:
    /// docs/verbs.md (one thread reads and posts a few million WQEs per second).
    uint32_t proxy_threads = 1;
    /// Longest sleep of an idle proxy thread, in microseconds. A thread with work busy-polls;
    /// idle, it spins a while, then sleeps 1, 2, 4 ... us up to this bound, so the first WQE
    /// after an idle spell waits at most about this long. 0: never sleeps (a core per
    /// thread, lowest latency).
    uint32_t max_idle_sleep_us = 100;
    /// A CPU thread that commits on a QP, posts a receive or waits for a completion does the
    /// proxy's work for that QP itself when its proxy thread is not on it at that moment
    /// (reads the published WQEs, posts them, polls the device's completions): one thread
    /// hand-off less on a CPU initiator's path. Off: only proxy threads touch the device
    /// (the committing thread never enters the verbs provider). Kernels always go through
    /// the proxy threads.
    bool cpu_posts_inline = true;
    /// Port of the device, and the source GID index (-1: RoCE v2 with an IPv4 address first,
    /// docs/verbs.md; on InfiniBand index 0).
    uint8_t port = 1;
    int gid_index = -1;
    /// GPUDirect write ordering (a GPU context only). When the device writes GPU memory (a
    /// READ's or atomic's result, a SEND or WRITE-with-immediate into a receive buffer) and
    /// the GPU does not natively order such writes for its own kernels
    /// (cudaDevAttrGPUDirectRDMAWritesOrdering below "owner"), a kernel that sees the
    /// completion could still read stale data: the proxy thread then flushes them
    /// (cudaDeviceFlushGPUDirectRDMAWrites) after polling such completions and before
    /// writing their CQEs. Auto: flush exactly when the GPU needs it; Always / Never: as
    /// named (Always is refused, NotSupported saying why, on a GPU that cannot flush; Never
    /// only where the application orders the data itself).
    enum class GpuDirectFlush { Auto, Always, Never };
    GpuDirectFlush gpudirect_flush = GpuDirectFlush::Auto;
};

/// Who rings a ConnectX's doorbell (Backend::Mlx5), as DOCA GPUNetIO and NVSHMEM's IBGDA
/// let you choose (docs/mlx5.md):
enum class DoorbellHandler {
    /// Gpu when the doorbell register (UAR) can be mapped into the GPU, else CpuProxy, said
    /// once on stderr with the failed call and the driver setting that enables Gpu.
    Auto,
    /// The threads that post ring it themselves: kernels through the UAR mapped into the
    /// GPU (needs the NVIDIA driver's PeerMappingOverride=1), CPU threads through its CPU
    /// mapping. Opening the context fails, saying why, when kernels cannot map it.
    Gpu,
    /// A CPU thread of the context watches the producer indexes kernels publish in pinned
    /// host memory and writes the NIC's doorbell records and the UAR itself.
    CpuProxy,
};
/// "auto", "gpu", "cpu-proxy".
const char* doorbell_handler_name(DoorbellHandler h);

/// Whether kernels that consume data a ConnectX wrote into GPU memory (an RDMA READ's
/// result, a peer's WRITE or SEND) first make it visible with a flush READ
/// (gv::dev::flush_gpu_writes; docs/mlx5.md, "RDMA READ into GPU memory").
enum class ReadFlush {
    Auto,    ///< when the GPU does not order GPUDirect RDMA writes for its own kernels
             ///< (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING below OWNER)
    Always,  ///< every flush_gpu_writes posts the flush READ
    Never,   ///< flush_gpu_writes returns at once (the caller knows its platform)
};

/// Backend::Mlx5 (and Auto when it picks mlx5).
struct Mlx5Options {
    DoorbellHandler doorbell = DoorbellHandler::Auto;
    ReadFlush read_flush = ReadFlush::Auto;
    /// Port of the device, and the source GID index (-1: RoCE v2 with an IPv4 address first,
    /// docs/verbs.md; on InfiniBand index 0).
    uint8_t port = 1;
    int gid_index = -1;
};

struct ContextOptions {
    Backend backend = Backend::Auto;
    /// GPU the software device executes on: -1 = CPU threads only, -2 = GPU 0 when CUDA
    /// and a GPU are present, else CPU threads.
    int gpu = -2;
    /// Device name for mlx5 / verbs (empty: the first suitable one).
    std::string device;
    /// Software device: bytes of its shared arena, the memory peers in other processes map
    /// (all device state and every SharedBuffer; docs/cross-process.md). 0: the default,
    /// 1 GiB (CPU: sparse; GPU: allocated up front, or GV_GPU_ARENA_MB MiB when set). The
    /// device is shared by every Context of this process on the same GPU (or on the CPU):
    /// the first Context sizes it, and a later one asking for more is an error. When the
    /// arena is full, SharedBuffer fails (SystemError, "arena is full"); new QPs and CQs of
    /// a GPU device fall back to private GPU memory (usable in this process only), those of
    /// a CPU device fail the same way.
    size_t shared_arena_bytes = 0;
    /// Backend::Verbs (and Auto when it picks verbs): the proxy threads and the port.
    VerbsOptions verbs;
    /// Backend::Mlx5 (and Auto when it picks mlx5): the doorbell handler, the read flush,
    /// the port and GID.
    Mlx5Options mlx5;
};

/// An opened backend. Cheap to copy (shared ownership); objects created from it keep it
/// alive.
class Context {
public:
    explicit Context(const ContextOptions& options = {});
    ~Context();
    Context(const Context&) = default;
    Context& operator=(const Context&) = default;

    Backend backend() const;
    /// GPU the work executes on, or -1 for CPU threads.
    int gpu() const;
    /// Human-readable name of the opened device ("soft-cpu", "soft-gpu0", "mlx5_0", "rxe0").
    std::string name() const;
    /// Which backend was opened and why, in a sentence (for Backend::Auto: what it found,
    /// e.g. "Backend::Auto chose soft: no RDMA device present: the software RDMA device").
    const std::string& selection() const;
    /// True when the library was built with CUDA support.
    static bool cuda_built();
    /// True once gpuverbs made a CUDA call in this process: a context on a GPU (also gpu = -2,
    /// the default, which asks CUDA whether there is one), gpu_count(), memory registration
    /// in a process where CUDA is in use. A process that opens only CPU contexts (gpu = -1)
    /// makes none: it never initialises CUDA, so children it forks may use CUDA, and it does
    /// not become an MPS client.
    static bool cuda_used();
    /// Number of CUDA GPUs visible (0 without CUDA).
    static int gpu_count();

    struct Impl;
    Impl* impl() const { return impl_.get(); }
    std::shared_ptr<Impl> shared_impl() const { return impl_; }

private:
    explicit Context(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
    friend Context detail::make_context(std::unique_ptr<detail::BackendOps> ops, std::string selection);
    std::shared_ptr<Impl> impl_;
};

}  // namespace gv
