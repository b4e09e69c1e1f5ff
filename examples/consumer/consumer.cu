// A program built outside the gpuverbs tree against an installed gpuverbs (CMake package or
// pkg-config): on the software RDMA device, one QP WRITEs a buffer into its peer's memory and
// READs it back; both copies are checked byte by byte. The data path is a CUDA kernel when this
// file is compiled by nvcc and a GPU is present, else a CPU thread making the same gv::dev calls
// (a CPU-only context, ContextOptions::gpu = -1). Prints one line and exits 0 when every byte
// matches; otherwise says what failed on stderr and exits 1.
//
//   gv_consumer [--cpu]      --cpu: the CPU thread even where a GPU is present
#include <gpuverbs/device.cuh>    // device API: gv::dev::* (header-only, __host__ __device__)
#include <gpuverbs/gpuverbs.hpp>  // host API: Context, ProtectionDomain, MemoryRegion, ...

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#define CONSUMER_HD __host__ __device__
#else
#define CONSUMER_HD
#endif

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr uint32_t kBytes = 1u << 20;
constexpr uint64_t kTimeoutNs = 10'000'000'000ull;  // every wait is bounded: 10 s

struct Job {
    gv::dev::QpHandle qp;
    const uint8_t* src;
    uint32_t src_lkey;
    uint8_t* back;
    uint32_t back_lkey;
    gv::RemoteBuffer peer;  // the peer's buffer: address, length, rkey
};

// The data path, the same code for a CUDA thread and a CPU thread: WRITE src into the peer's
// buffer, wait for its completion, READ the peer's buffer back into back, wait again. Returns 0,
// or which step failed (1-4).
CONSUMER_HD int write_then_read(const Job& j) {
    if (gv::dev::write(j.qp, j.src, kBytes, j.src_lkey, j.peer.addr, j.peer.rkey) != gv::Status::Ok) return 1;
    gv::dev::commit(j.qp);  // the doorbell: the software device executes the WRITE
    gv::Completion c;
    if (gv::dev::wait_send(j.qp, 1, &c, kTimeoutNs) != gv::Status::Ok || !c.ok()) return 2;
    if (gv::dev::read(j.qp, j.back, kBytes, j.back_lkey, j.peer.addr, j.peer.rkey) != gv::Status::Ok) return 3;
    gv::dev::commit(j.qp);
    if (gv::dev::wait_send(j.qp, 1, &c, kTimeoutNs) != gv::Status::Ok || !c.ok()) return 4;
    return 0;
}

#if defined(__CUDACC__)
__global__ void data_path(Job j, int* result) { *result = write_then_read(j); }
#endif

const char* const kStep[] = {"", "posting the WRITE", "waiting for the WRITE", "posting the READ",
                             "waiting for the READ"};

