#include "gpuverbs/errors.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

#if GV_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace gv {

SystemError::SystemError(const std::string& what, int err)
    : Error(what + ": " + std::strerror(err) + " (errno " + std::to_string(err) + ")"), err_(err) {}

namespace detail {

static std::string where(const char* file, int line) {
    const char* base = std::strrchr(file, '/');
    return std::string(" [") + (base ? base + 1 : file) + ":" + std::to_string(line) + "]";
}

void throw_errno(const char* call, const char* file, int line) {
    int e = errno;
    throw SystemError(std::string(call) + " failed" + where(file, line), e);
}

void throw_cuda(const char* call, int code, const char* file, int line) {
#if GV_HAVE_CUDA
    const char* name = cudaGetErrorName(cudaError_t(code));
    const char* text = cudaGetErrorString(cudaError_t(code));
#else
    const char* name = "cudaError";
    const char* text = "unknown";
#endif
    throw CudaError(std::string(call) + " failed: " + name + " (" + text + ")" + where(file, line),
                    code);
}

void throw_invalid(const std::string& msg, const char* file, int line) {
    throw InvalidUsage(msg + where(file, line));
}

std::string hex(uint64_t v) {
    char b[32];
    std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
    return b;
}

}  // namespace detail
}  // namespace gv
