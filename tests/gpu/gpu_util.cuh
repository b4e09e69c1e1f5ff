// Helpers for the GPU tests: skip without a GPU, checked CUDA calls, device buffers.
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

}  // namespace gvtest
