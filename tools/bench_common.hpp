// Helpers shared by the benchmark tools (gv_bench.cu, gv_post_rate.cu, gv_compute_send.cu and
// the gv_probe_* tools): checked CUDA calls, the GPU check, owners of CUDA resources, and the
// failure record (bench_failure.hpp, host code too) read back from device memory.
// CUDA code only (the tools are .cu files).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <utility>

#include "cli.hpp"
#include "gpuverbs/context.hpp"
#include "gpuverbs/device.cuh"
#include "gpuverbs/errors.hpp"
#include "bench_failure.hpp"

/// Throws gv::CudaError naming the call, the CUDA error, and the file and line.
#define CUDA_CHECK(call)                                                              \
    do {                                                                              \
        const cudaError_t cuda_check_rc_ = (call);                                    \
        if (cuda_check_rc_ != cudaSuccess)                                            \
            ::gv::detail::throw_cuda(#call, int(cuda_check_rc_), __FILE__, __LINE__); \
    } while (0)

namespace gvbench {

// ---- the process around a tool --------------------------------------------------------------
// The command line and the exit statuses follow tools/cli.hpp (gvcli::run).

/// Throws gv::NotSupported, saying why, unless a CUDA GPU is visible: first without a CUDA
/// call (gvcli::no_gpu_reason), then counting the GPUs.
inline void require_gpu() {
    const std::string why = gvcli::no_gpu_reason();
    if (!why.empty()) throw gv::NotSupported(why + ": this tool needs a CUDA GPU");
    if (gv::Context::gpu_count() == 0)
        throw gv::NotSupported("no CUDA GPU visible (is CUDA_VISIBLE_DEVICES empty?): this tool needs one");
}

/// The name of CUDA device `device`.
inline std::string gpu_name(int device = 0) {
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    return prop.name;
}

// ---- owners of CUDA resources -----------------------------------------------------------------
// Their destructors ignore CUDA errors: after a failed context the exit path must not abort.

/// A CUDA event.
class Event {
public:
    Event() { CUDA_CHECK(cudaEventCreate(&e_)); }
    ~Event() { cudaEventDestroy(e_); }
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    operator cudaEvent_t() const { return e_; }

private:
    cudaEvent_t e_ = nullptr;
};

/// Milliseconds from event a to event b, both complete.
inline float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

/// A non-blocking CUDA stream.
class Stream {
public:
    Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
    ~Stream() { cudaStreamDestroy(s_); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    operator cudaStream_t() const { return s_; }

private:
    cudaStream_t s_ = nullptr;
};

/// Where a Buffer lives: GPU memory (cudaMalloc), pinned host memory mapped for the GPU
/// (cudaHostAlloc), or managed memory (cudaMallocManaged).
enum class Mem { Device, HostMapped, Managed };

/// `count` elements of T (uninitialized), freed with their owner.
template <class T>
class Buffer {
public:
    Buffer() = default;
    explicit Buffer(size_t count, Mem kind = Mem::Device) : kind_(kind) {
        void* p = nullptr;
        const size_t bytes = count * sizeof(T);
        if (kind == Mem::Device) CUDA_CHECK(cudaMalloc(&p, bytes));
        else if (kind == Mem::HostMapped) CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocMapped));
        else CUDA_CHECK(cudaMallocManaged(&p, bytes));
        p_ = static_cast<T*>(p);
    }
    ~Buffer() { reset(); }
    Buffer(Buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), kind_(o.kind_) {}
    Buffer& operator=(Buffer&& o) noexcept {
        if (this != &o) {
            reset();
            p_ = std::exchange(o.p_, nullptr);
            kind_ = o.kind_;
        }
        return *this;
    }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    T* get() const { return p_; }
    void reset() {
        if (!p_) return;
        if (kind_ == Mem::HostMapped) cudaFreeHost(p_);
        else cudaFree(p_);
        p_ = nullptr;
    }

private:
    T* p_ = nullptr;
    Mem kind_ = Mem::Device;
};

/// The failure record a kernel left in device memory (call after the kernel has ended).
inline Failure read_failure(const Failure* d_fail) {
    Failure f;
    CUDA_CHECK(cudaMemcpy(&f, d_fail, sizeof f, cudaMemcpyDeviceToHost));
    return f;
}

}  // namespace gvbench
