// SharedBuffer: memory a peer can reach, on every backend: in another process on this host
// through the software device, or across the wire through a NIC (a WRITE, READ, SEND or
// atomic from the peer lands here once the buffer is registered with MemoryRegion).
#pragma once

#include <cstddef>
#include <memory>

#include "gpuverbs/context.hpp"

namespace gv {

/// Zeroed memory of the context's kind, for what peers target: host memory on a CPU context
/// (ContextOptions::gpu = -1), GPU memory on a GPU context (data() is then a device pointer:
/// fill and read it with kernels or cudaMemcpy). Register it with MemoryRegion; deregister
/// regions before the buffer goes away. Code that takes its peer-targeted buffers from here
/// runs unchanged on every backend:
///  - Software device (Backend::Soft): page-aligned memory from the device's shared arena,
///    which peer processes map at the same address. This is what makes a buffer reachable from
///    another process: regions over other (private) memory work within the process, but an
///    executor of another process refuses them (REMOTE_ACCESS_ERR for a WRITE, READ or atomic,
///    a responder LOCAL_PROT_ERR for a SEND). On a GPU context it is mapped (CUDA VMM) for the
///    context's GPU and for the GPUs of QPs connected to its device, not for every GPU as
///    cudaMalloc memory is: a cudaMemcpy or cudaMemset of it runs with one of those GPUs
///    current (from another GPU's context the runtime answers cudaErrorInvalidValue).
///    NotSupported when the device has no arena (the message says why); SystemError "arena is
///    full" when the arena cannot hold it.
///  - A NIC (Backend::Verbs, Backend::Mlx5): the NIC reaches any memory registered with it, so
///    this is plain memory: page-aligned anonymous host memory on a CPU context, cudaMalloc
///    memory of the context's GPU on a GPU context (its registration needs GPUDirect RDMA:
///    dma-buf or nvidia-peermem; MemoryRegion says what is missing). Memory allocated any
///    other way works as well there.
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
