// The mlx5 backend's device path from kernels, against the software executor standing in for
// the ConnectX (tests/mlx5/standin_nic.hpp): a block of threads writes WQEs into the backend's
// send ring, commits (doorbell record, then the 8-byte doorbell store into the stand-in's
// "UAR", mapped into the GPU as the real one would be), and polls the mlx5 CQ the stand-in
// writes. Rings in GPU memory (the DevX mode) and in host memory (the verbs-created mode),
// under both doorbell handlers; the Auto fallback to the CPU proxy; the flush READ from a
// kernel. Skipped without a GPU.
#include <gtest/gtest.h>

#include "../gpu/gpu_util.cuh"
#include "gpuverbs/detail/mlx5/doorbell.cuh"
#include "mlx5/standin_nic.hpp"

using namespace gv;
using gv::test::StandinNic;
using gv::test::StandinOptions;
using gvtest::DevBuf;

namespace {

constexpr uint64_t kTimeout = 10'000'000'000ull;

struct Job {
    dev::QpHandle a, b;
    uint8_t *src, *dst, *back, *rbuf;
    uint64_t *word, *old;
    uint32_t lsrc, rdst, lback, lrbuf, rword, lold;
    uint32_t chunk;
};

struct Out {
    int st[8];
    Completion c;
};

// Every thread of the block WRITEs its chunk, the block commits once; then READs back; then
// one thread: SEND into a receive, fetch-add, put-with-signal, the flush READ.
__global__ void traffic(Job j, Out* out) {
    const uint32_t t = threadIdx.x;
    const uint64_t off = uint64_t(t) * j.chunk;
    Status s = dev::write<Scope::Block>(j.a, j.src + off, j.chunk, j.lsrc, uint64_t(j.dst + off), j.rdst,
                                        t == blockDim.x - 1 ? kSignaled : 0);
    if (s != Status::Ok) out->st[0] = int(s);
    dev::commit<Scope::Block>(j.a);
    if (t == 0) out->st[1] = int(dev::wait_send(j.a, 1, &out->c, kTimeout));
    __syncthreads();
    s = dev::read<Scope::Block>(j.a, j.back + off, j.chunk, j.lback, uint64_t(j.dst + off), j.rdst,
                                t == blockDim.x - 1 ? kSignaled : 0);
    if (s != Status::Ok) out->st[0] = int(s);
    dev::commit<Scope::Block>(j.a);
    if (t == 0) {
        out->st[2] = int(dev::wait_send(j.a, 1, &out->c, kTimeout));
        out->st[7] = int(dev::flush_gpu_writes(j.a, kTimeout));
        dev::recv(j.b, j.rbuf, 4096, j.lrbuf);
        dev::send(j.a, j.src, 4096, j.lsrc);
        dev::commit(j.a);
        out->st[3] = int(dev::wait_send(j.a, 1, &out->c, kTimeout));
        out->st[4] = int(dev::wait_recv(j.b, 1, &out->c, kTimeout));
        dev::fetch_add(j.a, j.old, j.lold, uint64_t(j.word), j.rword, 3);
        dev::commit(j.a);
        out->st[5] = int(dev::wait_send(j.a, 1, &out->c, kTimeout));
        dev::put_signal(j.a, j.src, 64, j.lsrc, uint64_t(j.dst), j.rdst, j.old + 1, j.lold, uint64_t(j.word + 1),
                        j.rword, 1);
        dev::commit(j.a);
        out->st[6] = int(dev::wait_send(j.a, 1, &out->c, kTimeout));
    }
}

__global__ void fill(uint8_t* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        p[i] = uint8_t((i * 2654435761u + seed) >> 9);
}

void run_traffic(DoorbellHandler h, MemoryKind mem, const StandinOptions& so, ReadFlush flush = ReadFlush::Auto) {
    std::shared_ptr<StandinNic::Log> log;
    Mlx5Options mo;
    mo.doorbell = h;
    mo.read_flush = flush;
    Context ctx = gv::test::standin_context(0, so, mo, &log);
    gvtest::Pair p(ctx, QpOptions{}, mem);
    constexpr uint32_t kThreads = 128, kChunk = 4096;
    const size_t n = size_t(kThreads) * kChunk;
    DevBuf src(n), dst(n), back(n), rbuf(4096), words(64);
    CUDA_OK(cudaMemset(dst.p, 0, n));
    CUDA_OK(cudaMemset(back.p, 0, n));
    CUDA_OK(cudaMemset(words.p, 0, 64));
    fill<<<64, 256>>>(src.get(), n, 5);
    CUDA_OK(cudaDeviceSynchronize());
    MemoryRegion msrc(p.pd, src.p, n, kLocalWrite), mdst(p.pd, dst.p, n, kAllAccess), mback(p.pd, back.p, n, kLocalWrite),
        mrbuf(p.pd, rbuf.p, 4096, kLocalWrite), mwords(p.pd, words.p, 64, kAllAccess);
    Job j{};
    j.a = p.h(0);
    j.b = p.h(1);
    j.src = src.get();
    j.dst = dst.get();
    j.back = back.get();
    j.rbuf = rbuf.get();
    j.word = words.get<uint64_t>();
    j.old = j.word + 4;
    j.lsrc = msrc.lkey();
    j.rdst = mdst.rkey();
    j.lback = mback.lkey();
    j.lrbuf = mrbuf.lkey();
    j.rword = mwords.rkey();
    j.lold = mwords.lkey();
    j.chunk = kChunk;
    Out* out = nullptr;
    CUDA_OK(cudaMallocManaged(&out, sizeof(Out)));
    std::memset(out, 0, sizeof *out);
    traffic<<<1, kThreads>>>(j, out);
    CUDA_OK(cudaDeviceSynchronize());
    for (int i = 0; i < 8; ++i) EXPECT_EQ(out->st[i], 0) << "step " << i << ": " << status_name(Status(out->st[i]));
    std::vector<uint8_t> hs(n), hd(n), hb(n), hr(4096);
    CUDA_OK(cudaMemcpy(hs.data(), src.p, n, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hd.data(), dst.p, n, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hb.data(), back.p, n, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hr.data(), rbuf.p, 4096, cudaMemcpyDeviceToHost));
    EXPECT_EQ(gvtest::first_diff(hs.data(), hd.data(), n), -1);
    EXPECT_EQ(gvtest::first_diff(hs.data(), hb.data(), n), -1);
    EXPECT_EQ(gvtest::first_diff(hs.data(), hr.data(), 4096), -1);
    uint64_t w[8];
    CUDA_OK(cudaMemcpy(w, words.p, 64, cudaMemcpyDeviceToHost));
    EXPECT_EQ(w[0], 3u);  // fetch-add
    EXPECT_EQ(w[4], 0u);  // what it fetched
    EXPECT_EQ(w[1], 1u);  // the signal
    cudaFree(out);
    // The doorbells the stand-in saw: QP a's, none with a problem, the last at the record.
    const uint32_t qpn = j.a.q.qpn;
    std::lock_guard<std::mutex> lock(log->mu);
    for (const std::string& pr : log->problems) ADD_FAILURE() << "stand-in NIC: " << pr;
    size_t mine = 0;
    for (const auto& d : log->doorbells)
        if (d.qpn == qpn) {
            ++mine;
            EXPECT_EQ(d.raw, detail::mlx5db::doorbell_value(d.pi, qpn));
        }
    EXPECT_GE(mine, 1u);
    if (h == DoorbellHandler::Gpu) EXPECT_NE(j.a.mlx5.uar, nullptr);
    else EXPECT_EQ(j.a.mlx5.uar, nullptr);
}

bool host_pointers_usable() {
    int v = 0;
    cudaDeviceGetAttribute(&v, cudaDevAttrCanUseHostPointerForRegisteredMem, 0);
    return v != 0;
}

}  // namespace

