// gv_proxy_rate: how many WQEs per second the verbs proxy reads, translates and posts, into the
// sink (no device: what one proxy thread costs) or into a real device (rxe in the Soft-RoCE VM:
// a ratio against posting the same work with ibv_post_send directly). docs/verbs.md quotes it.
//
//   gv_proxy_rate [--sink | --device NAME [--gid-index N] [--baseline]] [--proxy-threads N]
//                 [--qps N] [--wqes N] [--rounds N] [--posters prefill|cpu|gpu|idle] [--batch N]
//                 [--seconds S] [--idle-sleep-us N] [--json]
//
// posters:
//   prefill  every QP's ring is filled with --wqes 8-byte WRITEs (the last signaled) before any
//            doorbell moves; then all doorbells move at once and the time until every QP's last
//            WQE completed is the proxy's alone (reading, translating, posting, completing)
//   cpu      one CPU thread per QP posts batches of --batch WQEs (the last signaled) and commits,
//            for --seconds: what CPU posters and the proxy reach together
//   gpu      one block of 256 threads per QP posts rounds of 256 WQEs (block scope, the last
//            signaled) into the pinned rings, for --rounds x --wqes/256 rounds (CUDA builds)
//   idle     nothing is posted for --seconds: the CPU time the proxy threads spend idle
//            (with --idle-sleep-us, the bound of their backoff)
// The sink completes every work request at once and records nothing here.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"
#include "verbs/sink.hpp"
#include "verbs/verbs.hpp"
#include "verbs/verbs_backend.hpp"

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

using namespace gv;
namespace v = gv::detail::verbs;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
    std::string device;  // empty: the sink
    int gid_index = -1;
    bool baseline = false;
    uint32_t proxy_threads = 1;
    uint32_t qps = 8;
    uint32_t wqes = 4096;
    uint32_t rounds = 5;
    std::string posters = "prefill";
    uint32_t batch = 32;
    double seconds = 2;
    uint32_t idle_sleep_us = 0;
    bool json = false;
};

const char* const kUsage =
    "usage: gv_proxy_rate [--sink | --device NAME [--gid-index N] [--baseline]] [--proxy-threads N]\n"
    "                     [--qps N] [--wqes N] [--rounds N] [--posters prefill|cpu|gpu|idle] [--batch N]\n"
    "                     [--seconds S] [--idle-sleep-us N] [--json]\n"
    "How many WQEs per second the verbs proxy reads, translates and posts (docs/verbs.md).\n"
    "  --sink              into the sink: no device, work completed at once (default)\n"
    "  --device NAME       into that RDMA device (rxe0 in the Soft-RoCE VM); --gid-index picks its GID\n"
    "  --baseline          also post the same work with ibv_post_send directly (needs --device)\n"
    "  --proxy-threads N   proxy threads (1)          --qps N       QPs, in connected pairs (8)\n"
    "  --wqes N            WQEs per QP per round, and its ring (4096)   --rounds N   rounds (5)\n"
    "  --posters prefill   the rings filled, then every doorbell at once: the proxy alone (default)\n"
    "  --posters cpu       a CPU thread per QP posting batches of --batch for --seconds\n"
    "  --posters gpu       a block of 256 threads per QP (CUDA builds, a GPU)\n"
    "  --posters idle      nothing posted for --seconds: the CPU an idle proxy thread uses\n"
    "  --idle-sleep-us N   VerbsOptions::max_idle_sleep_us (0: busy-poll, the default here)\n"
    "  --json              one JSON line\n";

Args parse(gvcli::Args& args) {
    Args a;
    while (args.next()) {
        if (args.is("--sink")) a.device.clear();
        else if (args.is("--device")) a.device = args.value();
        else if (args.is("--gid-index")) a.gid_index = int(args.integer(0, 255));
        else if (args.is("--baseline")) a.baseline = true;
        else if (args.is("--proxy-threads")) a.proxy_threads = uint32_t(args.integer(1, 64));
        else if (args.is("--qps")) a.qps = uint32_t(args.integer(1, 1024));
        else if (args.is("--wqes")) a.wqes = uint32_t(args.integer(32, 16384));
        else if (args.is("--rounds")) a.rounds = uint32_t(args.integer(1, 100000));
        else if (args.is("--posters")) a.posters = args.one_of({"prefill", "cpu", "gpu", "idle"});
        else if (args.is("--batch")) a.batch = uint32_t(args.integer(1, 4096));
        else if (args.is("--seconds")) a.seconds = args.number(0, 600);
        else if (args.is("--idle-sleep-us")) a.idle_sleep_us = uint32_t(args.integer(0, 1000000));
        else if (args.is("--json")) a.json = true;
        else args.unknown();
    }
    if (a.baseline && a.device.empty())
        throw gvcli::UsageError("--baseline needs --device (it posts to the device directly)");
    return a;
}

