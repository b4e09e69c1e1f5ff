// The software device across two GPUs of one host (docs/two-gpus.md): a QP of a context on
// GPU 0 connected to a QP of a context on GPU 1, in one process and in two (this binary
// re-executed as the peer, one process per GPU, off MPS: it is not needed when each process
// has its own GPU). Kernels on one GPU WRITE, READ, SEND, fetch-add, compare-swap and
// put-with-signal into the other GPU's memory (cudaMalloc'd and gv::SharedBuffer); a poller on
// the other GPU sees RC order; RDMA atomics and the other GPU's own atomics on one word add up;
// peer access that is impossible, and a peer GPU that CUDA_VISIBLE_DEVICES hides, are clear
// errors. Every test skips, saying why, with fewer than two GPUs with peer access.
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
std::string g_exe;

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

// GPU 0's kernel drives every operation into GPU 1's memory (a SharedBuffer of GPU 1's arena
// and cudaMalloc'd buffers), GPU 1's kernel posts and waits for the receive; then the other
// way round, GPU 1 into GPU 0. Every byte and old value is checked.
TEST(TwoGpu, EveryOperationAcrossGpusOneProcess) {
    SKIP_WITHOUT_TWO_GPUS();
    TwoSides s;
    for (int dir = 0; dir < 2; ++dir) {
        gvtest::Side& req = dir == 0 ? s.a : s.b;
        gvtest::Side& rsp = dir == 0 ? s.b : s.a;
        const int rg = dir == 0 ? 0 : 1, pg = 1 - rg;
        GpuMem src(rg, kBig), rd(rg, kBig), old(rg, 64);
        SharedBuffer dst(rsp.ctx, kBig + kSig);
        CK(cudaMemset(dst.data(), 0, dst.size()));
        GpuMem rsrc(pg, kBig), counter(pg, 8), sig(pg, 8), rbuf(pg, kMsg);
        fill(rg, src.p, kBig, 1);
        fill(pg, rsrc.p, kBig, 2);
        CK(cudaMemcpy(counter.p, &kCounter0, 8, cudaMemcpyDefault));
        MemoryRegion ms(req.pd, src.p, kBig, kLocalWrite), mrd(req.pd, rd.p, kBig, kLocalWrite),
            mo(req.pd, old.p, 64, kLocalWrite);
        MemoryRegion md(rsp.pd, dst.data(), dst.size(), kAllAccess), mrs(rsp.pd, rsrc.p, kBig, kAllAccess),
            mc(rsp.pd, counter.p, 8, kAllAccess), msg(rsp.pd, sig.p, 8, kAllAccess),
            mrb(rsp.pd, rbuf.p, kMsg, kLocalWrite);
        Ops o{src.as(), rd.as(), old.as<uint64_t>(), ms.lkey(), mrd.lkey(), mo.lkey(),
              remote(dst.data(), md), remote(rsrc.p, mrs), remote(counter.p, mc), remote(sig.p, msg)};
        ResultMem r;
        CK(cudaSetDevice(pg));
        post_recv_k<<<1, 1>>>(rsp.h(), rbuf.as(), kMsg, mrb.lkey(), r.r);
        CK(cudaDeviceSynchronize());
        CK(cudaSetDevice(rg));
        ops_kernel<<<1, 128>>>(req.h(), o, r.r);
        CK(cudaDeviceSynchronize());
        CK(cudaSetDevice(pg));
        wait_recv_k<<<1, 1>>>(rsp.h(), r.r);
        CK(cudaDeviceSynchronize());
        try {
            check_ops(*r.r, o, dst.data(), counter.p, sig.p, rbuf.p);
        } catch (const std::exception& e) {
            ADD_FAILURE() << "GPU " << rg << " into GPU " << pg << ": " << e.what();
        }
    }
}

