// Context: an opened RDMA backend (the software device, a ConnectX, or a verbs device).
#pragma once

#include <memory>
#include <string>

#include "gpuverbs/errors.hpp"
#include "gpuverbs/types.hpp"

namespace gv {

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
    /// Human-readable name of the opened device ("soft-cpu", "soft-gpu0", "mlx5_0").
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
    std::shared_ptr<Impl> impl_;
};

}  // namespace gv