double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

/// Completions each QP's CQ holds.
constexpr uint32_t kCqDepth = 1024;

/// QPs in connected pairs (each WRITEs 8 bytes into its peer's buffer) on one context.
struct Setup {
    Context ctx;
    ProtectionDomain pd;
    std::vector<std::unique_ptr<CompletionQueue>> cq;
    std::vector<std::unique_ptr<QueuePair>> qp;
    std::vector<uint8_t> host;
    std::unique_ptr<MemoryRegion> mr;
    Setup(Context c, const Args& a, int gpu) : ctx(std::move(c)), pd(ctx), host(size_t(a.qps) * 4096 + 4096) {
        (void)gpu;
        for (uint32_t i = 0; i < a.qps + (a.qps & 1); ++i) {
            cq.push_back(std::make_unique<CompletionQueue>(ctx, CqOptions{kCqDepth}));
            QpOptions o;
            o.send_cq = o.recv_cq = cq.back().get();
            o.sq_depth = a.wqes;
            o.rq_depth = 16;
            o.max_inline = 0;  // 8-byte WRITEs of one WQEBB: the ring holds --wqes of them
            qp.push_back(std::make_unique<QueuePair>(pd, o));
        }
        for (size_t i = 0; i < qp.size(); ++i) qp[i]->connect(qp[i ^ 1]->endpoint());
        mr = std::make_unique<MemoryRegion>(pd, host.data(), host.size(), kAllAccess);
    }
    dev::QpHandle h(uint32_t i) const { return qp[i]->device_handle(); }
    uint64_t dst(uint32_t i) const { return mr->remote().addr + 4096 * uint64_t(i ^ 1); }
};

