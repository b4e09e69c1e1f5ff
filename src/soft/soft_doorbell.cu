// Executor launches for work that CPU threads commit to a software device executing on a
// GPU: CPU threads cannot run its executor (its state is GPU memory), so each doorbell
// becomes a one-block kernel on the library's stream.
#include <cuda_runtime.h>

#include "cuda/cuda_rt.hpp"
#include "gpuverbs/errors.hpp"
#include "gpuverbs/detail/soft/exec.cuh"

namespace gv::detail {

namespace {
__global__ void soft_doorbell_kernel(soft::QpContext* q, dev::HostDoorbell what) {
    BlockGroup g;
    if (what != dev::HostDoorbell::RecvQueue) soft::progress(q, g);
    if (what != dev::HostDoorbell::SendQueue) {
        // A new receive (or ERROR): flush in ERROR, and let a sender waiting under the RNR
        // rules go on.
        if (g.leader() && soft::load_state(q) == QpState::Error) soft::flush_rq(q);
        soft::QpContext* peer = q->remote;
        uint32_t waiting = 0;
        // Only a peer of this process: another process's executor runs its own QPs.
        if (g.leader() && peer && soft::peer_in_process(q)) waiting = atom::load_acquire(&peer->rnr_waiting);
        if (g.bcast(waiting)) soft::progress(peer, g);
    }
}

void soft_doorbell(void* q, dev::HostDoorbell what) {
    soft_doorbell_kernel<<<1, 256, 0, static_cast<cudaStream_t>(cuda::stream())>>>(
        static_cast<soft::QpContext*>(q), what);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) throw_cuda("launch of the software device's executor", int(e), __FILE__, __LINE__);
}
}  // namespace

namespace cuda {
DoorbellFn soft_doorbell_fn() { return &soft_doorbell; }
}  // namespace cuda

}  // namespace gv::detail
