// gv_compute_send: a loop where each step computes on the GPU and then sends the result to
// a peer buffer with an RDMA WRITE, waiting for its completion.
//   GPU-initiated: one persistent kernel computes, posts, commits and waits itself.
//   CPU-initiated: per step the CPU launches the compute kernel, synchronizes, posts the
//   WRITE, rings the doorbell (the software device then runs its executor) and polls.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"

using namespace gv;

#define CK(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            std::fprintf(stderr, "gv_compute_send: %s: %s\n", #call, cudaGetErrorString(e_)); \
            std::exit(1);                                                                     \
        }                                                                                     \
    } while (0)

__device__ __forceinline__ void compute_step(float* x, uint32_t n, uint32_t step) {
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) x[i] = x[i] * 0.999f + float(step);
}

__global__ void compute_kernel(float* x, uint32_t n, uint32_t step) { compute_step(x, n, step); }

__global__ void persistent_kernel(dev::QpHandle qp, float* x, uint32_t n, uint32_t lkey, uint64_t raddr,
                                  uint32_t rkey, uint32_t steps, int* err) {
    for (uint32_t s = 0; s < steps; ++s) {
        compute_step(x, n, s);
        __syncthreads();
        if (threadIdx.x == 0 && dev::write(qp, x, n * 4, lkey, raddr, rkey, kSignaled) != Status::Ok) atomicAdd(err, 1);
        dev::commit<Scope::Block>(qp);
        if (threadIdx.x == 0 && dev::wait_send(qp, 1, nullptr, 5'000'000'000ull) != Status::Ok) atomicAdd(err, 1);
        __syncthreads();
    }
}

int main(int argc, char** argv) {
    uint32_t steps = 2000;
    bool json = false;
    std::vector<uint32_t> sizes{8, 64, 1024, 16384, 65536, 1u << 20};
    for (int i = 1; i < argc; ++i) {
        std::string s = argv[i];
        if ((s == "-n" || s == "--iters") && i + 1 < argc) steps = std::atoi(argv[++i]);
        else if ((s == "-s" || s == "--size") && i + 1 < argc) sizes = {uint32_t(std::atoi(argv[++i]))};
        else if (s == "--json") json = true;
        else {
            std::fprintf(stderr, "usage: %s [-n steps] [-s bytes] [--json]\n", argv[0]);
            return 2;
        }
    }
    try {
        if (Context::gpu_count() == 0) throw NotSupported("no CUDA GPU visible");
        Context ctx(ContextOptions{Backend::Soft, 0});
        // GPU-initiated pair: queues in GPU memory. CPU-initiated pair: queues in host memory.
        gv::ProtectionDomain pd(ctx);
        auto make_pair = [&](MemoryKind mk, std::vector<std::unique_ptr<CompletionQueue>>& cqs,
                             std::vector<std::unique_ptr<QueuePair>>& qps) {
            for (int i = 0; i < 2; ++i) {
                cqs.push_back(std::make_unique<CompletionQueue>(ctx, CqOptions{64, mk}));
                QpOptions o;
                o.send_cq = o.recv_cq = cqs.back().get();
                o.memory = mk;
                qps.push_back(std::make_unique<QueuePair>(pd, o));
            }
            qps[0]->connect(qps[1]->endpoint());
            qps[1]->connect(qps[0]->endpoint());
        };
        std::vector<std::unique_ptr<CompletionQueue>> gcq, ccq;
        std::vector<std::unique_ptr<QueuePair>> gqp, cqp;
        make_pair(MemoryKind::Device, gcq, gqp);
        make_pair(MemoryKind::Host, ccq, cqp);
        uint32_t maxs = 0;
        for (auto z : sizes) maxs = std::max(maxs, z);
        float *x, *y;
        CK(cudaMalloc(&x, maxs));
        CK(cudaMalloc(&y, maxs));
        CK(cudaMemset(x, 0, maxs));
        MemoryRegion mx(pd, x, maxs, kLocalWrite), my(pd, y, maxs, kAllAccess);
        int* d_err;
        CK(cudaMalloc(&d_err, sizeof(int)));
        CK(cudaMemset(d_err, 0, sizeof(int)));
        cudaStream_t st;
        CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        cudaDeviceProp prop;
        CK(cudaGetDeviceProperties(&prop, 0));
        if (!json)
            std::printf("# gv_compute_send: %s, %u steps, one block of 256 threads\n%10s %16s %16s %10s\n", prop.name,
                        steps, "#bytes", "gpu-init[us/it]", "cpu-init[us/it]", "speedup");
        for (uint32_t size : sizes) {
            uint32_t n = std::max<uint32_t>(size / 4, 2);
            // GPU-initiated.
            auto h = gqp[0]->device_handle();
            persistent_kernel<<<1, 256, 0, st>>>(h, x, n, mx.lkey(), uint64_t(y), my.rkey(), 20, d_err);  // warm-up
            CK(cudaStreamSynchronize(st));
            cudaEvent_t e0, e1;
            cudaEventCreate(&e0);
            cudaEventCreate(&e1);
            cudaEventRecord(e0, st);
            persistent_kernel<<<1, 256, 0, st>>>(h, x, n, mx.lkey(), uint64_t(y), my.rkey(), steps, d_err);
            cudaEventRecord(e1, st);
            CK(cudaEventSynchronize(e1));
            float gms;
            cudaEventElapsedTime(&gms, e0, e1);
            // CPU-initiated.
            auto c = cqp[0]->device_handle();
            auto run_cpu = [&](uint32_t k) {
                for (uint32_t s = 0; s < k; ++s) {
                    compute_kernel<<<1, 256, 0, st>>>(x, n, s);
                    CK(cudaStreamSynchronize(st));
                    if (dev::write(c, x, n * 4, mx.lkey(), uint64_t(y), my.rkey(), kSignaled) != Status::Ok)
                        throw Error("CPU post failed");
                    dev::commit(c);
                    Completion comp;
                    auto t0 = std::chrono::steady_clock::now();
                    while (dev::poll_cq(c.scq, &comp, 1) == 0) {
                        if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(5))
                            throw TimeoutError("CPU-initiated step: no completion within 5 s");
                    }
                    if (!comp.ok()) throw Error(std::string("completion error ") + mlx5::syndrome_name(comp.status));
                }
            };
            run_cpu(20);
            auto t0 = std::chrono::steady_clock::now();
            run_cpu(steps);
            double cms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            int err = 0;
            CK(cudaMemcpy(&err, d_err, sizeof(int), cudaMemcpyDeviceToHost));
            if (err) throw Error(std::to_string(err) + " GPU-initiated steps failed");
            double g = gms * 1e3 / steps, cc = cms * 1e3 / steps;
            if (json)
                std::printf("{\"bench\":\"compute_send\",\"bytes\":%u,\"gpu_us\":%.3f,\"cpu_us\":%.3f}\n", n * 4, g, cc);
            else
                std::printf("%10u %16.2f %16.2f %9.1fx\n", n * 4, g, cc, cc / g);
        }
        return 0;
    } catch (const Error& e) {
        std::fprintf(stderr, "gv_compute_send: %s\n", e.what());
        return 1;
    }
}
