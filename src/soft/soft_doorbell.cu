// Executor launches for work that CPU threads commit to a software device executing on a
// GPU: CPU threads cannot run its executor (its state is GPU memory), so each doorbell
// becomes a one-block kernel on the library's stream.
#include <cuda.h>
#include <cuda_runtime.h>

#include <mutex>
#include <unordered_map>

#include "cuda/cuda_rt.hpp"
#include "gpuverbs/errors.hpp"
#include "gpuverbs/detail/soft/exec.cuh"

namespace gv::detail {

namespace {
__global__ void soft_doorbell_kernel(soft::QpContext* q, dev::HostDoorbell what) {
    BlockGroup g;
    if (what == dev::HostDoorbell::Drive) {
        // What a waiting kernel's drive() does (detail/soft/doorbell.cuh), for a CPU waiter.
        uint32_t need = 0;
        if (g.leader()) need = soft::needs_progress(q) ? 1 : 0;
        if (!g.bcast(need)) return;
        soft::progress(q, g);
        if (g.leader() && soft::load_state(q, soft::state_scope(q) != soft::kScopeGpu) == QpState::Error)
            soft::flush_rq(q);
        return;
    }
    if (what != dev::HostDoorbell::RecvQueue) soft::progress(q, g);
    if (what != dev::HostDoorbell::SendQueue) {
        // A new receive (or ERROR): flush in ERROR, and let a sender waiting under the RNR
        // rules go on.
        const bool sys = soft::state_scope(q) != soft::kScopeGpu;  // a peer on the other GPU (xgpu)
        if (g.leader() && soft::load_state(q, sys) == QpState::Error) soft::flush_rq(q);
        soft::QpContext* peer = q->remote;
        uint32_t waiting = 0;
        // Only a peer of this process: another process's executor runs its own QPs.
        if (g.leader() && peer && soft::peer_in_process(q)) waiting = atom::load_acquire(&peer->rnr_waiting, sys);
        if (g.bcast(waiting)) soft::progress(peer, g);
    }
}

/// A CPU waiter's drive requests come once per turn of its wait loop; one launch per QP every
/// kDriveIntervalNs is enough for RNR timers (at least 10 us) and flushes, and keeps a
/// spinning waiter from filling the stream with launches.
constexpr uint64_t kDriveIntervalNs = 20000;

bool drive_due(void* q) {
    static std::mutex mu;
    static std::unordered_map<void*, uint64_t> last;  // QP context -> last drive launch
    const uint64_t now = atom::now_ns();
    std::lock_guard<std::mutex> lock(mu);
    if (last.size() > 65536) last.clear();  // bounded: destroyed QPs leave entries behind
    uint64_t& t = last[q];
    if (t && now - t < kDriveIntervalNs) return false;
    t = now;
    return true;
}

void soft_doorbell(void* q, dev::HostDoorbell what) {
    if (what == dev::HostDoorbell::Drive && !drive_due(q)) return;
    soft_doorbell_kernel<<<1, 256, 0, static_cast<cudaStream_t>(cuda::stream())>>>(
        static_cast<soft::QpContext*>(q), what);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) throw_cuda("launch of the software device's executor", int(e), __FILE__, __LINE__);
}

/// The same on the QP's own GPU (the thread's current device is left as it was): with two
/// GPUs in one process, a CPU thread whose current device is the other GPU must not launch
/// the executor there.
void soft_doorbell_at(void* target, dev::HostDoorbell what) {
    const auto* t = static_cast<const cuda::SoftDoorbellTarget*>(target);
    cuda::DeviceGuard guard(t->gpu);
    soft_doorbell(t->qp_context, what);
}
}  // namespace

namespace cuda {
DoorbellFn soft_doorbell_fn() { return &soft_doorbell; }
DoorbellFn soft_doorbell_at_fn() { return &soft_doorbell_at; }

namespace {
/// The executor's CUfunction on the current device (null, error state cleared, if none).
CUfunction executor_function() {
    cudaFunction_t f = nullptr;
    if (cudaGetFuncBySymbol(&f, reinterpret_cast<const void*>(&soft_doorbell_kernel)) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    return reinterpret_cast<CUfunction>(f);
}
}  // namespace

void load_executor(int gpu) {
    DeviceGuard guard(gpu);
    // cuFuncLoad (CUDA 12.4) loads the function itself; the runtime call below loads it too
    // where the driver lacks it, and reports a failure in the runtime's terms.
    using LoadFn = CUresult (*)(CUfunction);
    LoadFn load = nullptr;
    if (CUfunction f = executor_function(); f && driver_fn("cuFuncLoad", load, 12040)) (void)load(f);
    cudaFuncAttributes a{};
    const cudaError_t e = cudaFuncGetAttributes(&a, soft_doorbell_kernel);
    if (e != cudaSuccess) throw_cuda("loading the software device's executor kernel", int(e), __FILE__, __LINE__);
}

int executor_loaded(int gpu) {
    DeviceGuard guard(gpu);
    using IsLoadedFn = CUresult (*)(CUfunctionLoadingState*, CUfunction);
    IsLoadedFn is_loaded = nullptr;
    CUfunction f = executor_function();
    if (!f || !driver_fn("cuFuncIsLoaded", is_loaded, 12040)) return -1;
    CUfunctionLoadingState st{};
    if (is_loaded(&st, f) != CUDA_SUCCESS) return -1;
    return st == CU_FUNCTION_LOADING_STATE_LOADED ? 1 : 0;
}
}  // namespace cuda

}  // namespace gv::detail
