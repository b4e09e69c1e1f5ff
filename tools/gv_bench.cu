// gv_write_bw / gv_read_bw / gv_send_bw / gv_write_lat: perftest's experiments with the
// work requests posted by CUDA kernels (or, --initiator cpu, by CPU threads), executed by
// the software RDMA device, in one process (loopback between QP pairs).
//
// Bandwidth: one QP per CUDA block; every thread posts one WQE (a post list of --threads
// WQEs, the last one signaled), the block commits together, thread 0 waits for the
// completion: perftest's ib_write_bw shape. Latency: two blocks ping-pong 8-byte writes.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"

#ifndef GV_BENCH_DEFAULT_OP
#define GV_BENCH_DEFAULT_OP "write"
#endif
#ifndef GV_BENCH_DEFAULT_LAT
#define GV_BENCH_DEFAULT_LAT 0
#endif

using namespace gv;

namespace {

#define CK(call)                                                                           \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) throw CudaError(std::string(#call) + ": " + cudaGetErrorString(e_), e_); \
    } while (0)

struct Opts {
    std::string op = GV_BENCH_DEFAULT_OP;
    bool lat = GV_BENCH_DEFAULT_LAT;
    std::vector<uint32_t> sizes{65536};
    uint32_t iters = 1000;  // WQEs per QP (bw) or round trips (lat)
    uint32_t qps = 1;
    uint32_t threads = 256;  // post list = WQEs per commit
    bool gpu_init = true;
    bool host_mem = false;
    bool json = false;
    bool gbits = false;
    uint32_t reps = 3;
    double duration = 0;  // -D: seconds per measurement (iterations scaled to fill it)
};

int usage(const char* me) {
    std::fprintf(stderr,
                 "usage: %s [options]\n"
                 "  -s, --size BYTES      message size (default 65536)\n"
                 "  -a, --all             all sizes 2 B .. 8 MiB\n"
                 "  -n, --iters N         WQEs per QP (bandwidth) or round trips (latency)\n"
                 "  -q, --qps N           QPs, one CUDA block each (default 1)\n"
                 "  -t, --threads N       threads per block = WQEs per commit (post list), 1..1024\n"
                 "  -l, --post-list N     same as --threads\n"
                 "      --op write|read|send\n"
                 "      --initiator gpu|cpu  who posts (default gpu)\n"
                 "      --mem device|host    where the buffers live (default device)\n"
                 "      --reps N          repetitions (peak = best, average = mean)\n"
                 "  -D, --duration SECS   scale the iterations so each repetition lasts about SECS\n"
                 "      --report_gbits    report Gb/s instead of GB/s\n"
                 "      --json            one JSON object per size\n",
                 me);
    return 2;
}

struct Job {
    dev::QpHandle qp;
    dev::QpHandle peer;  // send: the receiving QP
    uint8_t* src;
    uint8_t* dst;
    uint32_t lkey, rkey, dkey;
    uint64_t slice;  // bytes per QP in src and dst
};

__device__ __forceinline__ uint64_t off_of(uint32_t i, uint32_t size, uint64_t slice) {
    return (uint64_t(i) * size) % (slice - size + 1);
}