namespace {

constexpr uint32_t kChunk = 4096;

// The writer (GPU 0, one block): per round, every thread but the last WRITEs a chunk of data
// whose bytes depend on the round, then the last thread WRITEs the round number to the flag;
// one commit (block scope, or every thread's own: executors race for the QP's lock). Then it
// waits, reading GPU 1's memory at system scope, for the poller's acknowledgement of the round.
template <Scope S>
__global__ void order_writer(dev::QpHandle qp, uint8_t* src, uint32_t lkey, uint64_t dst, uint32_t rkey,
                             uint64_t* src_flag, uint32_t flag_lkey, uint64_t dst_flag, uint32_t flag_rkey,
                             const uint64_t* ack, uint32_t rounds, unsigned long long* errors) {
    const uint32_t writers = blockDim.x - 1;
    for (uint32_t r = 1; r <= rounds; ++r) {
        uint8_t* half = src + size_t(r & 1) * writers * kChunk;
        if (threadIdx.x < writers)
            for (uint32_t i = 0; i < kChunk; ++i) half[size_t(threadIdx.x) * kChunk + i] = uint8_t(r * 31 + threadIdx.x + i);
        __syncthreads();
        if (threadIdx.x < writers)
            dev::write(qp, half + size_t(threadIdx.x) * kChunk, kChunk, lkey, dst + size_t(threadIdx.x) * kChunk,
                       rkey, 0);
        __syncthreads();
        if (threadIdx.x == writers) {
            src_flag[r & 1] = r;
            dev::write(qp, &src_flag[r & 1], 8, flag_lkey, dst_flag, flag_rkey, kSignaled);
        }
        dev::commit<S>(qp);
        if (threadIdx.x == 0 && dev::wait_send(qp, 1, nullptr, 5 * kNs) != Status::Ok) atomicAdd(errors, 1ull << 32);
        if (threadIdx.x == 0) {
            const uint64_t t0 = atom::now_ns();
            while (atom::load_acquire(ack, true) < r)
                if (atom::now_ns() - t0 > 5 * kNs) {
                    atomicAdd(errors, 1ull << 40);
                    break;
                }
        }
        __syncthreads();
    }
}

// The poller (GPU 1, one block): thread 0 waits for the flag with system-scope acquire loads
// (the flag's writer is GPU 0's executor), then every thread checks every byte of the round's
// data; then thread 0 acknowledges the round (system-scope release).
__global__ void order_poller(const uint8_t* dst, const uint64_t* flag, uint64_t* ack, uint32_t writers,
                             uint32_t rounds, unsigned long long* errors) {
    __shared__ uint64_t seen;
    for (uint32_t r = 1; r <= rounds; ++r) {
        if (threadIdx.x == 0) {
            const uint64_t t0 = atom::now_ns();
            uint64_t v = 0;
            while ((v = atom::load_acquire(flag, true)) < r && atom::now_ns() - t0 < 5 * kNs) {
            }
            seen = v;
        }
        __syncthreads();
        if (seen != r) {
            if (threadIdx.x == 0) atomicAdd(errors, 1ull << 48);
            return;
        }
        for (uint32_t w = 0; w < writers; ++w)
            for (uint32_t i = threadIdx.x; i < kChunk; i += blockDim.x)
                if (dst[size_t(w) * kChunk + i] != uint8_t(r * 31 + w + i)) atomicAdd(errors, 1ull);
        __syncthreads();
        if (threadIdx.x == 0) atom::store_release(ack, uint64_t(r), true);
        __syncthreads();
    }
}

template <Scope S>
void run_ordering(uint32_t threads, uint32_t rounds) {
    TwoSides s;
    const uint32_t writers = threads - 1;
    const size_t data = size_t(writers) * kChunk;
    GpuMem src(0, 2 * data), sflag(0, 64), err0(0, 8);
    GpuMem dst(1, data), flags(1, 64), err1(1, 8);
    MemoryRegion ms(s.a.pd, src.p, 2 * data, kLocalWrite), mf(s.a.pd, sflag.p, 64, kLocalWrite);
    MemoryRegion md(s.b.pd, dst.p, data, kAllAccess), mdf(s.b.pd, flags.p, 64, kAllAccess);
    uint64_t* flag = flags.as<uint64_t>();
    uint64_t* ack = flags.as<uint64_t>() + 1;
    cudaStream_t st1;
    CK(cudaSetDevice(1));
    CK(cudaStreamCreateWithFlags(&st1, cudaStreamNonBlocking));
    order_poller<<<1, 256, 0, st1>>>(dst.as(), flag, ack, writers, rounds, err1.as<unsigned long long>());
    CK(cudaGetLastError());
    CK(cudaSetDevice(0));
    order_writer<S><<<1, threads>>>(s.a.h(), src.as(), ms.lkey(), uint64_t(dst.p), md.rkey(), sflag.as<uint64_t>(),
                                    mf.lkey(), uint64_t(flag), mdf.rkey(), ack, rounds,
                                    err0.as<unsigned long long>());
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaSetDevice(1));
    CK(cudaStreamSynchronize(st1));
    CK(cudaStreamDestroy(st1));
    const unsigned long long e = get<unsigned long long>(err0.p) + get<unsigned long long>(err1.p);
    EXPECT_EQ(e, 0ull) << "stale bytes seen on GPU 1: " << (e & 0xffffffff)
                       << ", send waits failed: " << ((e >> 32) & 0xff) << ", writer timeouts: " << ((e >> 40) & 0xff)
                       << ", poller timeouts: " << (e >> 48);
}

}  // namespace

