// The shape of gv_bench's GPU sender (bw_kernel, op write/read/send, block commit), alone, for
// ptxas -v: registers and spills of the executor inlined into a 512-thread block-commit kernel.
#include "gpuverbs/device.cuh"
using namespace gv;
__global__ void __launch_bounds__(512) k(dev::QpHandle qp, uint8_t* src, uint8_t* dst, uint32_t lkey, uint32_t rkey,
                                         int op, uint32_t size, uint32_t iters, uint64_t slice, unsigned long long* err) {
    for (uint32_t base = 0; base < iters; base += blockDim.x) {
        uint32_t n = min(blockDim.x, iters - base);
        uint32_t i = base + threadIdx.x;
        if (threadIdx.x < n) {
            uint64_t off = (i % (slice / size)) * size;
            uint32_t fl = threadIdx.x == n - 1 ? kSignaled : 0;
            Status st;
            if (op == 0) st = dev::write(qp, src + off, size, lkey, uint64_t(dst + off), rkey, fl);
            else if (op == 1) st = dev::read(qp, src + off, size, lkey, uint64_t(dst + off), rkey, fl);
            else st = dev::send(qp, src + off, size, lkey, fl);
            if (st != Status::Ok) atomicAdd(err, 1ull);
        }
        const Status cs = dev::commit<Scope::Block>(qp);
        if (threadIdx.x == 0) {
            if (cs != Status::Ok) atomicAdd(err, 2ull);
            if (dev::wait_send(qp, 1, nullptr, 20'000'000'000ull) != Status::Ok) atomicAdd(err, 4ull);
        }
        __syncthreads();
    }
}
__global__ void kw(dev::QpHandle qp, uint8_t* src, uint8_t* dst, uint32_t lkey, uint32_t rkey, uint32_t size,
                   unsigned long long* err) {
    Status st = dev::write<Scope::Warp>(qp, src + threadIdx.x * size, size, lkey, uint64_t(dst + threadIdx.x * size), rkey,
                                        threadIdx.x == 31 ? kSignaled : 0u);
    if (st == Status::Ok) st = dev::commit<Scope::Warp>(qp);
    if (st != Status::Ok) atomicAdd(err, 1ull);
}
__global__ void k1(dev::QpHandle qp, uint8_t* src, uint8_t* dst, uint32_t lkey, uint32_t rkey, uint32_t size,
                   unsigned long long* err) {
    if (dev::write(qp, src, size, lkey, uint64_t(dst), rkey, kSignaled | kCommit) != Status::Ok) atomicAdd(err, 1ull);
}