// op: 0 write, 1 read, 2 send. Blocks [0, Q) post; for send, blocks [Q, 2Q) receive.
__global__ void bw_kernel(const Job* jobs, uint32_t nq, int op, uint32_t size, uint32_t iters, int* err) {
    if (blockIdx.x >= nq) {  // receiver of a send_bw pair
        const Job& j = jobs[blockIdx.x - nq];
        for (uint32_t base = 0; base < iters; base += blockDim.x) {
            uint32_t n = min(blockDim.x, iters - base);
            if (threadIdx.x < n) {
                uint64_t off = off_of(base + threadIdx.x, size, j.slice);
                if (dev::recv(j.peer, j.dst + off, size, j.dkey) != Status::Ok) atomicAdd(err, 1);
            }
            __syncthreads();
            if (threadIdx.x == 0 && dev::wait_recv(j.peer, n, nullptr, 20'000'000'000ull) != Status::Ok)
                atomicAdd(err, 1);
            __syncthreads();
        }
        return;
    }
    const Job& j = jobs[blockIdx.x];
    for (uint32_t base = 0; base < iters; base += blockDim.x) {
        uint32_t n = min(blockDim.x, iters - base);
        uint32_t i = base + threadIdx.x;
        if (threadIdx.x < n) {
            uint64_t off = off_of(i, size, j.slice);
            uint32_t fl = threadIdx.x == n - 1 ? kSignaled : 0;
            Status st;
            if (op == 0) st = dev::write(j.qp, j.src + off, size, j.lkey, uint64_t(j.dst + off), j.rkey, fl);
            else if (op == 1) st = dev::read(j.qp, j.src + off, size, j.lkey, uint64_t(j.dst + off), j.rkey, fl);
            else st = dev::send(j.qp, j.src + off, size, j.lkey, fl);
            if (st != Status::Ok) atomicAdd(err, 1);
        }
        dev::commit<Scope::Block>(j.qp);
        if (threadIdx.x == 0 && dev::wait_send(j.qp, 1, nullptr, 20'000'000'000ull) != Status::Ok) atomicAdd(err, 1);
        __syncthreads();
    }
}

// Two blocks ping-pong: block 0 writes i to block 1's slot, block 1 waits and answers.
__global__ void lat_kernel(Job a, Job b, uint32_t size, uint32_t iters, unsigned long long* stamps, int* err) {
    const Job& me = blockIdx.x == 0 ? a : b;
    volatile uint64_t* mine = reinterpret_cast<uint64_t*>(me.src + 4096);  // where the peer's writes land
    uint64_t* out = reinterpret_cast<uint64_t*>(me.src);                    // what we send
    if (threadIdx.x != 0) return;
    for (uint32_t i = 1; i <= iters; ++i) {
        if (blockIdx.x == 1) {
            uint64_t t0 = atom::now_ns();
            while (atom::load_acquire(reinterpret_cast<uint64_t*>(const_cast<uint64_t*>(mine)) + (size / 8 - 1)) != i)
                if (atom::now_ns() - t0 > 5'000'000'000ull) { atomicAdd(err, 1); return; }
        } else {
            stamps[i - 1] = atom::now_ns();
        }
        out[size / 8 - 1] = i;
        dev::write(me.qp, out, size, me.lkey, uint64_t(me.dst + 4096), me.rkey, (i % 64) == 0 ? kSignaled : 0);
        dev::commit(me.qp);
        if (i % 64 == 0 && dev::wait_send(me.qp, 1, nullptr, 5'000'000'000ull) != Status::Ok) atomicAdd(err, 1);
        if (blockIdx.x == 0) {
            uint64_t t0 = atom::now_ns();
            while (atom::load_acquire(reinterpret_cast<uint64_t*>(const_cast<uint64_t*>(mine)) + (size / 8 - 1)) != i)
                if (atom::now_ns() - t0 > 5'000'000'000ull) { atomicAdd(err, 1); return; }
            stamps[i - 1] = atom::now_ns() - stamps[i - 1];
        }
    }
}

// CPU-initiated: post lists of `list` WQEs (the last one signaled), one doorbell per list,
// up to kCpuLists lists in flight (CQ moderation as perftest's tx-depth), polled without
// blocking the posting of the next list.
constexpr uint32_t kCpuLists = 4;

void cpu_bw(const Job& j, int op, uint32_t size, uint32_t iters, uint32_t list, int* err) {
    uint32_t outstanding = 0;
    auto reap = [&](bool block) {
        Completion c[kCpuLists];
        for (;;) {
            uint32_t k = dev::poll_cq(j.qp.scq, c, kCpuLists);
            for (uint32_t i = 0; i < k; ++i)
                if (!c[i].ok()) __atomic_add_fetch(err, 1, __ATOMIC_RELAXED);
            outstanding -= k;
            if (k || !block) return;
            std::this_thread::yield();
        }
    };
    for (uint32_t base = 0; base < iters; base += list) {
        uint32_t n = std::min(list, iters - base);
        while (outstanding >= kCpuLists) reap(true);
        for (uint32_t k = 0; k < n; ++k) {
            uint64_t off = (uint64_t(base + k) * size) % (j.slice - size + 1);
            uint32_t fl = k == n - 1 ? kSignaled : 0;
            Status st = op == 0 ? dev::write(j.qp, j.src + off, size, j.lkey, uint64_t(j.dst + off), j.rkey, fl)
                                : dev::read(j.qp, j.src + off, size, j.lkey, uint64_t(j.dst + off), j.rkey, fl);
            if (st != Status::Ok) __atomic_add_fetch(err, 1, __ATOMIC_RELAXED);
        }
        dev::commit(j.qp);
        ++outstanding;
        reap(false);
    }
    while (outstanding) reap(true);
}

double memcpy_ceiling(size_t bytes) {
    void *a, *b;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
    float best = 1e30f;
    for (int r = 0; r < 5; ++r) {
        cudaEventRecord(e0);
        cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        best = std::min(best, ms);
    }
    cudaFree(a);
    cudaFree(b);
    return bytes / (best / 1e3) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
    Opts o;
    std::string prog = argv[0];
    try {
        for (int i = 1; i < argc; ++i) {
            std::string s = argv[i];
            auto val = [&]() -> std::string {
                if (i + 1 >= argc) throw InvalidUsage(s + " needs a value");
                return argv[++i];
            };
            auto num = [&](uint64_t lo, uint64_t hi) {
                std::string v = val();
                char* end;
                unsigned long long x = std::strtoull(v.c_str(), &end, 10);
                if (*end || x < lo || x > hi)
                    throw InvalidUsage(s + " " + v + ": expected an integer in " + std::to_string(lo) + " .. " +
                                       std::to_string(hi));
                return uint32_t(x);
            };
            if (s == "-s" || s == "--size") o.sizes = {num(1, 8u << 20)};
            else if (s == "-a" || s == "--all") {
                o.sizes.clear();
                for (uint32_t z = 2; z <= (8u << 20); z *= 2) o.sizes.push_back(z);
            } else if (s == "-n" || s == "--iters") o.iters = num(1, 100000000);
            else if (s == "-q" || s == "--qps") o.qps = num(1, 4096);
            else if (s == "-t" || s == "--threads" || s == "-l" || s == "--post-list") o.threads = num(1, 1024);
            else if (s == "--op") {
                o.op = val();
                if (o.op != "write" && o.op != "read" && o.op != "send")
                    throw InvalidUsage("--op " + o.op + ": expected write, read or send");
            } else if (s == "--initiator") {
                std::string v = val();
                if (v != "gpu" && v != "cpu") throw InvalidUsage("--initiator " + v + ": expected gpu or cpu");
                o.gpu_init = v == "gpu";
            } else if (s == "--mem") {
                std::string v = val();
                if (v != "device" && v != "host") throw InvalidUsage("--mem " + v + ": expected device or host");
                o.host_mem = v == "host";
            } else if (s == "--reps") o.reps = num(1, 100);
            else if (s == "--report_gbits") o.gbits = true;
            else if (s == "--json") o.json = true;
            else if (s == "--lat") o.lat = true;
            else return usage(argv[0]);
        }
        if (o.lat && o.sizes.size() == 1 && o.sizes[0] == 65536) o.sizes = {8};
        if (Context::gpu_count() == 0) throw NotSupported("no CUDA GPU visible: the benchmarks need one");
        Context ctx(ContextOptions{Backend::Soft, 0});
        ProtectionDomain pd(ctx);
        const int op = o.op == "write" ? 0 : o.op == "read" ? 1 : 2;
        const uint32_t nq = o.lat ? 1 : o.qps;
        MemoryKind qmem = o.gpu_init ? MemoryKind::Device : MemoryKind::Host;
        std::vector<std::unique_ptr<CompletionQueue>> cqs;
        std::vector<std::unique_ptr<QueuePair>> qps;
        for (uint32_t q = 0; q < 2 * nq; ++q) {
            cqs.push_back(std::make_unique<CompletionQueue>(ctx, CqOptions{2048, qmem}));
            QpOptions qo;
            qo.send_cq = qo.recv_cq = cqs.back().get();
            qo.sq_depth = std::max<uint32_t>(o.threads * (o.gpu_init ? 1 : kCpuLists), 64);
            qo.rq_depth = std::max<uint32_t>(o.threads, 64);
            qo.memory = qmem;
            qps.push_back(std::make_unique<QueuePair>(pd, qo));
        }
        for (uint32_t q = 0; q < nq; ++q) {
            qps[2 * q]->connect(qps[2 * q + 1]->endpoint());
            qps[2 * q + 1]->connect(qps[2 * q]->endpoint());
        }
        uint32_t maxsize = *std::max_element(o.sizes.begin(), o.sizes.end());
        uint64_t slice = std::max<uint64_t>(uint64_t(maxsize) * std::min<uint32_t>(o.threads, 64), 8192);
        slice = std::min<uint64_t>(std::max<uint64_t>(slice, maxsize), 256ull << 20);
        uint64_t total = slice * nq;
        uint8_t *src, *dst;
        if (o.host_mem) {
            CK(cudaHostAlloc(&src, total, cudaHostAllocMapped));
            CK(cudaHostAlloc(&dst, total, cudaHostAllocMapped));
        } else {
            CK(cudaMalloc(&src, total));
            CK(cudaMalloc(&dst, total));
        }
        CK(cudaMemset(src, 0x5a, total));
        CK(cudaMemset(dst, 0, total));
        MemoryRegion ms(pd, src, total, kAllAccess), md(pd, dst, total, kAllAccess);
        std::vector<Job> jobs(nq);
        for (uint32_t q = 0; q < nq; ++q)
            jobs[q] = Job{qps[2 * q]->device_handle(), qps[2 * q + 1]->device_handle(), src + q * slice,
                          dst + q * slice, ms.lkey(), md.rkey(), md.lkey(), slice};
        Job* d_jobs;
        int* d_err;
        CK(cudaMalloc(&d_jobs, jobs.size() * sizeof(Job)));
        CK(cudaMemcpy(d_jobs, jobs.data(), jobs.size() * sizeof(Job), cudaMemcpyHostToDevice));
        CK(cudaMalloc(&d_err, sizeof(int)));
        CK(cudaMemset(d_err, 0, sizeof(int)));
        cudaDeviceProp prop;
        CK(cudaGetDeviceProperties(&prop, 0));
        const char* unit = o.gbits ? "Gb/s" : "GB/s";
        const double scale = o.gbits ? 8.0 : 1.0;

        if (o.lat) {
            if (!o.json)
                std::printf("# gv_%s_lat: %s, initiator gpu, %s memory, %u round trips\n"
                            "%10s %12s %10s %10s %10s %10s %10s %10s %10s\n",
                            o.op.c_str(), prop.name, o.host_mem ? "host" : "device", o.iters, "#bytes",
                            "#iterations", "t_min[us]", "t_max[us]", "t_typical", "t_avg[us]", "t_stdev", "99%", "99.9%");
            for (uint32_t size : o.sizes) {
                size = std::max<uint32_t>(8, size & ~7u);
                if (size > 4096) continue;
                unsigned long long* d_st;
                CK(cudaMalloc(&d_st, sizeof(unsigned long long) * o.iters));
                Job a = jobs[0];
                Job b{qps[1]->device_handle(), {}, dst, src, md.lkey(), ms.rkey(), 0, slice};
                CK(cudaMemset(src, 0, slice));
                CK(cudaMemset(dst, 0, slice));
                lat_kernel<<<2, 32>>>(a, b, size, o.iters, d_st, d_err);
                CK(cudaGetLastError());
                CK(cudaDeviceSynchronize());
                std::vector<unsigned long long> st(o.iters);
                CK(cudaMemcpy(st.data(), d_st, st.size() * 8, cudaMemcpyDeviceToHost));
                cudaFree(d_st);
                // One-way latency = round trip / 2, as perftest reports; skip warm-up.
                std::vector<double> us;
                for (uint32_t i = std::min<uint32_t>(o.iters / 10, 100); i < o.iters; ++i) us.push_back(st[i] / 2e3);
                std::sort(us.begin(), us.end());
                double avg = 0, var = 0;
                for (double v : us) avg += v;
                avg /= us.size();
                for (double v : us) var += (v - avg) * (v - avg);
                double sd = std::sqrt(var / us.size());
                auto pct = [&](double p) { return us[std::min<size_t>(us.size() - 1, size_t(p * us.size()))]; };
                if (o.json)
                    std::printf("{\"bench\":\"%s_lat\",\"bytes\":%u,\"iterations\":%zu,\"t_min\":%.3f,\"t_max\":%.3f,"
                                "\"t_typical\":%.3f,\"t_avg\":%.3f,\"t_stdev\":%.3f,\"p99\":%.3f,\"p999\":%.3f}\n",
                                o.op.c_str(), size, us.size(), us.front(), us.back(), pct(0.5), avg, sd, pct(0.99),
                                pct(0.999));
                else
                    std::printf("%10u %12zu %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f\n", size, us.size(),
                                us.front(), us.back(), pct(0.5), avg, sd, pct(0.99), pct(0.999));
            }
        } else {
            if (!o.json)
                std::printf("# gv_%s_bw: %s, initiator %s, %u QPs x %u threads (post list), %s memory\n"
                            "%10s %12s %14s %14s %14s %14s %10s\n",
                            o.op.c_str(), prop.name, o.gpu_init ? "gpu" : "cpu", nq, o.threads,
                            o.host_mem ? "host" : "device", "#bytes", "#iterations", (std::string("BW peak[") + unit + "]").c_str(),
                            (std::string("BW average[") + unit + "]").c_str(), "MsgRate[Mpps]", "ceiling[GB/s]", "%ceiling");
            for (uint32_t size : o.sizes) {
                if (size > slice) continue;
                std::vector<double> secs;
                for (uint32_t r = 0; r <= o.reps; ++r) {  // rep 0 warms up
                    auto t0 = std::chrono::steady_clock::now();
                    float ms = 0;
                    if (o.gpu_init) {
                        cudaEvent_t e0, e1;
                        cudaEventCreate(&e0);
                        cudaEventCreate(&e1);
                        cudaEventRecord(e0);
                        bw_kernel<<<op == 2 ? 2 * nq : nq, o.threads>>>(d_jobs, nq, op, size, o.iters, d_err);
                        cudaEventRecord(e1);
                        CK(cudaGetLastError());
                        CK(cudaEventSynchronize(e1));
                        cudaEventElapsedTime(&ms, e0, e1);
                        cudaEventDestroy(e0);
                        cudaEventDestroy(e1);
                    } else {
                        if (op == 2) throw NotSupported("--initiator cpu supports write and read");
                        int err = 0;
                        std::vector<std::thread> th;
                        for (auto& j : jobs) th.emplace_back(cpu_bw, std::cref(j), op, size, o.iters, o.threads, &err);
                        for (auto& t : th) t.join();
                        CK(cudaDeviceSynchronize());
                        ms = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - t0).count();
                        if (err) throw Error("cpu initiator: " + std::to_string(err) + " failed work requests");
                    }
                    if (r) secs.push_back(ms / 1e3);
                    if (r == 0 && o.duration > 0 && o.gpu_init && ms > 0) {
                        // -D: scale the iteration count so one repetition lasts `duration`.
                        double scale = o.duration * 1e3 / ms;
                        o.iters = uint32_t(std::min(1e8, std::max(1.0, o.iters * scale)));
                    }
                }
                int err = 0;
                CK(cudaMemcpy(&err, d_err, sizeof(int), cudaMemcpyDeviceToHost));
                if (err) throw Error(std::to_string(err) + " work requests or waits failed in the benchmark kernel");
                double bytes = double(size) * o.iters * nq;
                double best = *std::min_element(secs.begin(), secs.end());
                double mean = 0;
                for (double s : secs) mean += s;
                mean /= secs.size();
                double ceil = o.host_mem ? 0 : memcpy_ceiling(size_t(std::min<double>(bytes, 4e9)));
                double peak = bytes / best / 1e9, avg = bytes / mean / 1e9;
                double mpps = double(o.iters) * nq / mean / 1e6;
                if (o.json)
                    std::printf("{\"bench\":\"%s_bw\",\"initiator\":\"%s\",\"mem\":\"%s\",\"qps\":%u,\"threads\":%u,"
                                "\"bytes\":%u,\"iterations\":%u,\"bw_peak_GBps\":%.3f,\"bw_avg_GBps\":%.3f,"
                                "\"msg_rate_Mpps\":%.3f,\"memcpy_GBps\":%.1f}\n",
                                o.op.c_str(), o.gpu_init ? "gpu" : "cpu", o.host_mem ? "host" : "device", nq,
                                o.threads, size, o.iters, peak, avg, mpps, ceil);
                else
                    std::printf("%10u %12u %14.2f %14.2f %14.2f %14.1f %9.1f%%\n", size, o.iters, peak * scale,
                                avg * scale, mpps, ceil, ceil > 0 ? 100.0 * avg / ceil : 0.0);
            }
        }
        cudaFree(d_jobs);
        cudaFree(d_err);
        if (o.host_mem) {
            cudaFreeHost(src);
            cudaFreeHost(dst);
        } else {
            cudaFree(src);
            cudaFree(dst);
        }
        return 0;
    } catch (const Error& e) {
        std::fprintf(stderr, "%s: %s\n", prog.c_str(), e.what());
        return 1;
    }
}
