// The software device across two GPUs of one host, in one process (docs/two-gpus.md): a QP of
// a context on GPU 0 connected to a QP of a context on GPU 1. Kernels on one GPU WRITE, READ,
// SEND, fetch-add, compare-swap and put-with-signal into the other GPU's memory (cudaMalloc'd
// and gv::SharedBuffer); a poller on the other GPU sees RC order; RDMA atomics and the other
// GPU's own atomics on one word add up; peer access that is impossible is a clear error; the
// caller's current GPU does not matter. One process per GPU: two_gpu_xproc_test.cu. Every test
// skips, saying why, with fewer than two GPUs with peer access.
#include "gpu/two_gpu_util.cuh"

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
