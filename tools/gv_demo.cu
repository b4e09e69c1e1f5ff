// gv_demo: the main job. Connected QP pairs on the software RDMA device (or, with --device, on
// an RDMA device); CUDA kernels (one block per QP) or, without a GPU, CPU threads (one per QP)
// post RDMA WRITEs to the peer's buffer and RDMA READs back, then every byte is verified.
// Prints a short table.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "device_option.hpp"
#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"
#include "msg_offset.hpp"

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

using namespace gv;

namespace {

struct Args {
    int qps = 8;
    int iters = 256;  // WQEs per QP per direction and size
    int gpu = -2;     // -2: GPU 0 if present, -1: CPU threads
    std::string device = "soft";  // soft, mlx5 / mlx5_N (the mlx5 backend), verbs or a device name
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

// Message i's offset in the QP's slice (msg_offset.hpp: aligned to its size, as perftest's).
GV_HOST_DEVICE uint64_t offset_of(const Job& j, uint32_t i) { return gvbench::msg_off(i, j.size, j.region); }

#if defined(__CUDACC__)
// One direction (0: WRITE src->dst, 1: READ dst->back) of one QP's job, posted by `rank`
// of `nthreads` posters; returns the number of WQEs that failed to post.
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

std::string usage() {
    return "usage: gv_demo [--qps N] [--iters N] [--gpu G | --cpu] [--device NAME]\n"
           "Connected QP pairs on the software RDMA device (or, --device, an RDMA device): one CUDA\n"
           "block (or CPU thread) per QP posts RDMA WRITEs to its peer's buffer and READs back;\n"
           "every byte is verified.\n"
           "  --qps N    connected QP pairs, one CUDA block (or CPU thread) each, 1 .. 1024 (default 8)\n"
           "  --iters N  WRITEs and READs per QP and message size, 1 .. 1048576 (default 256)\n"
           "  --gpu G    execute on GPU G; -1: CPU threads (default: GPU 0 when there is one)\n"
           "  --cpu      CPU threads only (same as --gpu -1)\n"
           "  --device NAME  soft: the software RDMA device (default); mlx5 or mlx5_N: a ConnectX\n"
           "             (the mlx5 backend); verbs: the first RDMA device, or any device's name\n"
           "             (rxe0, ...): that device through the verbs backend. On a NIC the buffers\n"
           "             are GPU memory with a GPU (GPUDirect RDMA needed), host memory with --cpu\n"
           "  --help     this text\n"
           "Memory: 3 buffers of --qps x 64 MiB on a GPU (8 MiB on CPU threads), plus two host\n"
           "copies for the check. Exit status: 0 verified, 1 failed (the reason on stderr), 2 bad usage.\n";
}

/// malloc that throws std::bad_alloc (the convention turns it into a clear error).
uint8_t* host_alloc(size_t n) {
    void* p = std::malloc(n);
    if (!p) throw std::bad_alloc();
    return static_cast<uint8_t*>(p);
}

/// Host buffers freed when the run ends, however it ends.
struct HostBuffers {
    uint8_t* p[3] = {nullptr, nullptr, nullptr};
    uint8_t*& operator[](int i) { return p[i]; }
    ~HostBuffers() {
        for (uint8_t* b : p) std::free(b);
    }
};

/// Runs f(job) on one CPU thread per job. A thread that cannot be started ends the run
/// cleanly: the ones already running are joined first, then the error says which.
template <class F>
void on_threads(const std::vector<Job>& jobs, F f) {
    std::vector<std::thread> th;
    th.reserve(jobs.size());
    try {
        for (const Job& j : jobs) th.emplace_back(f, std::cref(j));
    } catch (const std::system_error& e) {
        const size_t started = th.size();
        for (auto& t : th) t.join();
        throw Error("could not start CPU thread " + std::to_string(started + 1) + " of " +
                    std::to_string(jobs.size()) + " (" + e.what() + "): use fewer --qps");
    }
    for (auto& t : th) t.join();
}

}  // namespace

int run(Args a) {
    {
#if !defined(__CUDACC__)
        if (a.gpu >= 0) throw NotSupported("--gpu " + std::to_string(a.gpu) + ": gv_demo was built without CUDA: use --gpu -1 (CPU threads)");
        a.gpu = -1;
#endif
        Context ctx = [&] {
            try {
                return Context(gvcli::device_context(a.device, a.gpu));
            } catch (const Error& e) {
                if (a.device != "soft") throw Error("--device " + a.device + ": " + e.what());
                if (a.gpu < 0) throw;
                throw Error("--gpu " + std::to_string(a.gpu) + ": " + e.what());
            }
        }();
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
        // A --qps the memory cannot hold is a clear error, not an uncaught std::bad_alloc.
        const int nbuf = gpu ? 2 : 5;  // host copies of the source and of what came back (+ 3 buffers)
        auto no_memory = [&] {
            return Error(gvcli::format("out of memory: --qps %d needs %d host buffers of %.2f GiB (%llu MiB per QP); "
                                       "use fewer --qps",
                                       a.qps, nbuf, total / double(1ull << 30),
                                       (unsigned long long)(region >> 20)));
        };
        std::vector<uint8_t> h_src, h_out;
        try {
            h_src.resize(total);
            h_out.resize(total);
        } catch (const std::bad_alloc&) {
            throw no_memory();
        }
        std::mt19937_64 rng(42);
        for (size_t i = 0; i + 8 <= total; i += 8) {
            uint64_t v = rng();
            std::memcpy(&h_src[i], &v, 8);
        }
        uint8_t *src, *dst, *back;
        HostBuffers host_buf;  // CPU threads: the three buffers (freed on every way out)
#if defined(__CUDACC__)
        if (gpu) {
            if (cudaMalloc(&src, total) || cudaMalloc(&dst, total) || cudaMalloc(&back, total))
                throw CudaError("cudaMalloc of the demo buffers", 2);
            cudaMemcpy(src, h_src.data(), total, cudaMemcpyHostToDevice);
        } else
#endif
        {
            try {
                src = host_buf[0] = host_alloc(total);
                dst = host_buf[1] = host_alloc(total);
                back = host_buf[2] = host_alloc(total);
            } catch (const std::bad_alloc&) {
                throw no_memory();
            }
            std::memcpy(src, h_src.data(), total);
        }
        MemoryRegion ms = gvcli::register_memory(pd, ctx, src, total, kLocalWrite, "--cpu");
        MemoryRegion md = gvcli::register_memory(pd, ctx, dst, total, kAllAccess, "--cpu");
        MemoryRegion mb = gvcli::register_memory(pd, ctx, back, total, kLocalWrite, "--cpu");

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
                    on_threads(jobs, [&](const Job& j) { cpu_job(j, phase, &errors); });
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
        }
#endif
        std::printf(all_ok ? "Validation successful: every byte written and read back matches\n"
                           : "Validation FAILED\n");
        if (!all_ok) std::fprintf(stderr, "gv_demo: validation failed (the first mismatch is printed above)\n");
        return all_ok ? 0 : 1;
    }
}

int main(int argc, char** argv) {
    return gvcli::run(argc, argv, usage(), [](gvcli::Args& args) {
        Args a;
        while (args.next()) {
            if (args.is("--qps")) a.qps = int(args.integer(1, 1024));
            else if (args.is("--iters")) a.iters = int(args.integer(1, 1 << 20));
            else if (args.is("--gpu")) a.gpu = int(args.integer(-1, 63));
            else if (args.is("--cpu")) a.gpu = -1;
            else if (args.is("--device")) a.device = gvcli::device_value(args);
            else args.unknown();
        }
        return run(a);
    });
}
