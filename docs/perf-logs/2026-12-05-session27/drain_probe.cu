// Code-size probe: one kernel per executor group type, each holding a QP and draining it.
#include "gpuverbs/device.cuh"
#include "gpuverbs/detail/soft/exec.cuh"
using namespace gv::detail::soft;
__global__ void __launch_bounds__(512) drain_block(QpContext* q) {
    hold(q, gv::detail::BlockGroup{}, Published::of(q), kScopeGpu);
}
__global__ void drain_thread(QpContext* q) { hold(q, gv::detail::ThreadGroup{}, Published::of(q), kScopeGpu); }
