// gv_probe_costs: latency of the memory-ordering primitives the data path is built from,
// one thread, dependent chains, on device memory and on pinned host memory. These are
// the numbers behind the latency analysis in docs/performance.md.
#include <cuda_runtime.h>

#include <cstdio>

#include "bench_common.hpp"
#include "gpuverbs/device/atomic.cuh"

using namespace gv;

enum Op {
    kLdRelaxed, kLdAcquire, kCasAcqRel, kCasRelaxed, kFenceSc, kFenceAcqRel, kStFence, kStRelease, kAddRelaxed,
    // A drain's stores, one WQE per turn (device memory only: the host column is left out). One
    // thread executing one QP's small WRITEs stores each WQE's bytes to its own destination, then
    // sq_ci, then a release fence (RC ordering; detail/soft/fast.cuh): how long does one turn take
    // when nothing else is on its way, and with the loads a drain has in flight at its fence?
    kStNext, kStNextCtr, kStLineCtr, kLdAheadStCtr, kCopyCtr, kLdAheadCopyCtr,
    // The same turn split over two warps (probe_pair): warp 1 loads the next WQE's 48 bytes and
    // the source and hands the value over through shared memory; warp 0 only stores, stores the
    // counter and fences. A fence waits for its own warp's loads, not another warp's: is the
    // turn then the fence alone?
    kPairLdAheadCopyCtr, kNumOps
};
const char* kNames[] = {"ld.relaxed (dependent)", "ld.acquire.gpu", "atom.cas.acq_rel.gpu", "atom.cas.relaxed.gpu",
                        "fence.sc.gpu", "fence.release.gpu", "st + fence.release.gpu", "st.release.gpu",
                        "atom.add.relaxed.gpu",
                        "st next 8 B + fence",           // the bytes of consecutive 8-byte WRITEs
                        "st next 8 B, st ctr + fence",   // ... and sq_ci, as fast_run
                        "st next line, st ctr + fence",  // a destination 128 bytes on each turn
                        "ld 48 B ahead, st, ctr, fence", // the next WQE's units in flight at the fence
                        "ld src, st, ctr, fence",        // an 8-byte copy (the source's load first)
                        "ld ahead + copy, ctr, fence",   // both: fast_run's turn without its checks
                        "same, loads in a 2nd warp"};    // probe_pair: warp 0 stores and fences
/// First op that stores where a drain stores (device memory only).
constexpr int kFirstDrainOp = kStNext;
/// Words of the drain rows' buffer: destinations, sources and a ring of 64-byte WQEs apart.
constexpr size_t kBigWords = size_t(16) << 17;  // 16 MiB

__global__ void probe(unsigned int* p, unsigned long long* big, int op, int n, unsigned long long* out) {
    unsigned int v = 0;
    // The drain rows: destinations from big[0], sources from a quarter in, a ring of 64-byte
    // slots from half way (each turn loads the next slot's first 48 bytes, as fast_run loads
    // the next WQE's units before it copies this one, and uses them only on the next turn).
    unsigned long long* dst = big;
    const unsigned long long* src = big + kBigWords / 4;
    const ulonglong2* ring = reinterpret_cast<const ulonglong2*>(big + kBigWords / 2);
    ulonglong2 u0{}, u1{}, u2{};
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
            case kStNext: dst[i] = i; atom::fence_release(); break;
            case kStNextCtr: dst[i] = i; atom::store_relaxed(p + 16, unsigned(i)); atom::fence_release(); break;
            case kStLineCtr: dst[size_t(i) * 16] = i; atom::store_relaxed(p + 16, unsigned(i)); atom::fence_release(); break;
            case kLdAheadStCtr:
            case kLdAheadCopyCtr: {
                v += unsigned(u0.x ^ u1.y ^ u2.x);  // last turn's units, as fast_run's cur = next
                const ulonglong2* nx = ring + size_t(i + 1) * 4;
                u0 = nx[0];
                u1 = nx[1];
                u2 = nx[2];
                dst[i] = op == kLdAheadStCtr ? (unsigned long long)i : src[i] + v;
                atom::store_relaxed(p + 16, unsigned(i));
                atom::fence_release();
            } break;
            case kCopyCtr: dst[i] = src[i] + v; atom::store_relaxed(p + 16, unsigned(i)); atom::fence_release(); break;
        }
    }
    out[0] = clock64() - t0;
    out[1] = v + unsigned(u0.y ^ u1.x ^ u2.y);
}