/// Waits for the next completion of QP i (handle h: the poster's own, so that the timed loop
/// builds no handle and allocates nothing per wait); it must succeed.
void wait(const dev::QpHandle& h, uint32_t i) {
    Completion c{};
    const Status st = dev::wait_send(h, 1, &c, 60'000'000'000ull);
    if (st != Status::Ok)
        throw CompletionError(std::string("QP ") + std::to_string(i) + ": " + status_name(st) + " (" +
                                  mlx5::syndrome_name(c.status) + ")",
                              c.status);
}

struct Result {
    double seconds = 0;
    uint64_t wqes = 0;
    v::ProxyStats stats;
};

Result run_prefill(Setup& s, const Args& a) {
    Result r;
    v::Proxy* px = v::proxy_of(s.ctx);
    const v::ProxyStats before = px->stats();
    for (uint32_t round = 0; round < a.rounds; ++round) {
        for (uint32_t i = 0; i < a.qps; ++i) {
            const dev::QpHandle h = s.h(i);
            for (uint32_t k = 0; k < a.wqes; ++k) {
                // Posted without a doorbell: the proxy sees none of it yet.
                const Status st =
                    dev::write(h, s.host.data() + 4096 * i, 8, s.mr->lkey(), s.dst(i) + 8 * (k & 63),
                               s.mr->rkey(), k + 1 == a.wqes ? kSignaled : 0);
                if (st != Status::Ok) throw Error(std::string("posting: ") + status_name(st));
            }
        }
        const auto t0 = Clock::now();
        for (uint32_t i = 0; i < a.qps; ++i) dev::commit(s.h(i));
        for (uint32_t i = 0; i < a.qps; ++i) wait(s.h(i), i);
        r.seconds += secs(t0, Clock::now());
        r.wqes += uint64_t(a.qps) * a.wqes;
    }
    const v::ProxyStats after = px->stats();
    r.stats.send_wqes = after.send_wqes - before.send_wqes;
    r.stats.send_wrs = after.send_wrs - before.send_wrs;
    r.stats.post_calls = after.post_calls - before.post_calls;
    r.stats.completions = after.completions - before.completions;
    r.stats.backpressure = after.backpressure - before.backpressure;
    return r;
}

Result run_cpu(Setup& s, const Args& a) {
    Result r;
    v::Proxy* px = v::proxy_of(s.ctx);
    const v::ProxyStats before = px->stats();
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> posted{0};
    std::vector<std::thread> t;
    // Batches in flight per QP: half the ring, and (each batch has one signaled WQE) half the CQ,
    // which holds kCqDepth completions (more in flight overran it with --batch 1 or 2).
    const uint32_t window = std::max(1u, std::min(a.wqes / a.batch / 2, kCqDepth / 2));
    const auto t0 = Clock::now();
    for (uint32_t i = 0; i < a.qps; ++i)
        t.emplace_back([&, i] {
            const dev::QpHandle h = s.h(i);
            uint64_t batches = 0, done = 0;
            while (!stop.load(std::memory_order_relaxed)) {
                for (uint32_t k = 0; k < a.batch; ++k)
                    dev::write(h, s.host.data() + 4096 * i, 8, s.mr->lkey(), s.dst(i) + 8 * (k & 63),
                               s.mr->rkey(), k + 1 == a.batch ? kSignaled : 0);
                dev::commit(h);
                ++batches;
                while (batches - done > window) {
                    wait(h, i);
                    ++done;
                }
            }
            while (done < batches) {
                wait(h, i);
                ++done;
            }
            posted += batches * a.batch;
        });
    std::this_thread::sleep_for(std::chrono::duration<double>(a.seconds));
    stop = true;
    for (auto& x : t) x.join();
    r.seconds = secs(t0, Clock::now());
    r.wqes = posted;
    const v::ProxyStats after = px->stats();
    r.stats.send_wqes = after.send_wqes - before.send_wqes;
    r.stats.send_wrs = after.send_wrs - before.send_wrs;
    r.stats.post_calls = after.post_calls - before.post_calls;
    r.stats.completions = after.completions - before.completions;
    r.stats.backpressure = after.backpressure - before.backpressure;
    return r;
}

#if defined(__CUDACC__)
struct GpuJob {
    dev::QpHandle qp;
    uint64_t laddr, raddr;
    uint32_t lkey, rkey;
};

// One block per QP: every thread posts one 8-byte WRITE per round (block scope: one
// reservation, one publication, one doorbell for the 256), the last thread's signaled; thread
// 0 keeps `window` rounds in flight by waiting for the completion of the round `window` back.
__global__ void post_kernel(const GpuJob* jobs, uint32_t rounds, uint32_t window, int* errors) {
    const GpuJob& j = jobs[blockIdx.x];
    for (uint32_t r = 0; r < rounds; ++r) {
        const uint32_t f = threadIdx.x + 1 == blockDim.x ? kSignaled : 0;
        if (dev::write<Scope::Block>(j.qp, reinterpret_cast<const void*>(j.laddr), 8, j.lkey,
                                     j.raddr + 8 * (threadIdx.x & 63), j.rkey, f) != Status::Ok)
            atomicAdd(errors, 1);
        dev::commit<Scope::Block>(j.qp);
        if (threadIdx.x == 0 && r >= window) {
            Completion c;
            if (dev::wait_send(j.qp, 1, &c) != Status::Ok) atomicAdd(errors, 1);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        Completion c[64];
        uint32_t left = rounds < window ? rounds : window;
        while (left) {
            const uint32_t n = left < 64 ? left : 64;
            if (dev::wait_send(j.qp, n, c) != Status::Ok) atomicAdd(errors, 1);
            left -= n;
        }
    }
}

Result run_gpu(Setup& s, const Args& a) {
    Result r;
    v::Proxy* px = v::proxy_of(s.ctx);
    const v::ProxyStats before = px->stats();
    std::vector<GpuJob> jobs(a.qps);
    for (uint32_t i = 0; i < a.qps; ++i)
        jobs[i] = {s.h(i), reinterpret_cast<uint64_t>(s.host.data() + 4096 * i), s.dst(i), s.mr->lkey(),
                   s.mr->rkey()};
    GpuJob* d_jobs = nullptr;
    int* d_err = nullptr;
    cudaMalloc(&d_jobs, sizeof(GpuJob) * a.qps);
    cudaMalloc(&d_err, sizeof(int));
    cudaMemcpy(d_jobs, jobs.data(), sizeof(GpuJob) * a.qps, cudaMemcpyHostToDevice);
    cudaMemset(d_err, 0, sizeof(int));
    const uint32_t rounds = std::max(1u, a.rounds * (a.wqes / 256));
    const uint32_t window = std::max(1u, a.wqes / 256 / 2);
    const auto t0 = Clock::now();
    post_kernel<<<a.qps, 256>>>(d_jobs, rounds, window, d_err);
    const cudaError_t e = cudaDeviceSynchronize();
    r.seconds = secs(t0, Clock::now());
    int errors = 0;
    cudaMemcpy(&errors, d_err, sizeof(int), cudaMemcpyDeviceToHost);
    cudaFree(d_jobs);
    cudaFree(d_err);
    if (e != cudaSuccess) throw Error(std::string("kernel: ") + cudaGetErrorString(e));
    if (errors) throw Error(std::to_string(errors) + " posts or waits failed in the kernel");
    r.wqes = uint64_t(a.qps) * rounds * 256;
    const v::ProxyStats after = px->stats();
    r.stats.send_wqes = after.send_wqes - before.send_wqes;
    r.stats.send_wrs = after.send_wrs - before.send_wrs;
    r.stats.post_calls = after.post_calls - before.post_calls;
    r.stats.completions = after.completions - before.completions;
    r.stats.backpressure = after.backpressure - before.backpressure;
    return r;
}
#endif

/// The same work posted with ibv_post_send on plain verbs QPs (lists of 32, the last of each
/// signaled, as the proxy posts them), for the ratio.
double baseline(const Args& a, uint64_t* wrs) {
    v::Device dev(a.device);
    v::Pd pd(dev);
    const uint32_t depth = std::min<uint32_t>(a.wqes, dev.caps().max_qp_wr);
    std::vector<std::unique_ptr<v::Cq>> cq;
    std::vector<std::unique_ptr<v::RcQp>> qp;
    v::QpConfig cfg;
    cfg.sq_depth = depth;
    cfg.rq_depth = 16;
    cfg.gid_index = a.gid_index;
    const uint32_t n = a.qps + (a.qps & 1);
    for (uint32_t i = 0; i < n; ++i) {
        cq.push_back(std::make_unique<v::Cq>(dev, int(depth + 16)));
        qp.push_back(std::make_unique<v::RcQp>(dev, pd, *cq.back(), *cq.back(), cfg));
    }
    for (uint32_t i = 0; i < n; ++i) qp[i]->connect(qp[i ^ 1]->endpoint());
    std::vector<uint8_t> host(size_t(n) * 4096);
    v::Mr mr = v::Mr::host(pd, host.data(), host.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    const uint64_t base = reinterpret_cast<uint64_t>(host.data());
    std::vector<ibv_send_wr> wr(32);
    std::vector<ibv_sge> sge(32);
    double total = 0;
    *wrs = 0;
    for (uint32_t round = 0; round < a.rounds; ++round) {
        std::vector<uint32_t> left(a.qps, a.wqes), inflight(a.qps, 0);
        const auto t0 = Clock::now();
        bool busy = true;
        while (busy) {
            busy = false;
            for (uint32_t i = 0; i < a.qps; ++i) {
                ibv_wc wc[16];
                const int got = cq[i]->poll(wc, 16);
                for (int k = 0; k < got; ++k) {
                    if (wc[k].status != IBV_WC_SUCCESS)
                        throw Error(std::string("baseline: ") + v::wc_status_name(wc[k].status));
                    inflight[i] -= uint32_t(wc[k].wr_id);  // a list's size
                }
                if (left[i] || inflight[i]) busy = true;
                const uint32_t k = std::min<uint32_t>({32u, left[i], depth - inflight[i]});
                if (!k) continue;
                for (uint32_t j = 0; j < k; ++j) {
                    sge[j] = {base + 4096 * i, 8, mr.lkey()};
                    wr[j] = ibv_send_wr{};
                    wr[j].wr_id = k;
                    wr[j].sg_list = &sge[j];
                    wr[j].num_sge = 1;
                    wr[j].opcode = IBV_WR_RDMA_WRITE;
                    wr[j].send_flags = j + 1 == k ? IBV_SEND_SIGNALED : 0;
                    wr[j].wr.rdma.remote_addr = base + 4096 * (i ^ 1) + 8 * (j & 63);
                    wr[j].wr.rdma.rkey = mr.rkey();
                    wr[j].next = j + 1 < k ? &wr[j + 1] : nullptr;
                }
                ibv_send_wr* bad = nullptr;
                if (int rc = ibv_post_send(qp[i]->get(), wr.data(), &bad))
                    throw Error("baseline: ibv_post_send: " + v::errno_text(rc));
                left[i] -= k;
                inflight[i] += k;
                *wrs += k;
            }
        }
        total += secs(t0, Clock::now());
    }
    return total;
}

}  // namespace

int main(int argc, char** argv) {
    return gvcli::run(argc, argv, kUsage, [](gvcli::Args& args) -> int {
        const Args a = parse(args);
        {
            VerbsOptions vo;
            vo.proxy_threads = a.proxy_threads;
            vo.gid_index = a.gid_index;
            vo.max_idle_sleep_us = a.idle_sleep_us;  // default 0: busy-poll (a rate, not an idle cost)
            int gpu = -1;
            if (a.posters == "gpu") {
#if defined(__CUDACC__)
                const std::string why = gvcli::no_gpu_reason();
                if (!why.empty()) throw NotSupported("--posters gpu: " + why);
                if (Context::gpu_count() == 0) throw NotSupported("--posters gpu: no CUDA GPU visible");
                gpu = 0;
#else
            throw NotSupported("--posters gpu: this build has no CUDA (configure with nvcc found)");
#endif
            }
            Context ctx = [&] {
                if (a.device.empty()) {
                    v::SinkOptions so;
                    so.record = false;
                    return v::open_sink_context(std::make_shared<v::SinkDevice>(so), vo, gpu);
                }
                ContextOptions co;
                co.backend = Backend::Verbs;
                co.gpu = gpu;
                co.device = a.device;
                co.verbs = vo;
                return Context(co);
            }();
            Result r;
            if (a.posters == "idle") {
                Setup s(ctx, a, gpu);
                auto cpu = [] {
                    rusage u{};
                    getrusage(RUSAGE_SELF, &u);
                    return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
                           1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
                };
                std::this_thread::sleep_for(std::chrono::milliseconds(200));  // past the spinning phase
                const double c0 = cpu();
                const auto t0 = Clock::now();
                const v::ProxyStats st0 = v::proxy_of(ctx)->stats();
                std::this_thread::sleep_for(std::chrono::duration<double>(a.seconds));
                const double wall = secs(t0, Clock::now()), used = cpu() - c0;
                const v::ProxyStats st1 = v::proxy_of(ctx)->stats();
                const double sleeps = double(st1.sleeps - st0.sleeps), turns = double(st1.loops - st0.loops);
                // Turns of the threads' loops: with --idle-sleep-us 0 (they never sleep) the time of
                // one turn over every QP of a thread, i.e. how late an idle thread sees new work.
                std::printf(
                    "idle: %u proxy thread(s), %u QPs, max idle sleep %u us: %.1f%% of a core, %.0f "
                    "wake-ups/s, %.0f turns of the loop/s (%.0f ns a turn)\n",
                    a.proxy_threads, a.qps, a.idle_sleep_us, 100.0 * used / wall, sleeps / wall, turns / wall,
                    turns > 0 ? used * 1e9 / turns : 0.0);
                return 0;
            }
            {
                Setup s(ctx, a, gpu);
                if (a.posters == "prefill") r = run_prefill(s, a);
                else if (a.posters == "cpu") r = run_cpu(s, a);
#if defined(__CUDACC__)
                else r = run_gpu(s, a);
#endif
            }
            const double rate = double(r.wqes) / r.seconds;
            double base_rate = 0;
            uint64_t base_wrs = 0;
            if (a.baseline) base_rate = double(a.rounds) * a.qps * a.wqes / baseline(a, &base_wrs);
            const std::string target = a.device.empty() ? "sink" : a.device;
            if (a.json) {
                std::printf(
                    "{\"tool\":\"gv_proxy_rate\",\"target\":\"%s\",\"posters\":\"%s\",\"proxy_threads\":%u,"
                    "\"qps\":%u,"
                    "\"wqes\":%llu,\"seconds\":%.6f,\"wqe_per_s\":%.0f,\"work_requests\":%llu,\"post_calls\":"
                    "%llu,"
                    "\"completions\":%llu,\"backpressure\":%llu,\"baseline_wqe_per_s\":%.0f}\n",
                    target.c_str(), a.posters.c_str(), a.proxy_threads, a.qps, (unsigned long long)r.wqes,
                    r.seconds, rate, (unsigned long long)r.stats.send_wrs,
                    (unsigned long long)r.stats.post_calls, (unsigned long long)r.stats.completions,
                    (unsigned long long)r.stats.backpressure, base_rate);
            } else {
                std::printf("# gv_proxy_rate: %s, posters %s, %u proxy thread(s), %u QPs\n", target.c_str(),
                            a.posters.c_str(), a.proxy_threads, a.qps);
                std::printf("%-12s %-10s %-14s %-12s %-12s %-12s\n", "WQEs", "seconds", "WQE/s", "lists",
                            "WRs/list", "completions");
                std::printf("%-12llu %-10.4f %-14.0f %-12llu %-12.1f %-12llu\n", (unsigned long long)r.wqes,
                            r.seconds, rate, (unsigned long long)r.stats.post_calls,
                            r.stats.post_calls ? double(r.stats.send_wrs) / double(r.stats.post_calls) : 0.0,
                            (unsigned long long)r.stats.completions);
                if (a.baseline)
                    std::printf(
                        "baseline (ibv_post_send directly, lists of 32): %.0f WQE/s; proxy / direct = %.3f\n",
                        base_rate, rate / base_rate);
            }
            return 0;
        }
    });
}
