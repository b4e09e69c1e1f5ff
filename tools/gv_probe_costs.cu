// gv_probe_costs: latency of the memory-ordering primitives the data path is built from,
// one thread, dependent chains, on device memory and on pinned host memory. These are
// the numbers behind the latency analysis in docs/performance.md.
#include <cuda_runtime.h>

#include <cstdio>

#include "bench_common.hpp"
#include "gpuverbs/device/atomic.cuh"

using namespace gv;

enum Op { kLdRelaxed, kLdAcquire, kCasAcqRel, kCasRelaxed, kFenceSc, kFenceAcqRel, kStFence, kStRelease, kAddRelaxed, kNumOps };
const char* kNames[] = {"ld.relaxed (dependent)", "ld.acquire.gpu", "atom.cas.acq_rel.gpu", "atom.cas.relaxed.gpu",
                        "fence.sc.gpu", "fence.acq_rel.gpu", "st + fence.acq_rel.gpu", "st.release.gpu",
                        "atom.add.relaxed.gpu"};

__global__ void probe(unsigned int* p, int op, int n, unsigned long long* out) {
    unsigned int v = 0;
    unsigned long long t0 = clock64();
    for (int i = 0; i < n; ++i) {
        switch (op) {
            case kLdRelaxed: v = atom::load_relaxed(p + (v & 1)); break;
            case kLdAcquire: v = atom::load_acquire(p + (v & 1)); break;
            case kCasAcqRel: { unsigned int e = v; atom::cas(p, e, v + 1); v = e; } break;
            case kCasRelaxed: v = atomicCAS(p, v, v + 1); break;
            case kFenceSc: atom::fence_seq_cst(); break;
            case kFenceAcqRel: atom::fence_release(); break;
            case kStFence: p[16 + (i & 7)] = i; atom::fence_release(); break;
            case kStRelease: atom::store_release(p + 16 + (i & 7), unsigned(i)); break;
            case kAddRelaxed: v += atom::fetch_add_relaxed(p + 32, 1u); break;
        }
    }
    out[0] = clock64() - t0;
    out[1] = v;
}

const char* const kUsage =
    "usage: gv_probe_costs\n"
    "What single memory operations cost on the GPU: loads, atomics, fences and stores on\n"
    "device and host-mapped memory, one thread, dependent chains (clock64). Needs a CUDA GPU.\n"
    "  --help   this text\n"
    "Exit status: 0 measured, 1 failed (the reason on stderr), 2 bad usage.\n";

int main(int argc, char** argv) {
    return gvcli::run(argc, argv, kUsage, [](gvcli::Args& args) {
        while (args.next()) args.unknown();  // no options but --help
        gvbench::require_gpu();
        gvbench::Buffer<unsigned int> d(1024), h(1024, gvbench::Mem::HostMapped);
        gvbench::Buffer<unsigned long long> out(2, gvbench::Mem::Managed);
        CUDA_CHECK(cudaMemset(d.get(), 0, 4096));
        int clk = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0));
        const int n = 2000;
        std::printf("# gv_probe_costs: one thread, %d dependent operations each (SM clock %d MHz)\n", n,
                    clk / 1000);
        std::printf("%-26s %14s %14s\n", "operation", "device [ns]", "host-mapped [ns]");
        for (int op = 0; op < kNumOps; ++op) {
            double ns[2];
            for (int m = 0; m < 2; ++m) {
                unsigned int* p = m ? h.get() : d.get();
                probe<<<1, 1>>>(p, op, 50, out.get());
                CUDA_CHECK(cudaGetLastError());
                CUDA_CHECK(cudaDeviceSynchronize());
                probe<<<1, 1>>>(p, op, n, out.get());
                CUDA_CHECK(cudaGetLastError());
                CUDA_CHECK(cudaDeviceSynchronize());
                ns[m] = double(out.get()[0]) / n / (clk / 1e6);
            }
            std::printf("%-26s %14.1f %14.1f\n", kNames[op], ns[0], ns[1]);
        }
        return 0;
    });
}