// RC ordering as a poller on the other GPU sees it: when GPU 1 sees round r's flag, every
// byte of round r that GPU 0's executor stored into GPU 1's memory is there.
TEST(TwoGpu, RcOrderingAsThePollerOnTheOtherGpuSeesIt) {
    SKIP_WITHOUT_TWO_GPUS();
    run_ordering<Scope::Block>(129, 300);  // 129 WQEs a round: within the default 256-entry SQ
}
TEST(TwoGpu, RcOrderingRacingThreadCommits) {
    SKIP_WITHOUT_TWO_GPUS();
    run_ordering<Scope::Thread>(65, 200);
}

namespace {

// GPU 0: `per` fetch-adds of 1 per thread on the counter in GPU 1's memory, old values kept.
__global__ void rdma_adds(dev::QpHandle h, uint64_t* olds, uint32_t lkey, uint64_t counter, uint32_t rkey,
                          uint32_t per, unsigned long long* errors) {
    for (uint32_t k = 0; k < per; ++k) {
        if (dev::fetch_add(h, olds + size_t(k) * blockDim.x + threadIdx.x, lkey, counter, rkey, 1) != Status::Ok)
            atomicAdd(errors, 1ull);
        dev::commit<Scope::Block>(h);
        if (threadIdx.x == 0 && dev::wait_send(h, blockDim.x, nullptr, 10 * kNs) != Status::Ok)
            atomicAdd(errors, 1ull << 32);
        __syncthreads();
    }
}
// GPU 1: its own threads add to the same counter at the same time (system-scope atomics).
__global__ void local_adds(unsigned long long* counter, uint32_t per) {
    for (uint32_t k = 0; k < per; ++k) atomicAdd_system(counter, 1ull);
}

}  // namespace

// RDMA atomics from GPU 0's executor and GPU 1's own atomics on one word of GPU 1 add up
// exactly, and every old value the RDMA fetch-adds returned is distinct.
TEST(TwoGpu, AtomicsFromBothGpusAddUp) {
    SKIP_WITHOUT_TWO_GPUS();
    TwoSides s;
    constexpr uint32_t kThreads = 128, kPer = 40, kLocalBlocks = 64, kLocalThreads = 128, kLocalPer = 50;
    const size_t n = size_t(kThreads) * kPer;
    GpuMem olds(0, n * 8), err(0, 8), counter(1, 8);
    MemoryRegion mo(s.a.pd, olds.p, n * 8, kLocalWrite), mc(s.b.pd, counter.p, 8, kAllAccess);
    cudaStream_t st1;
    CK(cudaSetDevice(1));
    CK(cudaStreamCreateWithFlags(&st1, cudaStreamNonBlocking));
    local_adds<<<kLocalBlocks, kLocalThreads, 0, st1>>>(counter.as<unsigned long long>(), kLocalPer);
    CK(cudaSetDevice(0));
    rdma_adds<<<1, kThreads>>>(s.a.h(), olds.as<uint64_t>(), mo.lkey(), uint64_t(counter.p), mc.rkey(), kPer,
                               err.as<unsigned long long>());
    CK(cudaDeviceSynchronize());
    CK(cudaSetDevice(1));
    CK(cudaStreamSynchronize(st1));
    CK(cudaStreamDestroy(st1));
    EXPECT_EQ(get<unsigned long long>(err.p), 0ull);
    const uint64_t local = uint64_t(kLocalBlocks) * kLocalThreads * kLocalPer;
    EXPECT_EQ(get<uint64_t>(counter.p), local + n) << "lost updates between the two GPUs' atomics";
    std::vector<uint64_t> o(n);
    CK(cudaMemcpy(o.data(), olds.p, n * 8, cudaMemcpyDefault));
    EXPECT_EQ(std::set<uint64_t>(o.begin(), o.end()).size(), n) << "two fetch-adds returned the same old value";
}

