// gv_compute_send: a loop where each step computes on the GPU and then sends the result to
// a peer buffer with an RDMA WRITE, waiting for its completion.
//   GPU-initiated: one persistent kernel computes, posts, commits and waits itself.
//   CPU-initiated: per step the CPU launches the compute kernel, synchronizes, posts the
//   WRITE, rings the doorbell (the software device then runs its executor) and polls.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"

using namespace gv;
using gvbench::Buffer;
using gvbench::Event;
using gvbench::Failure;
using gvbench::record_failure;
using gvbench::Step;

__device__ __forceinline__ void compute_step(float* x, uint32_t n, uint32_t step) {
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) x[i] = x[i] * 0.999f + float(step);
}

__global__ void compute_kernel(float* x, uint32_t n, uint32_t step) { compute_step(x, n, step); }

__global__ void persistent_kernel(dev::QpHandle qp, float* x, uint32_t n, uint32_t lkey, uint64_t raddr,
                                  uint32_t rkey, uint32_t steps, Failure* fail) {
    for (uint32_t s = 0; s < steps; ++s) {
        compute_step(x, n, s);
        __syncthreads();
        // A small message: posted and committed by thread 0 in one call (kCommit; the software
        // device's direct path, in which the posting thread executes it). A larger one: posted by
        // thread 0, committed by the whole block, whose threads then copy it together.
        const bool small = n * 4 <= 32;
        if (threadIdx.x == 0) {
            const Status st = dev::write(qp, x, n * 4, lkey, raddr, rkey, kSignaled | (small ? kCommit : 0u));
            if (st != Status::Ok) record_failure(fail, small ? Step::Commit : Step::Post, 0, qp.q.qpn, s, st);
        }
        const Status cs = small ? Status::Ok : dev::commit<Scope::Block>(qp);
        if (threadIdx.x == 0) {
            if (cs != Status::Ok) record_failure(fail, Step::Commit, 0, qp.q.qpn, s, cs);
            Completion c;
            const Status ws = dev::wait_send(qp, 1, &c, 5'000'000'000ull);
            if (ws != Status::Ok)
                record_failure(fail, Step::WaitSend, 0, qp.q.qpn, s, ws,
                               ws == Status::CompletionError ? c : Completion{});
        }
        __syncthreads();
    }
}

const char* const kUsage =
    "usage: gv_compute_send [-n steps] [-s bytes] [--json]\n"
    "Compute, then send the result: GPU-initiated (the kernel posts) against CPU-initiated (the\n"
    "host posts after the kernel), per step. Needs a CUDA GPU.\n"
    "  -n, --iters N   steps, 1 .. 1e8 (default 2000)\n"
    "  -s, --size N    one message size, 1 .. 1073741824 (default: 8 B .. 1 MiB)\n"
    "      --json      one JSON object per size\n"
    "      --help      this text\n"
    "Exit status: 0 measured, 1 failed (the reason on stderr), 2 bad usage.\n";

int main(int argc, char** argv) {
    return gvcli::run(argc, argv, kUsage, [&](gvcli::Args& args) {
        uint32_t steps = 2000;
        bool json = false;
        std::vector<uint32_t> sizes{8, 64, 1024, 16384, 65536, 1u << 20};
        while (args.next()) {
            if (args.is("-n", "--iters")) steps = uint32_t(args.integer(1, 100000000));
            else if (args.is("-s", "--size")) sizes = {uint32_t(args.integer(1, 1u << 30))};
            else if (args.is("--json")) json = true;
            else args.unknown();
        }
        gvbench::require_gpu();
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
        // A step sends n = max(bytes / 4, 2) floats.
        auto floats_of = [](uint32_t bytes) { return std::max<uint32_t>(bytes / 4, 2); };
        uint32_t maxs = 0;
        for (auto z : sizes) maxs = std::max(maxs, floats_of(z) * 4);
        Buffer<float> xb(maxs / 4), yb(maxs / 4);
        float *x = xb.get(), *y = yb.get();
        CUDA_CHECK(cudaMemset(x, 0, maxs));
        MemoryRegion mx(pd, x, maxs, kLocalWrite), my(pd, y, maxs, kAllAccess);
        Buffer<Failure> d_fail(1);
        CUDA_CHECK(cudaMemset(d_fail.get(), 0, sizeof(Failure)));
        gvbench::Stream st;
        if (!json)
            std::printf("# gv_compute_send: %s, %u steps, one block of 256 threads\n%10s %16s %16s %10s\n",
                        gvbench::gpu_name().c_str(), steps, "#bytes", "gpu-init[us/it]", "cpu-init[us/it]",
                        "speedup");
        for (uint32_t size : sizes) {
            const uint32_t n = floats_of(size);
            auto check_gpu = [&](const char* run) {
                const Failure f = gvbench::read_failure(d_fail.get());
                if (f.count)
                    throw Error("the GPU-initiated kernel failed (" + std::to_string(n * 4) + " bytes, " +
                                run + "): " + gvbench::describe(f, "WRITE"));
            };
            // GPU-initiated.
            auto h = gqp[0]->device_handle();
            persistent_kernel<<<1, 256, 0, st>>>(h, x, n, mx.lkey(), uint64_t(y), my.rkey(), 20,
                                                 d_fail.get());  // warm-up
            CUDA_CHECK(cudaGetLastError());
            CUDA_CHECK(cudaStreamSynchronize(st));
            check_gpu("warm-up");
            Event e0, e1;
            // Between the two records nothing but the launch: their results are checked after.
            const cudaError_t rec0 = cudaEventRecord(e0, st);
            persistent_kernel<<<1, 256, 0, st>>>(h, x, n, mx.lkey(), uint64_t(y), my.rkey(), steps,
                                                 d_fail.get());
            const cudaError_t rec1 = cudaEventRecord(e1, st);
            CUDA_CHECK(rec0);
            CUDA_CHECK(rec1);
            CUDA_CHECK(cudaGetLastError());
            CUDA_CHECK(cudaEventSynchronize(e1));
            const float gms = gvbench::elapsed_ms(e0, e1);
            check_gpu("measured run");
            // CPU-initiated.
            auto c = cqp[0]->device_handle();
            auto run_cpu = [&](uint32_t k, const char* run) {
                // Throws what failed in step s: the loop ends at its first failure.
                auto fail = [&](uint32_t s, Step step, Status why, Completion comp = Completion{}) {
                    Failure f{};
                    record_failure(&f, step, 0, c.q.qpn, s, why, comp);
                    throw Error("the CPU initiator failed (" + std::to_string(n * 4) + " bytes, " + run +
                                "): " + gvbench::describe(f, "WRITE"));
                };
                for (uint32_t s = 0; s < k; ++s) {
                    compute_kernel<<<1, 256, 0, st>>>(x, n, s);
                    CUDA_CHECK(cudaStreamSynchronize(st));
                    const Status ps = dev::write(c, x, n * 4, mx.lkey(), uint64_t(y), my.rkey(), kSignaled);
                    if (ps != Status::Ok) fail(s, Step::Post, ps);
                    const Status cs = dev::commit(c);
                    if (cs != Status::Ok) fail(s, Step::Commit, cs);
                    Completion comp;
                    auto t0 = std::chrono::steady_clock::now();
                    while (dev::poll_cq(c.scq, &comp, 1) == 0) {
                        if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(5))
                            fail(s, Step::WaitSend, Status::Timeout);
                    }
                    if (!comp.ok()) fail(s, Step::WaitSend, Status::CompletionError, comp);
                }
                CUDA_CHECK(cudaGetLastError());  // a failed launch of compute_kernel
            };
            run_cpu(20, "warm-up");
            auto t0 = std::chrono::steady_clock::now();
            run_cpu(steps, "measured run");
            double cms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            double g = gms * 1e3 / steps, cc = cms * 1e3 / steps;
            if (json)
                std::printf("{\"bench\":\"compute_send\",\"bytes\":%u,\"gpu_us\":%.3f,\"cpu_us\":%.3f}\n",
                            n * 4, g, cc);
            else
                std::printf("%10u %16.2f %16.2f %9.1fx\n", n * 4, g, cc, cc / g);
        }
        return 0;
    });
}
