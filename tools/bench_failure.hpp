// The record in which a benchmark kernel or a CPU initiator thread keeps its first failure,
// so that a tool exits non-zero saying what failed instead of printing numbers of failed work.
// Host and device code: the CUDA tools (bench_common.hpp includes it) and the benchmarks'
// CPU-only build (gv_bench.cu compiled as C++) share it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "gpuverbs/device.cuh"

#if defined(__CUDACC__)
#define GV_BENCH_HD __host__ __device__ __noinline__
#else
#define GV_BENCH_HD __attribute__((noinline))
#endif

namespace gvbench {

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
inline GV_BENCH_HD void record_failure(Failure* f, Step step, uint32_t qp, uint32_t qpn,
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

}  // namespace gvbench
