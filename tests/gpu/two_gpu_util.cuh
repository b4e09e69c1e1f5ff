// Shared by the two-GPU tests (two_gpu_test.cu: one process; two_gpu_xproc_test.cu: one
// process per GPU): buffers on either GPU and their checks, the every-operation kernel and its
// results, a connected pair across GPUs, and the skip when two GPUs with peer access are missing.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gpu/gpu_util.cuh"
#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"
#include "gpuverbs/oob.hpp"
#include "gpuverbs/shared_buffer.hpp"
#include "peer_util.hpp"
#include "proc_util.hpp"

using namespace gv;
using namespace gv::oob;

namespace {

constexpr uint64_t kNs = 1'000'000'000ull;
constexpr int kMs = 30000;  // channel timeouts (two GPU contexts take a while to open)
constexpr size_t kBig = 1 << 20;
constexpr uint32_t kMsg = 65536;
constexpr uint32_t kSig = 4096;
constexpr uint64_t kCounter0 = 1000;
constexpr uint32_t kChunk = 4096;  // a WRITE of the ordering tests

/// Why the two-GPU tests cannot run here ("" when they can): fewer than two GPUs, or no peer
/// access between GPUs 0 and 1.
std::string two_gpu_reason() {
    const int n = Context::gpu_count();
    if (n < 2)
        return "needs two CUDA GPUs of one host (" + std::to_string(n) +
               " visible): run `ctest -L gpu` on a two-GPU machine";
    int a = 0, b = 0;
    if (cudaDeviceCanAccessPeer(&a, 0, 1) != cudaSuccess || cudaDeviceCanAccessPeer(&b, 1, 0) != cudaSuccess)
        return "cudaDeviceCanAccessPeer failed";
    if (!a || !b)
        return "GPUs 0 and 1 have no peer access (cudaDeviceCanAccessPeer 0->1 = " + std::to_string(a) +
               ", 1->0 = " + std::to_string(b) + "): QPs across them are refused, which PeerAccess tests check";
    return "";
}
#define SKIP_WITHOUT_TWO_GPUS()                                    \
    do {                                                           \
        const std::string why_ = two_gpu_reason();                 \
        if (!why_.empty()) GTEST_SKIP() << why_;                   \
    } while (0)

__host__ __device__ uint8_t pattern(size_t i, uint8_t seed) { return uint8_t(i * 131 + seed * 7 + (i >> 8)); }
__global__ void fill_k(uint8_t* p, size_t n, uint8_t seed) {
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        p[i] = pattern(i, seed);
}
/// Fills GPU memory p (of GPU `gpu`) with pattern(seed).
void fill(int gpu, void* p, size_t n, uint8_t seed) {
    CK(cudaSetDevice(gpu));
    fill_k<<<64, 256>>>(static_cast<uint8_t*>(p), n, seed);
    CK(cudaDeviceSynchronize());
}
std::vector<uint8_t> download(const void* p, size_t n) {
    std::vector<uint8_t> h(n);
    CK(cudaMemcpy(h.data(), p, n, cudaMemcpyDefault));
    return h;
}
/// First offset where GPU memory p differs from pattern(seed) shifted by `from`, or -1.
long first_bad(const void* p, size_t n, uint8_t seed, size_t from = 0) {
    const std::vector<uint8_t> h = download(p, n);
    for (size_t i = 0; i < n; ++i)
        if (h[i] != pattern(from + i, seed)) return long(i);
    return -1;
}
template <typename T>
T get(const void* p) {
    T v{};
    CK(cudaMemcpy(&v, p, sizeof v, cudaMemcpyDefault));
    return v;
}

/// cudaMalloc'd memory of one GPU, zeroed, freed on that GPU.
struct GpuMem {
    int gpu;
    void* p = nullptr;
    size_t n;
    GpuMem(int g, size_t bytes) : gpu(g), n(bytes) {
        CK(cudaSetDevice(g));
        CK(cudaMalloc(&p, bytes));
        CK(cudaMemset(p, 0, bytes));
    }
    ~GpuMem() {
        cudaSetDevice(gpu);
        cudaFree(p);
    }
    template <typename T = uint8_t>
    T* as() const {
        return static_cast<T*>(p);
    }
};

/// Kernel results (managed memory): statuses of the calls and the completions.
struct Result {
    Status st[12];
    uint32_t n;
    Completion c[8];
};
struct ResultMem {
    Result* r = nullptr;
    ResultMem() {
        CK(cudaMallocManaged(&r, sizeof(Result)));
        std::memset(r, 0, sizeof(Result));
    }
    ~ResultMem() { cudaFree(r); }
    Result* operator->() const { return r; }
};

/// Where the requester's operations go: its own buffers (l*) and the peer's (remote).
struct Ops {
    uint8_t* src;  ///< kBig bytes of pattern(1): WRITE, SEND and put-with-signal sources
    uint8_t* rd;   ///< kBig bytes: the READ lands here
    uint64_t* old;  ///< 3 words: fetch-add, compare-swap, put-with-signal old values
    uint32_t src_lkey, rd_lkey, old_lkey;
    RemoteBuffer dst;      ///< kBig + kSig: WRITE target, then the put-with-signal's data
    RemoteBuffer rsrc;     ///< kBig bytes of pattern(2): READ source
    RemoteBuffer counter;  ///< 8 bytes, kCounter0
    RemoteBuffer sig;      ///< 8 bytes, 0
};

// One block on the requester's GPU: thread 0 posts every operation, the block commits (the
// group copies the large ones), thread 0 waits for the six completions.
__global__ void ops_kernel(dev::QpHandle h, Ops o, Result* r) {
    if (threadIdx.x == 0) {
        r->st[0] = dev::write(h, o.src, uint32_t(kBig), o.src_lkey, o.dst.addr, o.dst.rkey);
        r->st[1] = dev::read(h, o.rd, uint32_t(kBig), o.rd_lkey, o.rsrc.addr, o.rsrc.rkey);
        r->st[2] = dev::send(h, o.src, kMsg, o.src_lkey);
        r->st[3] = dev::fetch_add(h, o.old, o.old_lkey, o.counter.addr, o.counter.rkey, 5);
        r->st[4] = dev::compare_swap(h, o.old + 1, o.old_lkey, o.counter.addr, o.counter.rkey, kCounter0 + 5, 77);
        r->st[5] = dev::put_signal(h, o.src + kBig - kSig, kSig, o.src_lkey, o.dst.addr + kBig, o.dst.rkey, o.old + 2,
                                   o.old_lkey, o.sig.addr, o.sig.rkey, 1);
    }
    __syncthreads();
    const Status cs = dev::commit<Scope::Block>(h);
    if (threadIdx.x == 0) {
        r->st[6] = cs;
        r->st[7] = dev::wait_send(h, 6, r->c, 10 * kNs, &r->n);
    }
}
__global__ void post_recv_k(dev::QpHandle h, uint8_t* buf, uint32_t len, uint32_t lkey, Result* r) {
    r->st[8] = dev::recv(h, buf, len, lkey, kNs);
}
__global__ void write_wait_k(dev::QpHandle h, const uint8_t* src, uint32_t lkey, uint64_t dst, uint32_t rkey,
                             Result* r) {
    r->st[0] = dev::write(h, src, 4096, lkey, dst, rkey, kSignaled);
    if (r->st[0] == Status::Ok) r->st[0] = dev::commit<Scope::Thread>(h);
    r->st[1] = dev::wait_send(h, 1, r->c, 10 * kNs);
}
__global__ void wait_recv_k(dev::QpHandle h, Result* r) { r->st[9] = dev::wait_recv(h, 1, r->c + 7, 10 * kNs); }

/// Checks what ops_kernel did, given the result and the peer's memory.
void check_ops(const Result& r, const Ops& o, const void* dst, const void* counter, const void* sig,
               const void* rbuf) {
    for (int i = 0; i < 8; ++i) XCHECK(r.st[i] == Status::Ok, "call " + std::to_string(i) + ": " + status_name(r.st[i]));
    XCHECK(r.n == 6, "6 send completions, got " + std::to_string(r.n));
    for (int i = 0; i < 6; ++i)
        XCHECK(r.c[i].ok(), "completion " + std::to_string(i) + ": " + mlx5::syndrome_name(r.c[i].status));
    XCHECK(r.st[8] == Status::Ok && r.st[9] == Status::Ok,
           std::string("receive: ") + status_name(r.st[8]) + ", " + status_name(r.st[9]));
    XCHECK(r.c[7].ok() && r.c[7].byte_len == kMsg, "receive completion: " + std::to_string(r.c[7].byte_len) + " bytes");
    const long w = first_bad(dst, kBig, 1);
    XCHECK(w == -1, "WRITE: byte " + std::to_string(w) + " of the peer GPU's buffer differs");
    const long p = first_bad(static_cast<const uint8_t*>(dst) + kBig, kSig, 1, kBig - kSig);
    XCHECK(p == -1, "put-with-signal data: byte " + std::to_string(p) + " differs");
    const long rd = first_bad(o.rd, kBig, 2);
    XCHECK(rd == -1, "READ: byte " + std::to_string(rd) + " differs from the peer GPU's source");
    const long s = first_bad(rbuf, kMsg, 1);
    XCHECK(s == -1, "SEND: byte " + std::to_string(s) + " of the receive differs");
    std::vector<uint8_t> old = download(o.old, 24);
    uint64_t v[3];
    std::memcpy(v, old.data(), 24);
    XCHECK(v[0] == kCounter0, "fetch-add returned " + std::to_string(v[0]));
    XCHECK(v[1] == kCounter0 + 5, "compare-swap returned " + std::to_string(v[1]));
    XCHECK(v[2] == 0, "put-with-signal's fetch-add returned " + std::to_string(v[2]));
    XCHECK(get<uint64_t>(counter) == 77, "counter is " + std::to_string(get<uint64_t>(counter)));
    XCHECK(get<uint64_t>(sig) == 1, "signal is " + std::to_string(get<uint64_t>(sig)));
}

/// Two sides in this process, on GPU 0 and GPU 1, connected.
struct TwoSides {
    gvtest::Side a{0}, b{1};
    TwoSides() {
        a.qp.connect(b.qp.endpoint());
        b.qp.connect(a.qp.endpoint());
    }
};

// The region as a peer addresses it: where it starts, its length (the exchange refuses an empty one), its rkey.
RemoteBuffer remote(const void* p, const MemoryRegion& mr) { return RemoteBuffer{uint64_t(p), mr.length(), mr.rkey()}; }

}  // namespace