// Peer access that is impossible is refused at connect (and at registration of the other
// GPU's memory) with the reason, never a hang or a wrong byte. On this host the GPUs do have
// peer access: GV_TEST_NO_PEER_ACCESS makes cudaDeviceCanAccessPeer read 0 to the library.
TEST(TwoGpu, NoPeerAccessIsAClearError) {
    if (Context::gpu_count() < 2) GTEST_SKIP() << "needs two CUDA GPUs of one host (" << Context::gpu_count() << " visible)";
    setenv("GV_TEST_NO_PEER_ACCESS", "1", 1);
    struct Unset {
        ~Unset() { unsetenv("GV_TEST_NO_PEER_ACCESS"); }
    } unset;
    gvtest::Side a(0), b(1);
    try {
        a.qp.connect(b.qp.endpoint());
        ADD_FAILURE() << "connect across GPUs without peer access succeeded";
    } catch (const NotSupported& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("GPU 0 cannot reach the memory of GPU 1"), std::string::npos) << m;
        EXPECT_NE(m.find("cudaDeviceCanAccessPeer(0, 1) = 0"), std::string::npos) << m;
    }
    const QpState st = a.qp.state();
    EXPECT_TRUE(st == QpState::Reset || st == QpState::Init) << "a refused connect left the QP in " << qp_state_name(st);
    GpuMem other(1, 4096);
    try {
        MemoryRegion mr(a.pd, other.p, 4096, kAllAccess);
        ADD_FAILURE() << "memory of GPU 1 registered on GPU 0's device without peer access";
    } catch (const NotSupported& e) {
        EXPECT_NE(std::string(e.what()).find("cannot reach it"), std::string::npos) << e.what();
    }
}

// The library works on its context's GPU whatever GPU the calling thread has current, and
// leaves the caller's current GPU as it was: a context, QPs, regions and a shared buffer on
// GPU 0 made and connected from a thread whose current GPU is `cur`, then a WRITE between
// them from a kernel on GPU 0 (the shared buffer's zeroing once failed with
// cudaErrorInvalidValue when GPU 1 was current: a memset on GPU 1's stream for GPU 0's memory).
void made_with_current_gpu(int cur) {
    CK(cudaSetDevice(cur));
    gvtest::Side s(0);
    SharedBuffer b(s.ctx, 3 << 20);
    // A shared buffer is mapped for its own GPU (and those it is connected to): a copy of it
    // runs with that GPU current (cudaMemcpy from GPU 1's context fails: invalid argument).
    CK(cudaSetDevice(0));
    std::vector<uint8_t> z = download(b.data(), b.size());
    EXPECT_EQ(std::count(z.begin(), z.end(), uint8_t(0)), long(z.size())) << "a new shared buffer is zeroed";
    GpuMem src(0, 4096), dst(0, 4096);
    fill(0, src.p, 4096, 3);
    CK(cudaSetDevice(cur));
    gvtest::Side t(0);
    // The target region belongs to the responder's protection domain (an rkey of the
    // requester's PD is a REMOTE_ACCESS_ERR at the responder).
    MemoryRegion ms(s.pd, src.p, 4096, kAllAccess), md(t.pd, dst.p, 4096, kAllAccess);
    s.qp.connect(t.qp.endpoint());
    t.qp.connect(s.qp.endpoint());
    int now = -1;
    CK(cudaGetDevice(&now));
    EXPECT_EQ(now, cur) << "the library changed the caller's current GPU";
    ResultMem r;
    CK(cudaSetDevice(0));
    write_wait_k<<<1, 1>>>(s.h(), src.as<uint8_t>(), ms.lkey(), uint64_t(dst.p), md.rkey(), r.r);
    CK(cudaDeviceSynchronize());
    EXPECT_EQ(r->st[0], Status::Ok) << status_name(r->st[0]);
    EXPECT_EQ(r->st[1], Status::Ok) << status_name(r->st[1]) << " (completion: " << mlx5::syndrome_name(r->c[0].status)
                                    << ", QP " << qp_state_name(s.qp.state()) << ", peer "
                                    << qp_state_name(t.qp.state()) << ")";
    EXPECT_EQ(first_bad(dst.p, 4096, 3), -1);
    CK(cudaSetDevice(0));
}
TEST(TwoGpu, MadeWithItsOwnGpuCurrent) {
    SKIP_WITHOUT_TWO_GPUS();
    made_with_current_gpu(0);
}
TEST(TwoGpu, MadeWithTheOtherGpuCurrent) {
    SKIP_WITHOUT_TWO_GPUS();
    made_with_current_gpu(1);
}

