// gv_demo: the main job. Connected QP pairs on the software RDMA device; CUDA kernels
// (one block per QP) or, without a GPU, CPU threads (one per QP) post RDMA WRITEs to the
// peer's buffer and RDMA READs back, then every byte is verified. Prints a short table.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

using namespace gv;

namespace {

struct Args {
    int qps = 8;
    int iters = 256;  // WQEs per QP per direction and size
    int gpu = -2;     // -2: GPU 0 if present, -1: CPU threads
};

struct Job {
    dev::QpHandle qp;
    uint8_t* src;
    uint8_t* dst;
    uint8_t* back;
    uint32_t lsrc, rdst, lback;
    uint64_t region;  // bytes of this QP's slice
    uint32_t size, iters;
};

// One direction (0: WRITE src->dst, 1: READ dst->back) of one QP's job, posted by `rank`
// of `nthreads` posters; returns the number of WQEs that failed to post.
GV_HOST_DEVICE uint64_t offset_of(const Job& j, uint32_t i) { return (uint64_t(i) * j.size) % (j.region - j.size + 1); }

#if defined(__CUDACC__)
__global__ void demo_kernel(const Job* jobs, int phase, int* errors) {
    const Job& j = jobs[blockIdx.x];
    for (uint32_t base = 0; base < j.iters; base += blockDim.x) {
        uint32_t i = base + threadIdx.x;
        uint32_t n = min(blockDim.x, j.iters - base);
        if (i < j.iters) {
            uint64_t off = offset_of(j, i);
            bool last = threadIdx.x == n - 1;
            Status st = phase == 0 ? dev::write(j.qp, j.src + off, j.size, j.lsrc, uint64_t(j.dst + off), j.rdst,
                                                last ? kSignaled : 0)
                                   : dev::read(j.qp, j.back + off, j.size, j.lback, uint64_t(j.dst + off), j.rdst,
                                               last ? kSignaled : 0);
            if (st != Status::Ok) atomicAdd(errors, 1);
        }
        dev::commit<Scope::Block>(j.qp);
        if (threadIdx.x == 0) {
            Completion c;
            if (dev::wait_send(j.qp, 1, &c, 10'000'000'000ull) != Status::Ok) atomicAdd(errors, 1);
        }
        __syncthreads();
    }
}
#endif

void cpu_job(const Job& j, int phase, int* errors) {
    for (uint32_t base = 0; base < j.iters; base += 64) {
        uint32_t n = std::min<uint32_t>(64, j.iters - base);
        for (uint32_t k = 0; k < n; ++k) {
            uint64_t off = offset_of(j, base + k);
            uint32_t fl = k == n - 1 ? kSignaled : 0;
            Status st = phase == 0 ? dev::write(j.qp, j.src + off, j.size, j.lsrc, uint64_t(j.dst + off), j.rdst, fl)
                                   : dev::read(j.qp, j.back + off, j.size, j.lback, uint64_t(j.dst + off), j.rdst, fl);
            if (st != Status::Ok) __atomic_add_fetch(errors, 1, __ATOMIC_RELAXED);
        }
        dev::commit(j.qp);
        Completion c;
        if (dev::wait_send(j.qp, 1, &c, 10'000'000'000ull) != Status::Ok) __atomic_add_fetch(errors, 1, __ATOMIC_RELAXED);
    }
}

int usage(const char* me) {
    std::fprintf(stderr,
                 "usage: %s [--qps N] [--iters N] [--gpu G | --cpu]\n"
                 "  --qps N    connected QP pairs, one CUDA block (or CPU thread) each (default 8)\n"
                 "  --iters N  WRITEs and READs per QP and message size (default 256)\n"
                 "  --gpu G    execute on GPU G (default: GPU 0 when present)\n"
                 "  --cpu      CPU threads only\n",
                 me);
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        std::string s = argv[i];
        auto num = [&](int lo, int hi) {
            if (i + 1 >= argc) throw InvalidUsage(s + " needs a value");
            char* end;
            long v = std::strtol(argv[++i], &end, 10);
            if (*end || v < lo || v > hi)
                throw InvalidUsage(s + " " + argv[i] + ": expected an integer in " + std::to_string(lo) + " .. " +
                                   std::to_string(hi));
            return int(v);
        };
        try {
            if (s == "--qps") a.qps = num(1, 1024);
            else if (s == "--iters") a.iters = num(1, 1 << 20);
            else if (s == "--gpu") a.gpu = num(0, 63);
            else if (s == "--cpu") a.gpu = -1;
            else return usage(argv[0]);
        } catch (const Error& e) {
            std::fprintf(stderr, "gv_demo: %s\n", e.what());
            return 2;
        }
    }
    try {
#if !defined(__CUDACC__)
        if (a.gpu >= 0) throw NotSupported("gv_demo was built without CUDA: use --cpu");
        a.gpu = -1;
#endif
        Context ctx(ContextOptions{Backend::Soft, a.gpu});
        const bool gpu = ctx.gpu() >= 0;
        std::printf("gpuverbs demo: %d QP pairs on %s, executed by %s\n", a.qps, ctx.name().c_str(),
                    gpu ? "CUDA kernels (one block per QP, 256 threads)" : "CPU threads (one per QP)");
        ProtectionDomain pd(ctx);
        std::vector<std::unique_ptr<CompletionQueue>> cqs;
        std::vector<std::unique_ptr<QueuePair>> qps;
        for (int q = 0; q < 2 * a.qps; ++q) {
            cqs.push_back(std::make_unique<CompletionQueue>(ctx, CqOptions{1024}));
            QpOptions o;
            o.send_cq = o.recv_cq = cqs.back().get();
            o.sq_depth = 512;
            qps.push_back(std::make_unique<QueuePair>(pd, o));
        }
        for (int q = 0; q < a.qps; ++q) {
            qps[2 * q]->connect(qps[2 * q + 1]->endpoint());
            qps[2 * q + 1]->connect(qps[2 * q]->endpoint());
        }
        const uint32_t sizes[] = {8, 256, 4096, 65536, 1u << 20};
        const uint64_t region = gpu ? (64ull << 20) : (8ull << 20);
        const uint64_t total = region * a.qps;
        std::vector<uint8_t> h_src(total), h_out(total);
        std::mt19937_64 rng(42);
        for (size_t i = 0; i + 8 <= total; i += 8) {
            uint64_t v = rng();
            std::memcpy(&h_src[i], &v, 8);
        }
        uint8_t *src, *dst, *back;
#if defined(__CUDACC__)
        if (gpu) {
            if (cudaMalloc(&src, total) || cudaMalloc(&dst, total) || cudaMalloc(&back, total))
                throw CudaError("cudaMalloc of the demo buffers", 2);
            cudaMemcpy(src, h_src.data(), total, cudaMemcpyHostToDevice);
        } else
#endif
        {
            src = static_cast<uint8_t*>(std::malloc(total));
            dst = static_cast<uint8_t*>(std::malloc(total));
            back = static_cast<uint8_t*>(std::malloc(total));
            std::memcpy(src, h_src.data(), total);
        }
        MemoryRegion ms(pd, src, total, kLocalWrite), md(pd, dst, total, kAllAccess), mb(pd, back, total, kLocalWrite);

        std::printf("%10s %6s %10s %14s %14s %10s\n", "#bytes", "#QPs", "#WQEs", "WRITE GB/s", "READ GB/s", "verified");
        bool all_ok = true;
        for (uint32_t size : sizes) {
            if (size > region) continue;
            std::vector<Job> jobs(a.qps);
            for (int q = 0; q < a.qps; ++q)
                jobs[q] = Job{qps[2 * q]->device_handle(), src + q * region, dst + q * region, back + q * region,
                              ms.lkey(), md.rkey(), mb.lkey(), region, size, uint32_t(a.iters)};
            double secs[2] = {0, 0};
            int errors = 0;
#if defined(__CUDACC__)
            if (gpu) {
                cudaMemset(dst, 0, total);
                cudaMemset(back, 0, total);
                Job* d_jobs;
                int* d_err;
                cudaMalloc(&d_jobs, jobs.size() * sizeof(Job));
                cudaMalloc(&d_err, sizeof(int));
                cudaMemset(d_err, 0, sizeof(int));
                cudaMemcpy(d_jobs, jobs.data(), jobs.size() * sizeof(Job), cudaMemcpyHostToDevice);
                cudaEvent_t e[3];
                for (auto& x : e) cudaEventCreate(&x);
                cudaEventRecord(e[0]);
                demo_kernel<<<a.qps, 256>>>(d_jobs, 0, d_err);
                cudaEventRecord(e[1]);
                demo_kernel<<<a.qps, 256>>>(d_jobs, 1, d_err);
                cudaEventRecord(e[2]);
                cudaError_t ce = cudaDeviceSynchronize();
                if (ce != cudaSuccess) throw CudaError(std::string("demo kernel: ") + cudaGetErrorString(ce), ce);
                float m0, m1;
                cudaEventElapsedTime(&m0, e[0], e[1]);
                cudaEventElapsedTime(&m1, e[1], e[2]);
                secs[0] = m0 / 1e3;
                secs[1] = m1 / 1e3;
                cudaMemcpy(&errors, d_err, sizeof(int), cudaMemcpyDeviceToHost);
                cudaFree(d_jobs);
                cudaFree(d_err);
            } else
#endif
            {
                std::memset(dst, 0, total);
                std::memset(back, 0, total);
                for (int phase = 0; phase < 2; ++phase) {
                    auto t0 = std::chrono::steady_clock::now();
                    std::vector<std::thread> th;
                    for (auto& j : jobs) th.emplace_back(cpu_job, std::cref(j), phase, &errors);
                    for (auto& t : th) t.join();
                    secs[phase] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                }
            }
            // Verify: every byte the WRITEs covered equals the source, in dst and in back.
            bool ok = errors == 0;
            for (int which = 0; which < 2 && ok; ++which) {
                uint8_t* buf = which == 0 ? dst : back;
#if defined(__CUDACC__)
                if (gpu) cudaMemcpy(h_out.data(), buf, total, cudaMemcpyDeviceToHost);
                else
#endif
                    std::memcpy(h_out.data(), buf, total);
                for (int q = 0; q < a.qps && ok; ++q) {
                    uint64_t covered = std::min<uint64_t>(uint64_t(a.iters) * size, region);
                    if (uint64_t(a.iters) * size > region - size + 1) covered = region;  // wrapped
                    for (uint32_t i = 0; i < uint32_t(a.iters) && ok; ++i) {
                        uint64_t off = q * region + offset_of(jobs[q], i);
                        if (std::memcmp(h_out.data() + off, h_src.data() + off, size) != 0) {
                            for (uint32_t b = 0; b < size; ++b)
                                if (h_out[off + b] != h_src[off + b]) {
                                    std::printf("MISMATCH in %s: QP %d, offset %llu: expected 0x%02x, got 0x%02x\n",
                                                which ? "READ" : "WRITE", q, (unsigned long long)(off + b),
                                                h_src[off + b], h_out[off + b]);
                                    break;
                                }
                            ok = false;
                        }
                    }
                    (void)covered;
                }
            }
            double bytes = double(size) * a.iters * a.qps;
            std::printf("%10u %6d %10d %14.2f %14.2f %10s\n", size, a.qps, a.iters * a.qps * 2, bytes / secs[0] / 1e9,
                        bytes / secs[1] / 1e9, ok ? "yes" : "NO");
            all_ok &= ok;
        }
#if defined(__CUDACC__)
        if (gpu) {
            cudaFree(src);
            cudaFree(dst);
            cudaFree(back);
        } else
#endif
        {
            std::free(src);
            std::free(dst);
            std::free(back);
        }
        std::printf(all_ok ? "Validation successful: every byte written and read back matches\n"
                           : "Validation FAILED\n");
        return all_ok ? 0 : 1;
    } catch (const Error& e) {
        std::fprintf(stderr, "gv_demo: %s\n", e.what());
        return 1;
    }
}