TEST(Mlx5StandInGpu, GpuMemoryQueuesGpuDoorbell) {
    GV_SKIP_WITHOUT_GPU();
    run_traffic(DoorbellHandler::Gpu, MemoryKind::Device, StandinOptions{});
}

TEST(Mlx5StandInGpu, GpuMemoryQueuesCpuProxy) {
    GV_SKIP_WITHOUT_GPU();
    run_traffic(DoorbellHandler::CpuProxy, MemoryKind::Device, StandinOptions{});
}

TEST(Mlx5StandInGpu, HostMemoryQueuesBothHandlers) {
    GV_SKIP_WITHOUT_GPU();
    if (!host_pointers_usable())
        GTEST_SKIP() << "the stand-in's executor reaches host rings at their CPU address "
                        "(cudaDevAttrCanUseHostPointerForRegisteredMem = 0 here)";
    run_traffic(DoorbellHandler::Gpu, MemoryKind::Host, StandinOptions{});
    run_traffic(DoorbellHandler::CpuProxy, MemoryKind::Host, StandinOptions{});
}

TEST(Mlx5StandInGpu, FlushReadFromAKernel) {
    GV_SKIP_WITHOUT_GPU();
    StandinOptions so;
    so.gdr_writes_ordering = 0;  // the GPU does not order GPUDirect writes: Auto flushes
    run_traffic(DoorbellHandler::Gpu, MemoryKind::Device, so);
    run_traffic(DoorbellHandler::CpuProxy, MemoryKind::Device, so);
}