TEST(TwoGpu, GpuBeyondTheVisibleOnesIsAClearError) {
    const int n = Context::gpu_count();
    if (n < 1) GTEST_SKIP() << "no CUDA GPU visible";
    try {
        Context c(ContextOptions{Backend::Soft, n});
        ADD_FAILURE() << "a context on GPU " << n << " of " << n << " opened";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("GPU " + std::to_string(n) + " asked for, but"), std::string::npos)
            << e.what();
    }
}

// ---- two processes, one GPU each ------------------------------------------------------------

namespace {

/// Starts this binary as the child `role` on GPU `gpu`, connecting to the parent's port.
/// visible: the child's CUDA_VISIBLE_DEVICES ("" leaves it as it is).
pid_t spawn_child(const char* role, int gpu, uint16_t port, const std::string& visible = "") {
    pid_t pid = fork();
    if (pid != 0) return pid;
    if (!visible.empty()) setenv("CUDA_VISIBLE_DEVICES", visible.c_str(), 1);
    const std::string p = std::to_string(port), g = std::to_string(gpu);
    execl(g_exe.c_str(), g_exe.c_str(), "--two-gpu-child", role, g.c_str(), p.c_str(), static_cast<char*>(nullptr));
    _exit(127);
}

constexpr uint32_t kOrderRounds = 64, kOrderChunks = 16;
constexpr size_t kRound = size_t(kOrderChunks) * kChunk;

// Child (GPU 1): per round, kOrderChunks WRITEs of round data into the round's own region of
// the parent's buffer, then the flag WRITE; a poller in the parent (GPU 0) checks each round.
__global__ void xorder_writer(dev::QpHandle qp, uint8_t* src, uint32_t lkey, uint64_t dst, uint32_t rkey,
                              uint64_t* src_flag, uint64_t flag, uint32_t flag_rkey, uint32_t rounds, Result* res) {
    __shared__ bool stop;
    for (uint32_t r = 1; r <= rounds; ++r) {
        uint8_t* mine = src + size_t(r) * kRound;
        if (threadIdx.x < kOrderChunks) {
            for (uint32_t i = 0; i < kChunk; ++i) mine[size_t(threadIdx.x) * kChunk + i] = uint8_t(r * 31 + threadIdx.x + i);
            dev::write(qp, mine + size_t(threadIdx.x) * kChunk, kChunk, lkey,
                       dst + size_t(r) * kRound + size_t(threadIdx.x) * kChunk, rkey, 0);
        }
        __syncthreads();
        if (threadIdx.x == kOrderChunks) {
            src_flag[r] = r;
            dev::write(qp, &src_flag[r], 8, lkey, flag, flag_rkey, kSignaled);
        }
        const Status cs = dev::commit<Scope::Block>(qp);
        if (threadIdx.x == 0) {
            // The first failed round ends the writer, with what it saw (a failure the child reports).
            const Status ws = dev::wait_send(qp, 1, &res->c[0], 5 * kNs, &res->n);
            stop = cs != Status::Ok || ws != Status::Ok;
            if (stop) {
                res->st[10] = cs;
                res->st[11] = ws;
                res->n = r;
            }
        }
        __syncthreads();
        if (stop) return;
    }
}
// Parent (GPU 0): waits for each round's flag (system scope: the writer is GPU 1's executor)
// and checks that round's bytes.
__global__ void xorder_poller(const uint8_t* dst, const uint64_t* flag, uint32_t rounds, unsigned long long* errors) {
    __shared__ uint64_t seen;
    for (uint32_t r = 1; r <= rounds; ++r) {
        if (threadIdx.x == 0) {
            const uint64_t t0 = atom::now_ns();
            uint64_t v = 0;
            while ((v = atom::load_acquire(flag, true)) < r && atom::now_ns() - t0 < 20 * kNs) {
            }
            seen = v;
        }
        __syncthreads();
        if (seen < r) {
            if (threadIdx.x == 0) atomicAdd(errors, 1ull << 48);
            return;
        }
        for (uint32_t w = 0; w < kOrderChunks; ++w)
            for (uint32_t i = threadIdx.x; i < kChunk; i += blockDim.x)
                if (dst[size_t(r) * kRound + size_t(w) * kChunk + i] != uint8_t(r * 31 + w + i)) atomicAdd(errors, 1ull);
        __syncthreads();
    }
}

/// The first byte of round r's region of the parent's buffer that is not what the writer
/// stores there (-1: all are).
long first_bad_round(const uint8_t* dst, uint32_t r) {
    std::vector<uint8_t> b = download(dst + size_t(r) * kRound, kRound);
    for (uint32_t w = 0; w < kOrderChunks; ++w)
        for (uint32_t i = 0; i < kChunk; ++i)
            if (b[size_t(w) * kChunk + i] != uint8_t(r * 31 + w + i)) return long(size_t(w) * kChunk + i);
    return -1;
}

void barrier(Channel& ch, uint8_t tag) { gvtest::barrier(ch, tag, kMs); }

// The child on GPU 1: every operation into the parent's SharedBuffers (GPU 0), then the
// ordering rounds.
int child_ops_role(int gpu, uint16_t port) {
    Channel ch = Channel::connect("127.0.0.1", port, kMs);
    gvtest::Side s(gpu);
    SharedBuffer local(s.ctx, 2 * kBig + (kOrderRounds + 1) * kRound + 64);
    CK(cudaSetDevice(gpu));
    uint8_t* src = local.as<uint8_t>();
    uint8_t* rd = src + kBig;
    uint8_t* osrc = src + 2 * kBig;
    uint64_t* old = reinterpret_cast<uint64_t*>(osrc + (kOrderRounds + 1) * kRound);
    CK(cudaMemset(local.data(), 0, local.size()));
    fill(gpu, src, kBig, 1);
    MemoryRegion ml(s.pd, local.data(), local.size(), kAllAccess);
    Exchanged got = ch.exchange(Backend::Soft, {s.qp.endpoint()}, {}, kMs);
    XCHECK(got.buffers.size() == 6, "exchange: 6 buffers expected");
    s.qp.connect(got.qps[0]);
    barrier(ch, 1);  // the parent connected and posted its receive
    Ops o{src, rd, old, ml.lkey(), ml.lkey(), ml.lkey(), got.buffers[0], got.buffers[1], got.buffers[2],
          got.buffers[3]};
    ResultMem r;
    ops_kernel<<<1, 128>>>(s.h(), o, r.r);
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < 8; ++i) XCHECK(r->st[i] == Status::Ok, "call " + std::to_string(i) + ": " + status_name(r->st[i]));
    XCHECK(r->n == 6, "6 completions");
    for (int i = 0; i < 6; ++i)
        XCHECK(r->c[i].ok(), "completion " + std::to_string(i) + ": " + mlx5::syndrome_name(r->c[i].status));
    XCHECK(first_bad(rd, kBig, 2) == -1, "READ data differs from the parent's buffer");
    std::vector<uint8_t> ov = download(old, 24);
    uint64_t v[3];
    std::memcpy(v, ov.data(), 24);
    XCHECK(v[0] == kCounter0 && v[1] == kCounter0 + 5 && v[2] == 0,
           "old values " + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ", " + std::to_string(v[2]));
    barrier(ch, 2);  // the parent checked; its poller starts
    barrier(ch, 3);
    ResultMem w;
    xorder_writer<<<1, 32>>>(s.h(), osrc, ml.lkey(), got.buffers[4].addr, got.buffers[4].rkey,
                             reinterpret_cast<uint64_t*>(osrc), got.buffers[5].addr, got.buffers[5].rkey,
                             kOrderRounds, w.r);
    CK(cudaDeviceSynchronize());
    XCHECK(w->st[10] == Status::Ok && w->st[11] == Status::Ok,
           "ordering writer, round " + std::to_string(w->n) + " of " + std::to_string(kOrderRounds) + ": commit " +
               status_name(w->st[10]) + ", wait_send " + status_name(w->st[11]) + " (completion: " +
               mlx5::syndrome_name(w->c[0].status) + "); the QP is in " + qp_state_name(s.qp.state()) +
               ", syndrome " + mlx5::syndrome_name(s.qp.error_syndrome()));
    barrier(ch, 4);
    return 0;
}

