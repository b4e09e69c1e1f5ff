// The GPU half of the verbs backend (no machine here has both a GPU and an RDMA device): kernels
// post at full rate into the pinned rings of a verbs context whose proxy threads read, decode
// and complete every WQE into the sink, which records the work requests; each recorded one is
// checked against what the kernels posted. Label gpu; skipped without a GPU.
//
// Ordering under test (src/verbs/proxy.cpp, post_sends): a block's threads write their WQEs with
// plain stores into pinned host memory; the block barrier, then thread 0's system-scope release
// of sq_ready and the doorbell-record CAS between system-scope fences publish them; the proxy's
// acquire load of the record precedes its loads of the WQEs. A WQE read before its bytes
// arrived would show the previous lap's ctrl segment (its index is checked) or wrong fields,
// and the kernel would see an error completion, or the records would not match.
#include <cuda_runtime.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "gpu_util.cuh"
#include "gpuverbs/device.cuh"
#include "verbs/sink.hpp"
#include "verbs/translate.hpp"
#include "verbs/verbs_backend.hpp"

namespace {

using namespace gv;
namespace v = gv::detail::verbs;

constexpr uint32_t kThreads = 256;

struct Job {
    dev::QpHandle qp;
    uint64_t lbase, rbase;
    uint32_t lkey, rkey;
    uint32_t q;  // the QP's index
};

GV_HOST_DEVICE uint64_t inline_value(uint32_t q, uint64_t k) { return (uint64_t(q) << 40) | k; }

// One block per QP. Round r posts one WQE per thread, all of one kind (block scope: one
// reservation, one publication, one doorbell for the 256): r % 4 = 0 WRITE, 1 inline WRITE,
// 2 fetch-add, 3 READ. The last thread's WQE is signaled, every 64th (t % 64 == 7) fenced.
// Thread 0 keeps `window` rounds in flight.
__global__ void post_rounds(const Job* jobs, uint32_t rounds, uint32_t window, int* errors) {
    const Job& j = jobs[blockIdx.x];
    const uint32_t t = threadIdx.x;
    for (uint32_t r = 0; r < rounds; ++r) {
        const uint64_t k = uint64_t(r) * kThreads + t;  // the WQE's position (all one WQEBB)
        const uint32_t f = (t + 1 == kThreads ? kSignaled : 0) | (t % 64 == 7 ? kFence : 0);
        Status st = Status::Ok;
        switch (r % 4) {
            case 0:
                st = dev::write<Scope::Block>(j.qp, reinterpret_cast<const void*>(j.lbase + t * 8), 8, j.lkey,
                                              j.rbase + (k % 512) * 8, j.rkey, f);
                break;
            case 1: {
                const uint64_t val = inline_value(j.q, k);
                st = dev::write_inline<Scope::Block>(j.qp, &val, 8, j.rbase + (k % 512) * 8, j.rkey, f);
                break;
            }
            case 2:
                st = dev::fetch_add<Scope::Block>(j.qp, reinterpret_cast<uint64_t*>(j.lbase + 4096 + t * 8), j.lkey,
                                                  j.rbase + (t % 64) * 8, j.rkey, k + 1, f);
                break;
            default:
                st = dev::read<Scope::Block>(j.qp, reinterpret_cast<void*>(j.lbase + t * 16), 16, j.lkey,
                                             j.rbase + t * 16, j.rkey, f);
                break;
        }
        if (st != Status::Ok) atomicAdd(errors, 1);
        const Status c = dev::commit<Scope::Block>(j.qp);
        if (t == 0 && c != Status::Ok) atomicAdd(errors, 1);
        if (t == 0 && r >= window) {
            Completion x;
            if (dev::wait_send(j.qp, 1, &x, 30'000'000'000ull) != Status::Ok) atomicAdd(errors, 1);
        }
        __syncthreads();
    }
    if (t == 0) {
        uint32_t left = rounds < window ? rounds : window;
        Completion x[16];
        while (left) {
            const uint32_t n = left < 16 ? left : 16;
            if (dev::wait_send(j.qp, n, x, 30'000'000'000ull) != Status::Ok) atomicAdd(errors, 1);
            left -= n;
        }
    }
}

struct Rig {
    std::shared_ptr<v::SinkDevice> sink;
    Context ctx;
    ProtectionDomain pd;
    std::vector<std::unique_ptr<CompletionQueue>> cq;
    std::vector<std::unique_ptr<QueuePair>> qp;
    std::vector<uint8_t> local, remote;
    std::unique_ptr<MemoryRegion> lmr, rmr;
    Rig(uint32_t qps, bool record, uint32_t proxy_threads,
        VerbsOptions::GpuDirectFlush flush = VerbsOptions::GpuDirectFlush::Auto)
        : sink(std::make_shared<v::SinkDevice>([&] {
              v::SinkOptions o;
              o.record = record;
              return o;
          }())),
          ctx([&] {
              VerbsOptions vo;
              vo.proxy_threads = proxy_threads;
              vo.max_idle_sleep_us = 0;
              vo.gpudirect_flush = flush;
              return v::open_sink_context(sink, vo, 0);
          }()),
          pd(ctx),
          local(size_t(qps) * 8192),
          remote(size_t(qps) * 8192) {
        for (uint32_t i = 0; i < qps; ++i) {
            cq.push_back(std::make_unique<CompletionQueue>(ctx, CqOptions{256}));
            QpOptions o;
            o.send_cq = o.recv_cq = cq.back().get();
            o.sq_depth = 1024;
            o.max_inline = 16;  // every WQE of the kernel is one WQEBB
            qp.push_back(std::make_unique<QueuePair>(pd, o));
        }
        for (uint32_t i = 0; i < qps; ++i) qp[i]->connect(qp[i ^ 1]->endpoint());
        lmr = std::make_unique<MemoryRegion>(pd, local.data(), local.size(), kAllAccess);
        rmr = std::make_unique<MemoryRegion>(pd, remote.data(), remote.size(), kAllAccess);
    }
    Job job(uint32_t i) const {
        return {qp[i]->device_handle(), reinterpret_cast<uint64_t>(local.data()) + 8192ull * i,
                reinterpret_cast<uint64_t>(remote.data()) + 8192ull * i, lmr->lkey(), rmr->rkey(), i};
    }
};

/// Runs the kernel; returns its seconds (and the errors it counted).
double run_kernel(const Rig& rig, uint32_t qps, uint32_t rounds, int* errors) {
    std::vector<Job> jobs;
    for (uint32_t i = 0; i < qps; ++i) jobs.push_back(rig.job(i));
    Job* d_jobs = nullptr;
    int* d_err = nullptr;
    EXPECT_EQ(cudaMalloc(&d_jobs, sizeof(Job) * qps), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&d_err, sizeof(int)), cudaSuccess);
    cudaMemcpy(d_jobs, jobs.data(), sizeof(Job) * qps, cudaMemcpyHostToDevice);
    cudaMemset(d_err, 0, sizeof(int));
    const auto t0 = std::chrono::steady_clock::now();
    post_rounds<<<qps, kThreads>>>(d_jobs, rounds, 2, d_err);
    const cudaError_t e = cudaDeviceSynchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    cudaMemcpy(errors, d_err, sizeof(int), cudaMemcpyDeviceToHost);
    cudaFree(d_jobs);
    cudaFree(d_err);
    return s;
}

// Every work request the proxy posted, checked against what the kernel posted.
TEST(GpuVerbsProxy, KernelsPostEveryWqeTheProxyRecords) {
    GV_SKIP_WITHOUT_GPU();
    constexpr uint32_t kQps = 32, kRounds = 32;
    Rig rig(kQps, true, 2);
    int errors = 0;
    const double s = run_kernel(rig, kQps, kRounds, &errors);
    EXPECT_EQ(errors, 0);
    const uint64_t total = uint64_t(kQps) * kRounds * kThreads;
    std::printf("kernels posted %llu WQEs in %.3f s: %.1f M WQE/s through the proxy into the sink (2 proxy threads)\n",
                (unsigned long long)total, s, total / s / 1e6);
    EXPECT_EQ(v::proxy_of(rig.ctx)->stats().send_wqes, total);
    for (uint32_t q = 0; q < kQps; ++q) {
        const Job j = rig.job(q);
        const std::vector<v::SinkWr> r = rig.sink->records(j.qp.q.qpn);
        ASSERT_EQ(r.size(), size_t(kRounds) * kThreads) << "QP " << q;
        int bad = 0;
        for (uint64_t k = 0; k < r.size() && bad < 5; ++k) {
            const v::SinkWr& w = r[k];
            const uint32_t t = uint32_t(k % kThreads), round = uint32_t(k / kThreads);
            bool ok = v::wr_pos(w.wr_id) == k && v::wr_user_signaled(w.wr_id) == (t + 1 == kThreads) &&
                      ((w.send_flags & IBV_SEND_FENCE) != 0) == (t % 64 == 7) && w.sge.size() == 1;
            switch (round % 4) {
                case 0:
                    ok = ok && w.opcode == IBV_WR_RDMA_WRITE && w.remote_addr == j.rbase + (k % 512) * 8 &&
                         w.rkey == j.rkey && w.sge[0].addr == j.lbase + t * 8 && w.sge[0].length == 8 &&
                         w.sge[0].lkey == j.lkey && !(w.send_flags & IBV_SEND_INLINE);
                    break;
                case 1: {
                    const uint64_t val = inline_value(q, k);
                    ok = ok && w.opcode == IBV_WR_RDMA_WRITE && (w.send_flags & IBV_SEND_INLINE) &&
                         w.inline_data.size() == 8 && std::memcmp(w.inline_data.data(), &val, 8) == 0 &&
                         w.remote_addr == j.rbase + (k % 512) * 8 && w.rkey == j.rkey;
                    break;
                }
                case 2:
                    ok = ok && w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD && w.compare_add == k + 1 &&
                         w.remote_addr == j.rbase + (t % 64) * 8 && w.rkey == j.rkey &&
                         w.sge[0].addr == j.lbase + 4096 + t * 8 && w.sge[0].length == 8 && w.sge[0].lkey == j.lkey;
                    break;
                default:
                    ok = ok && w.opcode == IBV_WR_RDMA_READ && w.remote_addr == j.rbase + t * 16 && w.rkey == j.rkey &&
                         w.sge[0].addr == j.lbase + t * 16 && w.sge[0].length == 16 && w.sge[0].lkey == j.lkey;
                    break;
            }
            if (!ok) {
                ++bad;
                ADD_FAILURE() << "QP " << q << " work request " << k << " (round " << round << ", thread " << t
                              << ") differs: opcode " << w.opcode << " flags " << w.send_flags << " wr_id pos "
                              << v::wr_pos(w.wr_id) << " raddr " << w.remote_addr;
            }
        }
    }
}

// Longer and with more QPs, nothing recorded: any WQE the proxy read before its bytes arrived
// would fail its checks (an error completion the kernel counts) or lose a WQE.
TEST(GpuVerbsProxy, OrderingUnderLoad) {
    GV_SKIP_WITHOUT_GPU();
    constexpr uint32_t kQps = 128, kRounds = 512;
    Rig rig(kQps, false, 4);
    int errors = 0;
    const double s = run_kernel(rig, kQps, kRounds, &errors);
    EXPECT_EQ(errors, 0);
    const uint64_t total = uint64_t(kQps) * kRounds * kThreads;
    const v::ProxyStats st = v::proxy_of(rig.ctx)->stats();
    EXPECT_EQ(st.send_wqes, total);
    EXPECT_EQ(st.send_wrs, total);
    EXPECT_EQ(rig.sink->total_send_wrs(), total);
    std::printf("kernels posted %llu WQEs in %.3f s: %.1f M WQE/s through 4 proxy threads into the sink "
                "(%.1f work requests per list)\n",
                (unsigned long long)total, s, total / s / 1e6, double(st.send_wrs) / double(st.post_calls));
}

// GPUDirect write flushes (VerbsOptions::gpudirect_flush): the proxy flushes before the CQEs
// of a batch that retires a READ or an atomic (round 2: fetch-adds, round 3: READs, their
// completions retire the unsignaled ones before them), never for WRITEs alone, never when
// told not to; Auto flushes exactly when this GPU does not order such writes itself. The
// flush itself (cudaDeviceFlushGPUDirectRDMAWrites) runs on this GPU from the proxy thread.
TEST(GpuVerbsProxy, GpuDirectFlushesOnlyForWorkThatWroteLocalMemory) {
    GV_SKIP_WITHOUT_GPU();
    using F = VerbsOptions::GpuDirectFlush;
    constexpr uint32_t kQps = 4;
    int errors = 0;
    int options = 0;
    ASSERT_EQ(cudaDeviceGetAttribute(&options, cudaDevAttrGPUDirectRDMAFlushWritesOptions, 0), cudaSuccess);
    if (!(options & cudaFlushGPUDirectRDMAWritesOptionHost)) {
        // This GPU cannot flush: Always is refused at open, with the reason.
        try {
            Rig rig(kQps, false, 1, F::Always);
            ADD_FAILURE() << "gpudirect_flush = Always opened on a GPU that cannot flush";
        } catch (const NotSupported& e) {
            EXPECT_NE(std::string(e.what()).find("cannot flush"), std::string::npos) << e.what();
        }
    } else {
        {
            Rig rig(kQps, false, 1, F::Always);
            run_kernel(rig, kQps, 2, &errors);  // WRITE and inline WRITE rounds only
            EXPECT_EQ(errors, 0);
            EXPECT_EQ(v::proxy_of(rig.ctx)->stats().gpudirect_flushes, 0u) << "a flush for WRITEs alone";
        }
        {
            Rig rig(kQps, false, 1, F::Always);
            run_kernel(rig, kQps, 8, &errors);  // two fetch-add and two READ rounds per QP
            EXPECT_EQ(errors, 0);
            const v::ProxyStats st = v::proxy_of(rig.ctx)->stats();
            EXPECT_GE(st.gpudirect_flushes, 1u) << "no flush before the completions of READs and fetch-adds";
            EXPECT_LE(st.gpudirect_flushes, st.completions) << "at most one flush per polled batch";
        }
    }
    {
        Rig rig(kQps, false, 1, F::Never);
        run_kernel(rig, kQps, 8, &errors);
        EXPECT_EQ(errors, 0);
        EXPECT_EQ(v::proxy_of(rig.ctx)->stats().gpudirect_flushes, 0u);
    }
    int ordering = -1;
    ASSERT_EQ(cudaDeviceGetAttribute(&ordering, cudaDevAttrGPUDirectRDMAWritesOrdering, 0), cudaSuccess);
    EXPECT_EQ(v::decide_gpudirect_flush(0, F::Auto) >= 0,
              ordering < cudaGPUDirectRDMAWritesOrderingOwner && (options & cudaFlushGPUDirectRDMAWritesOptionHost) != 0)
        << "cudaDevAttrGPUDirectRDMAWritesOrdering = " << ordering;
    std::printf("GPU 0: cudaDevAttrGPUDirectRDMAWritesOrdering = %d, flush options %d, so Auto %s\n", ordering,
                options, v::decide_gpudirect_flush(0, F::Auto) >= 0 ? "flushes" : "does not flush");
}

}  // namespace
