// Executor launches for work that CPU threads commit to a software device executing on a
// GPU: CPU threads cannot run its executor (its state is GPU memory), so each doorbell
// becomes a one-block kernel on the library's stream.
#include <cuda_runtime.h>

#include "core/cuda_rt.hpp"
#include "gpuverbs/errors.hpp"
#include "gpuverbs/soft/exec.cuh"

namespace gv::detail {

namespace {
__global__ void soft_doorbell_kernel(soft::QpState* q, uint32_t what) {
    soft::BlockGroup g;
    if (what == 0 || what == 2) soft::progress(q, g);
    if (what == 1 || what == 2) {
        // A new receive (or ERROR): flush in ERROR, and let a sender waiting under the RNR
        // rules go on.
        if (g.leader() && atom::load_acquire(&q->state) == soft::kErr) soft::flush_rq(q);
        soft::QpState* peer = q->remote;
        uint32_t waiting = 0;
        // Only a peer of this process: another process's executor runs its own QPs.
        if (g.leader() && peer && soft::peer_in_process(q)) waiting = atom::load_acquire(&peer->rnr_waiting);
        if (g.bcast(waiting)) soft::progress(peer, g);
    }
}

void soft_doorbell(void* q, uint32_t what) {
    soft_doorbell_kernel<<<1, 256, 0, static_cast<cudaStream_t>(cuda::stream())>>>(
        static_cast<soft::QpState*>(q), what);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) throw_cuda("launch of the software device's executor", int(e), __FILE__, __LINE__);
}
}  // namespace

namespace cuda {
DoorbellFn soft_doorbell_fn() { return &soft_doorbell; }
}  // namespace cuda

}  // namespace gv::detail