int run(bool force_cpu) {
    bool gpu = false;
#if defined(__CUDACC__)
    gpu = !force_cpu && gv::Context::gpu_count() > 0;
#else
    (void)force_cpu;
#endif
    // Step 1: the software device, on GPU 0 or on CPU threads (-1); two QPs, one per side.
    gv::Context ctx(gv::ContextOptions{gv::Backend::Soft, gpu ? 0 : -1});
    gv::ProtectionDomain pd(ctx);
    gv::CompletionQueue scq_a(ctx), rcq_a(ctx), scq_b(ctx), rcq_b(ctx);
    gv::QueuePair a(pd, gv::QpOptions{&scq_a, &rcq_a});
    gv::QueuePair b(pd, gv::QpOptions{&scq_b, &rcq_b});

    std::vector<uint8_t> pattern(kBytes), dst_copy(kBytes), back_copy(kBytes);
    for (uint32_t i = 0; i < kBytes; ++i) pattern[i] = uint8_t(i * 131u + (i >> 8) + 7u);
    std::vector<uint8_t> host_src, host_dst, host_back;
    uint8_t *src = nullptr, *dst = nullptr, *back = nullptr;
#if defined(__CUDACC__)
    if (gpu) {
        if (cudaMalloc(&src, kBytes) != cudaSuccess || cudaMalloc(&dst, kBytes) != cudaSuccess ||
            cudaMalloc(&back, kBytes) != cudaSuccess)
            throw std::runtime_error("cudaMalloc failed");
        cudaMemcpy(src, pattern.data(), kBytes, cudaMemcpyHostToDevice);
        cudaMemset(dst, 0, kBytes);
        cudaMemset(back, 0, kBytes);
    } else
#endif
    {
        host_src = pattern;
        host_dst.assign(kBytes, 0);
        host_back.assign(kBytes, 0);
        src = host_src.data();
        dst = host_dst.data();
        back = host_back.data();
    }
    gv::MemoryRegion src_mr(pd, src, kBytes, gv::kLocalWrite);
    gv::MemoryRegion back_mr(pd, back, kBytes, gv::kLocalWrite);
    gv::MemoryRegion dst_mr(pd, dst, kBytes, gv::kLocalWrite | gv::kRemoteWrite | gv::kRemoteRead);

    // Step 2: the exchange (one process: the endpoints are handed over directly).
    a.connect(b.endpoint());
    b.connect(a.endpoint());

    // Step 3: the data path.
    const Job job{a.device_handle(), src, src_mr.lkey(), back, back_mr.lkey(), dst_mr.remote()};
    int result = -1;
#if defined(__CUDACC__)
    if (gpu) {
        int* d_result = nullptr;
        cudaMalloc(&d_result, sizeof(int));
        data_path<<<1, 1>>>(job, d_result);
        const cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess) throw std::runtime_error(std::string("the kernel failed: ") + cudaGetErrorString(e));
        cudaMemcpy(&result, d_result, sizeof(int), cudaMemcpyDeviceToHost);
        cudaFree(d_result);
        cudaMemcpy(dst_copy.data(), dst, kBytes, cudaMemcpyDeviceToHost);
        cudaMemcpy(back_copy.data(), back, kBytes, cudaMemcpyDeviceToHost);
        cudaFree(src);
        cudaFree(dst);
        cudaFree(back);
    } else
#endif
    {
        std::thread t([&] { result = write_then_read(job); });
        t.join();
        dst_copy = host_dst;
        back_copy = host_back;
    }
    if (result != 0) {
        std::fprintf(stderr, "gv_consumer: FAILED %s\n", result > 0 && result < 5 ? kStep[result] : "(no result)");
        return 1;
    }
    for (int which = 0; which < 2; ++which) {
        const std::vector<uint8_t>& got = which == 0 ? dst_copy : back_copy;
        for (uint32_t i = 0; i < kBytes; ++i)
            if (got[i] != pattern[i]) {
                std::fprintf(stderr, "gv_consumer: FAILED: %s byte %u is 0x%02x, expected 0x%02x\n",
                             which == 0 ? "the peer's (WRITE)" : "the read-back (READ)", i, got[i], pattern[i]);
                return 1;
            }
    }
    std::printf("gv_consumer: OK: %u bytes WRITTEN to the peer QP and READ back, every byte verified "
                "(gpuverbs %u.%u, software device, %s)\n",
                kBytes, gv::kVersionMajor, gv::kVersionMinor, gpu ? "CUDA kernel on GPU 0" : "CPU thread");
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    bool force_cpu = false;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--cpu") {
            force_cpu = true;
        } else if (arg == "--help" || arg == "-h") {
            std::printf("usage: gv_consumer [--cpu]\n"
                        "WRITEs 1 MiB to a peer QP on the software RDMA device and READs it back, every\n"
                        "byte verified: from a CUDA kernel when built with CUDA and a GPU is present,\n"
                        "else (or with --cpu) from a CPU thread. Exit status: 0 verified, 1 failed.\n");
            return 0;
        } else {
            std::fprintf(stderr, "gv_consumer: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    try {
        return run(force_cpu);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gv_consumer: FAILED: %s\n", e.what());
        return 1;
    }
}
