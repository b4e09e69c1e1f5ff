// Helpers shared by the benchmark tools (gv_bench.cu, gv_post_rate.cu, gv_compute_send.cu and
// the gv_probe_* tools): checked CUDA calls, the GPU check, owners of CUDA resources, and the
// record in which a kernel (or a CPU initiator thread) keeps its first failure, so
// that a tool exits non-zero saying what failed instead of printing numbers of failed work.
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

// ---- failures of the measured work ------------------------------------------------------------

/// Which call failed (Failure::step).
enum class Step : uint32_t {
    Post,       ///< posting a work request
    PostRecv,   ///< posting a receive
    Commit,     ///< ringing the doorbell (dev::commit)
    WaitSend,   ///< waiting for the completion of a signaled work request
    WaitRecv,   ///< waiting for receive completions
    AwaitPing,  ///< write_lat responder: the initiator's write did not land in time
    AwaitPong,  ///< write_lat initiator: the responder's answer did not land in time
};

/// The first failure that a benchmark kernel or the CPU initiator threads met, and how many
/// they met. Kernels cannot throw: they record here (memory zeroed before the run: no
/// failure) and the host reads the record once the kernel has ended.
struct Failure {
    unsigned int count;    ///< failed calls; the first one filled in the fields below
    uint32_t step;         ///< Step
    uint32_t qp;           ///< the QP's index in the benchmark (its CUDA block or CPU thread)
    uint32_t qpn;          ///< its QP number
    uint32_t iter;         ///< work request (bandwidth) or round trip (latency), counted from 0
    int32_t status;        ///< the gv::Status the call returned
    uint16_t wqe_counter;  ///< of the failed completion, when has_cqe
    uint8_t has_cqe;       ///< the call polled a completion with an error syndrome (below)
    uint8_t syndrome, vendor_err, wqe_opcode;
};

/// Records a failed call in f (thread scope, any number of threads at once). c: the failed
/// completion when the call returned Status::CompletionError with one in hand (its syndrome
/// is kept when nonzero). Not inlined: it sits on the failure paths of measured loops.
inline __host__ __device__ __noinline__ void record_failure(Failure* f, Step step, uint32_t qp, uint32_t qpn,
                                                            uint32_t iter, gv::Status st,
                                                            gv::Completion c = gv::Completion{}) {
#if GV_DEVICE_CODE
    const unsigned int before = atomicAdd(&f->count, 1u);
#else
    const unsigned int before = __atomic_fetch_add(&f->count, 1u, __ATOMIC_RELAXED);
#endif
    if (before != 0) return;  // only the first failure is described
    f->step = uint32_t(step);
    f->qp = qp;
    f->qpn = qpn;
    f->iter = iter;
    f->status = int32_t(st);
    if (!c.ok()) {
        f->has_cqe = 1;
        f->syndrome = c.status;
        f->vendor_err = c.vendor_err;
        f->wqe_opcode = c.wqe_opcode;
        f->wqe_counter = c.wqe_counter;
    }
}

/// One line on a failure record: which QP, which call of which iteration, which status and
/// completion syndrome, how many failures in all. `what`: the name of the posted work
/// requests ("WRITE", ...).
inline std::string describe(const Failure& f, const char* what) {
    char b[512];
    const char* st = gv::status_name(gv::Status(f.status));
    const unsigned it = f.iter;
    int n = std::snprintf(b, sizeof b, "QP %u (qpn 0x%x): ", f.qp, f.qpn);
    const size_t room = sizeof b - size_t(n);
    switch (Step(f.step)) {
        case Step::Post: std::snprintf(b + n, room, "posting %s #%u returned %s", what, it, st); break;
        case Step::PostRecv: std::snprintf(b + n, room, "posting receive #%u returned %s", it, st); break;
        case Step::Commit: std::snprintf(b + n, room, "commit after %s #%u returned %s", what, it, st); break;
        case Step::WaitSend:
            std::snprintf(b + n, room, "waiting for the completion of %s #%u: %s", what, it, st);
            break;
        case Step::WaitRecv:
            std::snprintf(b + n, room, "waiting for the completions of receives up to #%u: %s", it, st);
            break;
        case Step::AwaitPing:
            std::snprintf(b + n, room, "round trip #%u: the initiator's %s did not land in time (%s)", it,
                          what, st);
            break;
        case Step::AwaitPong:
            std::snprintf(b + n, room, "round trip #%u: the responder's %s did not land in time (%s)", it,
                          what, st);
            break;
        default: std::snprintf(b + n, room, "step %u of #%u: %s", f.step, it, st); break;
    }
    std::string s = b;
    if (f.has_cqe) {
        std::snprintf(b, sizeof b,
                      ", completion syndrome 0x%02x %s (vendor syndrome 0x%02x, WQE opcode 0x%02x, "
                      "wqe_counter %u)",
                      f.syndrome, gv::mlx5::syndrome_name(f.syndrome), f.vendor_err, f.wqe_opcode,
                      unsigned(f.wqe_counter));
        s += b;
    }
    if (f.count > 1) s += "; " + std::to_string(f.count) + " failed calls in all";
    return s;
}

/// The failure record a kernel left in device memory (call after the kernel has ended).
inline Failure read_failure(const Failure* d_fail) {
    Failure f;
    CUDA_CHECK(cudaMemcpy(&f, d_fail, sizeof f, cudaMemcpyDeviceToHost));
    return f;
}

}  // namespace gvbench
