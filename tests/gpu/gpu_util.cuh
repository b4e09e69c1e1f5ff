// Helpers for the GPU tests: skip without a GPU, checked CUDA calls, device buffers, and the
// bounded spin on a flag that kernels of several files use.
#pragma once

#include <cuda_runtime.h>

#include "test_util.hpp"

#define GV_SKIP_WITHOUT_GPU()                                                                  \
    do {                                                                                       \
        if (gv::Context::gpu_count() == 0)                                                     \
            GTEST_SKIP() << "no CUDA GPU visible (cudaGetDeviceCount returned 0): GPU tests "  \
                            "need a GPU; run them with `ctest -L gpu` on a machine that has one"; \
    } while (0)

#define CUDA_OK(call)                                                                          \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorString(e_);                 \
    } while (0)

/// A CUDA call in code a child process runs (or that must not return early): throws on
/// failure, naming the call and the error (XCHECK's CUDA form, tests/proc_util.hpp).
#define CK(call)                                                                                            \
    do {                                                                                                    \
        cudaError_t e_ = (call);                                                                            \
        if (e_ != cudaSuccess) throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(e_)); \
    } while (0)

namespace gvtest {

/// cudaMalloc'd buffer, freed on scope exit.
struct DevBuf {
    void* p = nullptr;
    size_t n = 0;
    explicit DevBuf(size_t bytes) : n(bytes) {
        if (cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
    }
    ~DevBuf() {
        if (p) cudaFree(p);
    }
    template <typename T = uint8_t>
    T* get() const {
        return static_cast<T*>(p);
    }
};

inline gv::Context gpu_ctx() { return gv::Context(gv::ContextOptions{gv::Backend::Soft, 0}); }

/// Spins with acquire loads (device scope) until `done(*p)` or until timeout_ns passed;
/// returns whether it happened. *last gets the last value read.
template <typename T, typename Done>
__device__ bool spin_until(const T* p, Done done, uint64_t timeout_ns, T* last = nullptr) {
    const uint64_t t0 = gv::atom::now_ns();
    for (;;) {
        T v = gv::atom::load_acquire(p);
        if (last) *last = v;
        if (done(v)) return true;
        if (gv::atom::now_ns() - t0 > timeout_ns) return false;
    }
}

/// spin_until(*p >= v).
template <typename T>
__device__ bool wait_at_least(const T* p, T v, uint64_t timeout_ns, T* last = nullptr) {
    return spin_until(p, [v](T x) { return x >= v; }, timeout_ns, last);
}

}  // namespace gvtest
