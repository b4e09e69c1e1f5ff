// Execution-space macros: the same queue code compiles for CUDA kernels and CPU threads.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define GV_HOST_DEVICE __host__ __device__ __forceinline__
// A function kept out of line (a rarely taken path that would otherwise be inlined at every call
// site); inline linkage, for headers.
#define GV_HOST_DEVICE_NOINLINE __host__ __device__ __noinline__ inline
#define GV_DEVICE __device__ __forceinline__
#define GV_HOST __host__ inline
// Unrolls the loop that follows (nvcc); a plain C++ compiler ignores it.
#define GV_UNROLL _Pragma("unroll")
#else
#define GV_HOST_DEVICE inline
#define GV_HOST_DEVICE_NOINLINE inline
#define GV_DEVICE inline
#define GV_HOST inline
#define GV_UNROLL
#endif

// True while compiling device code (the __CUDA_ARCH__ pass of nvcc).
#if defined(__CUDA_ARCH__)
#define GV_DEVICE_CODE 1
#else
#define GV_DEVICE_CODE 0
#endif

namespace gv {
/// Library version (the same as project() in CMakeLists.txt, checked at configure time). The
/// out-of-band records carry their own format version (oob.hpp); docs/packaging.md gives the
/// compatibility policy.
inline constexpr uint32_t kVersionMajor = 0;
inline constexpr uint32_t kVersionMinor = 2;
}  // namespace gv
