// SharedBuffer: memory that peers in other processes on this host can reach through the
// software device (a WRITE, READ, SEND or atomic from a peer process lands here).
#pragma once

#include <cstddef>
#include <memory>

#include "gpuverbs/context.hpp"

namespace gv {

/// Zeroed, page-aligned memory from the software device's shared arena: host memory on a CPU
/// context (ContextOptions::gpu = -1), GPU memory on a GPU context (data() is then a device
/// pointer: fill and read it with kernels or cudaMemcpy). On a GPU context it is mapped (CUDA
/// VMM) for the context's GPU and for the GPUs of QPs connected to its device, not for every
/// GPU as cudaMalloc memory is: a cudaMemcpy or cudaMemset of it runs with one of those GPUs
/// current (from another GPU's context the runtime answers cudaErrorInvalidValue). NotSupported on other backends, or
/// when the device has no arena (the message says why). Register it with MemoryRegion. Regions over other (private) memory work within the
/// process, but an executor of another process refuses them: REMOTE_ACCESS_ERR for a WRITE,
/// READ or atomic, a responder LOCAL_PROT_ERR for a SEND. Deregister regions before the
/// buffer goes away.
class SharedBuffer {
public:
    SharedBuffer(const Context& ctx, size_t bytes);
    ~SharedBuffer();
    SharedBuffer(SharedBuffer&&) noexcept;
    SharedBuffer& operator=(SharedBuffer&&) noexcept;

    void* data() const;
    size_t size() const;
    template <typename T>
    T* as() const {
        return static_cast<T*>(data());
    }

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace gv