// The child sees only GPU 1 (CUDA_VISIBLE_DEVICES=1): connecting to the parent's QP on GPU 0
// must fail with the reason. It sends the message to the parent.
int child_hidden_role(int gpu, uint16_t port) {
    Channel ch = Channel::connect("127.0.0.1", port, kMs);
    gvtest::Side s(gpu);
    Exchanged got = ch.exchange(Backend::Soft, {s.qp.endpoint()}, {}, kMs);
    std::string msg = "connected";
    try {
        s.qp.connect(got.qps[0]);
    } catch (const Error& e) {
        msg = e.what();
    }
    ch.send_message(std::vector<uint8_t>(msg.begin(), msg.end()), kMs);
    barrier(ch, 9);
    return 0;
}

int run_child(const std::string& role, int gpu, uint16_t port) {
    alarm(150);
    try {
        if (role == "ops") return child_ops_role(gpu, port);
        if (role == "hidden") return child_hidden_role(gpu, port);
        std::fprintf(stderr, "unknown child role %s\n", role.c_str());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d (%s): %s\n", int(getpid()), role.c_str(), e.what());
        return 100;
    }
}

}  // namespace

// Bounds a two-process test: if it has not finished after `secs`, says which step it was in,
// kills the child and ends the process (a failure ctest reports at once, instead of the test's
// whole TIMEOUT; this test once hung on the two-H200 machine: see docs/two-gpus.md).
struct Watchdog {
    std::atomic<const char*> step{"start"};
    std::atomic<bool> done{false};
    pid_t child = 0;
    std::thread t;
    explicit Watchdog(int secs) {
        t = std::thread([this, secs] {
            const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(secs);
            while (!done.load() && std::chrono::steady_clock::now() < end)
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
            if (done.load()) return;
            std::fprintf(stderr, "watchdog: the test did not end within %d s; it was at: %s\n", secs, step.load());
            std::fflush(stderr);
            if (child > 0) kill(child, SIGKILL);
            _exit(1);
        });
    }
    ~Watchdog() {
        done.store(true);
        t.join();
    }
};