// A UAR the GPU cannot map: Auto takes the CPU proxy (and says why once on stderr); Gpu is an
// error that names the failed call and the driver setting.
TEST(Mlx5StandInGpu, AutoFallsBackToTheCpuProxy) {
    GV_SKIP_WITHOUT_GPU();
    StandinOptions so;
    so.uar_mappable = false;
    so.uar_map_error = "cudaHostRegister(UAR page, 4096 bytes, Portable|Mapped|IoMemory) failed: cudaErrorNotSupported";
    so.peer_mapping_override = 0;
    Mlx5Options mo;
    Context ctx = gv::test::standin_context(0, so, mo);
    EXPECT_NE(ctx.selection().find("doorbell: cpu-proxy"), std::string::npos) << ctx.selection();
    run_traffic(DoorbellHandler::Auto, MemoryKind::Device, so);
    mo.doorbell = DoorbellHandler::Gpu;
    try {
        gv::test::standin_context(0, so, mo);
        FAIL() << "DoorbellHandler::Gpu accepted with a UAR the GPU cannot map";
    } catch (const NotSupported& e) {
        EXPECT_NE(std::string(e.what()).find("PeerMappingOverride=1"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("cudaErrorNotSupported"), std::string::npos) << e.what();
    }
}

// Many blocks, one QP each, at once: every block rings its own QP's doorbell.
struct BlockJob {
    dev::QpHandle q;
    uint32_t lsrc, rdst;
};

__global__ void many(const BlockJob* jobs, uint8_t* src, uint8_t* dst, int* bad) {
    const BlockJob& j = jobs[blockIdx.x];
    const uint64_t base = uint64_t(blockIdx.x) * 65536;
    for (int round = 0; round < 8; ++round) {
        const uint64_t off = base + uint64_t(round) * 8192 + threadIdx.x * 64;
        if (dev::write<Scope::Block>(j.q, src + off, 64, j.lsrc, uint64_t(dst + off), j.rdst,
                                     threadIdx.x == blockDim.x - 1 ? kSignaled : 0) != Status::Ok)
            atomicAdd(bad, 1);
        dev::commit<Scope::Block>(j.q);
        if (threadIdx.x == 0 && dev::wait_send(j.q, 1, nullptr, kTimeout) != Status::Ok) atomicAdd(bad, 1);
        __syncthreads();
    }
}

TEST(Mlx5StandInGpu, ManyBlocksOneQpEach) {
    GV_SKIP_WITHOUT_GPU();
    for (DoorbellHandler h : {DoorbellHandler::Gpu, DoorbellHandler::CpuProxy}) {
        SCOPED_TRACE(doorbell_handler_name(h));
        Mlx5Options mo;
        mo.doorbell = h;
        Context ctx = gv::test::standin_context(0, StandinOptions{}, mo);
        constexpr int kPairs = 8;
        QpOptions o;
        o.sq_depth = 256;
        std::vector<std::unique_ptr<gvtest::Pair>> pairs;
        for (int i = 0; i < kPairs; ++i) pairs.push_back(std::make_unique<gvtest::Pair>(ctx, o, MemoryKind::Device, 256));
        const size_t n = size_t(kPairs) * 65536;
        DevBuf src(n), dst(n), jobs(sizeof(BlockJob) * kPairs), bad(4);
        fill<<<64, 256>>>(src.get(), n, 11);
        CUDA_OK(cudaMemset(dst.p, 0, n));
        CUDA_OK(cudaMemset(bad.p, 0, 4));
        // Each pair has its own protection domain: the buffers are registered in each.
        std::vector<std::unique_ptr<MemoryRegion>> ms, md;
        std::vector<BlockJob> hj;
        for (int i = 0; i < kPairs; ++i) {
            ms.push_back(std::make_unique<MemoryRegion>(pairs[i]->pd, src.p, n, kLocalWrite));
            md.push_back(std::make_unique<MemoryRegion>(pairs[i]->pd, dst.p, n, kAllAccess));
            hj.push_back({pairs[i]->h(0), ms[i]->lkey(), md[i]->rkey()});
        }
        CUDA_OK(cudaMemcpy(jobs.p, hj.data(), sizeof(BlockJob) * kPairs, cudaMemcpyHostToDevice));
        many<<<kPairs, 128>>>(jobs.get<BlockJob>(), src.get(), dst.get(), bad.get<int>());
        CUDA_OK(cudaDeviceSynchronize());
        int b = 0;
        CUDA_OK(cudaMemcpy(&b, bad.p, 4, cudaMemcpyDeviceToHost));
        EXPECT_EQ(b, 0);
        std::vector<uint8_t> hsrc(n), hdst(n);
        CUDA_OK(cudaMemcpy(hsrc.data(), src.p, n, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(hdst.data(), dst.p, n, cudaMemcpyDeviceToHost));
        for (int i = 0; i < kPairs; ++i)
            for (int r = 0; r < 8; ++r) {
                const size_t off = size_t(i) * 65536 + size_t(r) * 8192;
                EXPECT_EQ(gvtest::first_diff(hsrc.data() + off, hdst.data() + off, 128 * 64), -1)
                    << "pair " << i << " round " << r;
            }
    }
}