/// kPairLdAheadCopyCtr: two warps of one block; lane 0 of warp 1 (the loader) loads, for turn i,
/// the ring slot's 48 bytes and src[i] and passes their sum through an 8-entry ring in shared
/// memory; lane 0 of warp 0 (the storer) takes it, stores it to dst[i], stores the counter and
/// fences, as kLdAheadCopyCtr's thread does. out[0]: the storer's cycles for n turns.
__global__ void probe_pair(unsigned int* p, unsigned long long* big, int n, unsigned long long* out) {
    constexpr int kSlots = 8;
    __shared__ unsigned long long vals[kSlots];
    __shared__ int produced, consumed;
    if (threadIdx.x == 0) produced = consumed = 0;
    __syncthreads();
    unsigned long long* dst = big;
    const unsigned long long* src = big + kBigWords / 4;
    const ulonglong2* ring = reinterpret_cast<const ulonglong2*>(big + kBigWords / 2);
    volatile int* vp = &produced;
    volatile int* vc = &consumed;
    volatile unsigned long long* vv = vals;
    if (threadIdx.x == 32) {  // the loader
        for (int i = 0; i < n; ++i) {
            while (i - *vc >= kSlots) {
            }
            const ulonglong2* nx = ring + size_t(i + 1) * 4;
            const ulonglong2 u0 = nx[0], u1 = nx[1], u2 = nx[2];
            vv[i % kSlots] = src[i] + (u0.x ^ u1.y ^ u2.x);
            __threadfence_block();
            *vp = i + 1;
        }
    } else if (threadIdx.x == 0) {  // the storer
        const unsigned long long t0 = clock64();
        for (int i = 0; i < n; ++i) {
            while (*vp <= i) {
            }
            __threadfence_block();
            dst[i] = vv[i % kSlots];
            *vc = i + 1;
            atom::store_relaxed(p + 16, unsigned(i));
            atom::fence_release();
        }
        out[0] = clock64() - t0;
        out[1] = 0;
    }
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
        gvbench::Buffer<unsigned long long> big(kBigWords);
        CUDA_CHECK(cudaMemset(d.get(), 0, 4096));
        CUDA_CHECK(cudaMemset(big.get(), 0, kBigWords * 8));
        int clk = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0));
        const int n = 2000;
        std::printf("# gv_probe_costs: one thread, %d dependent operations each (SM clock %d MHz)\n", n,
                    clk / 1000);
        std::printf("%-30s %14s %14s\n", "operation", "device [ns]", "host-mapped [ns]");
        for (int op = 0; op < kNumOps; ++op) {
            double ns[2];
            const int modes = op >= kFirstDrainOp ? 1 : 2;
            for (int m = 0; m < modes; ++m) {
                unsigned int* p = m ? h.get() : d.get();
                const auto launch = [&](int turns) {
                    if (op == kPairLdAheadCopyCtr) probe_pair<<<1, 64>>>(p, big.get(), turns, out.get());
                    else probe<<<1, 1>>>(p, big.get(), op, turns, out.get());
                };
                launch(50);
                CUDA_CHECK(cudaGetLastError());
                CUDA_CHECK(cudaDeviceSynchronize());
                launch(n);
                CUDA_CHECK(cudaGetLastError());
                CUDA_CHECK(cudaDeviceSynchronize());
                ns[m] = double(out.get()[0]) / n / (clk / 1e6);
            }
            if (modes == 2) std::printf("%-30s %14.1f %14.1f\n", kNames[op], ns[0], ns[1]);
            else std::printf("%-30s %14.1f %14s\n", kNames[op], ns[0], "-");
        }
        return 0;
    });
}