// Parent on GPU 0, child on GPU 1, one process each: the child's kernels do every operation
// into the parent's SharedBuffers (the parent's arena, on GPU 0, imported by the child and
// mapped for GPU 1), and the parent's poller on GPU 0 sees RC order of the child's WRITEs.
TEST(TwoGpu, EveryOperationAcrossGpusTwoProcesses) {
    SKIP_WITHOUT_TWO_GPUS();
    Watchdog wd(90);
    Listener lis = Channel::listen(0);
    pid_t child = spawn_child("ops", 1, lis.port());
    ASSERT_GT(child, 0);
    wd.child = child;
    wd.step = "accepting the child's connection";
    Channel ch = lis.accept(kMs);
    gvtest::Side s(0);
    SharedBuffer dst(s.ctx, kBig + kSig), rsrc(s.ctx, kBig), counter(s.ctx, 8), sig(s.ctx, 8), rbuf(s.ctx, kMsg);
    SharedBuffer odata(s.ctx, (kOrderRounds + 1) * kRound), oflag(s.ctx, 8);
    CK(cudaSetDevice(0));  // the buffers are mapped for GPU 0 (an earlier test may leave GPU 1 current)
    for (SharedBuffer* b : {&dst, &counter, &sig, &rbuf, &odata, &oflag}) CK(cudaMemset(b->data(), 0, b->size()));
    fill(0, rsrc.data(), kBig, 2);
    CK(cudaMemcpy(counter.data(), &kCounter0, 8, cudaMemcpyDefault));
    MemoryRegion md(s.pd, dst.data(), dst.size(), kAllAccess), mrs(s.pd, rsrc.data(), kBig, kAllAccess),
        mc(s.pd, counter.data(), 8, kAllAccess), msg(s.pd, sig.data(), 8, kAllAccess),
        mrb(s.pd, rbuf.data(), kMsg, kLocalWrite), mod(s.pd, odata.data(), odata.size(), kAllAccess),
        mof(s.pd, oflag.data(), 8, kAllAccess);
    wd.step = "exchanging endpoints and buffers";
    Exchanged got = ch.exchange(Backend::Soft, {s.qp.endpoint()},
                                {remote(dst.data(), md), remote(rsrc.data(), mrs), remote(counter.data(), mc),
                                 remote(sig.data(), msg), remote(odata.data(), mod), remote(oflag.data(), mof)},
                                kMs);
    wd.step = "connecting to the child's QP (GPU 1)";
    s.qp.connect(got.qps[0]);
    ResultMem r;
    CK(cudaSetDevice(0));
    wd.step = "posting the receive";
    post_recv_k<<<1, 1>>>(s.h(), rbuf.as<uint8_t>(), kMsg, mrb.lkey(), r.r);
    CK(cudaDeviceSynchronize());
    wd.step = "barrier 1 (the child connected)";
    barrier(ch, 1);
    wd.step = "barrier 2 (the child's operations done)";
    barrier(ch, 2);
    wd.step = "waiting for the child's SEND";
    wait_recv_k<<<1, 1>>>(s.h(), r.r);
    CK(cudaDeviceSynchronize());
    EXPECT_EQ(r->st[8], Status::Ok);
    EXPECT_EQ(r->st[9], Status::Ok) << status_name(r->st[9]);
    EXPECT_TRUE(r->c[7].ok() && r->c[7].byte_len == kMsg);
    EXPECT_EQ(first_bad(dst.data(), kBig, 1), -1) << "WRITE from GPU 1's process";
    EXPECT_EQ(first_bad(dst.as<uint8_t>() + kBig, kSig, 1, kBig - kSig), -1) << "put-with-signal data";
    EXPECT_EQ(first_bad(rbuf.data(), kMsg, 1), -1) << "SEND";
    EXPECT_EQ(get<uint64_t>(counter.data()), 77u);
    EXPECT_EQ(get<uint64_t>(sig.data()), 1u);
    GpuMem err(0, 8);
    cudaStream_t st0;
    CK(cudaStreamCreateWithFlags(&st0, cudaStreamNonBlocking));
    xorder_poller<<<1, 256, 0, st0>>>(odata.as<uint8_t>(), oflag.as<uint64_t>(), kOrderRounds,
                                      err.as<unsigned long long>());
    CK(cudaGetLastError());
    wd.step = "barrier 3 (the ordering poller started)";
    barrier(ch, 3);
    wd.step = "the ordering poller on GPU 0";
    CK(cudaStreamSynchronize(st0));
    CK(cudaStreamDestroy(st0));
    const unsigned long long e = get<unsigned long long>(err.p);
    EXPECT_EQ(e, 0ull) << "stale bytes seen on GPU 0: " << (e & 0xffffffff) << ", poller timeouts: " << (e >> 48)
                       << "; the flag reads " << get<uint64_t>(oflag.data()) << ", round 1's first bad byte: "
                       << first_bad_round(odata.as<uint8_t>(), 1);
    wd.step = "barrier 4 (the child's writer done)";
    barrier(ch, 4);
    wd.step = "waiting for the child to exit";
    gvtest::expect_exit_ok(gvtest::wait_child(child, 60000));
    wd.step = "tearing down";
}

// A child that sees only its own GPU (CUDA_VISIBLE_DEVICES=1) cannot reach the parent's GPU:
// its connect fails at once, naming the peer's GPU and CUDA_VISIBLE_DEVICES.
TEST(TwoGpu, PeerGpuHiddenByCudaVisibleDevicesIsAClearError) {
    SKIP_WITHOUT_TWO_GPUS();
    Listener lis = Channel::listen(0);
    pid_t child = spawn_child("hidden", 0, lis.port(), "1");
    ASSERT_GT(child, 0);
    Channel ch = lis.accept(kMs);
    gvtest::Side s(0);
    Exchanged got = ch.exchange(Backend::Soft, {s.qp.endpoint()}, {}, kMs);
    const std::vector<uint8_t> m = ch.recv_message(kMs);
    const std::string msg(m.begin(), m.end());
    EXPECT_NE(msg.find("which this process does not see"), std::string::npos) << msg;
    EXPECT_NE(msg.find("CUDA_VISIBLE_DEVICES=1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("GPU-"), std::string::npos) << msg;
    barrier(ch, 9);
    gvtest::expect_exit_ok(gvtest::wait_child(child, 60000));
}

int main(int argc, char** argv) {
    g_exe = "/proc/self/exe";
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n > 0) g_exe.assign(buf, size_t(n));
    // One process per GPU needs no MPS: keep this process and its children off any daemon
    // (a control directory with none), so the runs show it.
    const std::string dir = "/tmp/gv-two-gpu-no-mps-" + std::to_string(getpid());
    if (argc == 5 && std::string(argv[1]) == "--two-gpu-child")
        return run_child(argv[2], std::atoi(argv[3]), uint16_t(std::atoi(argv[4])));
    mkdir(dir.c_str(), 0700);
    setenv("CUDA_MPS_PIPE_DIRECTORY", dir.c_str(), 1);
    testing::InitGoogleTest(&argc, argv);
    const int rc = RUN_ALL_TESTS();
    rmdir(dir.c_str());
    return rc;
}
