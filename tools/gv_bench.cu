// gv_write_bw / gv_read_bw / gv_send_bw / gv_write_lat: perftest's experiments with the
// work requests posted by CUDA kernels (or, --initiator cpu, by CPU threads), executed by
// the software RDMA device.
//
// Bandwidth: one QP per CUDA block; every thread posts one WQE (a post list of --threads
// WQEs, the last one signaled), the block commits together, thread 0 waits for the
// completion: perftest's ib_write_bw shape. Latency: two blocks ping-pong 8-byte writes.
//
// Modes: without a HOST, loopback between QP pairs of one process. With --server / --client
// HOST (or a bare HOST), two processes on this host, as perftest runs: the client is the
// initiator (posts, measures, prints); the server provides the target buffers (gv::SharedBuffer),
// posts and consumes the receives of send_bw and answers write_lat's ping-pong. The client
// sends its options to the server (tools/gv_bench_wire.hpp describes the conversation).
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"
#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"
#include "gpuverbs/mps.hpp"
#include "gpuverbs/oob.hpp"
#include "gpuverbs/shared_buffer.hpp"
#include "gv_bench_wire.hpp"

#ifndef GV_BENCH_DEFAULT_OP
#define GV_BENCH_DEFAULT_OP "write"
#endif
#ifndef GV_BENCH_DEFAULT_LAT
#define GV_BENCH_DEFAULT_LAT 0
#endif

using namespace gv;
using gvbench::Buffer;
using gvbench::Event;
using gvbench::Failure;
using gvbench::Mem;
using gvbench::record_failure;
using gvbench::Step;

#include "gv_bench_core.cuh"

namespace {

// ---- loopback: QP pairs of one process ----------------------------------------------------------

int run_loopback(Opts& o) {
    gvbench::require_gpu();
    const int op = op_index(o.op);
    if (!o.gpu_init && (op == 2 || o.lat))
        throw NotSupported("--initiator cpu supports write_bw and read_bw");
    Context ctx(context_for(o));
    if (ctx.backend() != Backend::Soft) std::fprintf(stderr, "# %s: %s\n", ctx.name().c_str(), ctx.selection().c_str());
    ProtectionDomain pd(ctx);
    const uint32_t nq = o.lat ? 1 : o.qps;
    MemoryKind qmem = o.gpu_init ? MemoryKind::Device : MemoryKind::Host;
    std::vector<std::unique_ptr<CompletionQueue>> cqs;
    std::vector<std::unique_ptr<QueuePair>> qps;
    for (uint32_t q = 0; q < 2 * nq; ++q) add_qp(ctx, pd, o, qmem, cqs, qps);
    for (uint32_t q = 0; q < nq; ++q) {
        qps[2 * q]->connect(qps[2 * q + 1]->endpoint());
        qps[2 * q + 1]->connect(qps[2 * q]->endpoint());
    }
    const uint64_t slice = slice_bytes(o);
    uint64_t total = slice * nq;
    // Declared before the regions over them: the regions go first.
    const Mem bmem = o.host_mem ? Mem::HostMapped : Mem::Device;
    Buffer<uint8_t> src_buf(total, bmem), dst_buf(total, bmem);
    uint8_t *src = src_buf.get(), *dst = dst_buf.get();
    CUDA_CHECK(cudaMemset(src, 0x5a, total));
    CUDA_CHECK(cudaMemset(dst, 0, total));
    MemoryRegion ms(pd, src, total, kAllAccess), md(pd, dst, total, kAllAccess);
    std::vector<Job> jobs(nq);
    for (uint32_t q = 0; q < nq; ++q)
        jobs[q] = Job{qps[2 * q]->device_handle(), qps[2 * q + 1]->device_handle(), src + q * slice,
                      dst + q * slice, ms.lkey(), md.rkey(), md.lkey(), slice};
    Buffer<Job> d_jobs(jobs.size());
    CUDA_CHECK(cudaMemcpy(d_jobs.get(), jobs.data(), jobs.size() * sizeof(Job), cudaMemcpyHostToDevice));
    Buffer<Failure> d_fail(1);
    CUDA_CHECK(cudaMemset(d_fail.get(), 0, sizeof(Failure)));
    const std::string gpu = gvbench::gpu_name();

    if (o.lat) {
        print_lat_header(o, gpu.c_str(), "");
        Buffer<unsigned long long> d_st(o.iters);
        for (uint32_t size : o.sizes) {
            size = std::max<uint32_t>(8, size & ~7u);
            if (size > 4096) continue;
            Job a = jobs[0];
            Job b{qps[1]->device_handle(), {}, dst, src, md.lkey(), ms.rkey(), 0, slice};
            CUDA_CHECK(cudaMemset(src, 0, slice));
            CUDA_CHECK(cudaMemset(dst, 0, slice));
            lat_kernel<-1><<<2, 32>>>(a, b, size, o.iters, d_st.get(), d_fail.get());
            CUDA_CHECK(cudaGetLastError());
            CUDA_CHECK(cudaDeviceSynchronize());
            const Failure f = gvbench::read_failure(d_fail.get());
            if (f.count) throw Error(failure_text(o, "the ping-pong kernel", size, "", f, qps));
            std::vector<unsigned long long> st(o.iters);
            CUDA_CHECK(cudaMemcpy(st.data(), d_st.get(), st.size() * 8, cudaMemcpyDeviceToHost));
            print_lat_row(o, size, st);
        }
    } else {
        print_bw_header(o, gpu.c_str(), nq, "");
        for (uint32_t size : o.sizes) {
            if (size > slice) continue;
            std::vector<double> secs;
            for (uint32_t r = 0; r <= o.reps; ++r) {  // rep 0 warms up
                auto t0 = std::chrono::steady_clock::now();
                float ms = 0;
                if (o.gpu_init) {
                    Event e0, e1;
                    // Between the two records nothing but the launch: their results are checked after.
                    const cudaError_t rec0 = cudaEventRecord(e0);
                    bw_kernel<false><<<op == 2 ? 2 * nq : nq, o.threads>>>(d_jobs.get(), nq, op, size,
                                                                           o.iters, d_fail.get());
                    const cudaError_t rec1 = cudaEventRecord(e1);
                    CUDA_CHECK(rec0);
                    CUDA_CHECK(rec1);
                    CUDA_CHECK(cudaGetLastError());
                    CUDA_CHECK(cudaEventSynchronize(e1));
                    ms = gvbench::elapsed_ms(e0, e1);
                    const Failure f = gvbench::read_failure(d_fail.get());
                    if (f.count)
                        throw Error(failure_text(o, "the benchmark kernel", size, run_label(o, r), f, qps));
                } else {
                    Failure f{};
                    std::vector<std::thread> th;
                    for (uint32_t q = 0; q < nq; ++q)
                        th.emplace_back(cpu_bw, std::cref(jobs[q]), q, op, size, o.iters, o.threads, &f);
                    for (auto& t : th) t.join();
                    CUDA_CHECK(cudaDeviceSynchronize());
                    ms = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - t0).count();
                    if (f.count)
                        throw Error(failure_text(o, "the CPU initiator", size, run_label(o, r), f, qps));
                }
                if (r) secs.push_back(ms / 1e3);
                if (r == 0 && o.duration > 0 && o.gpu_init && ms > 0) {
                    // -D: scale the iteration count so one repetition lasts `duration`.
                    double scale = o.duration * 1e3 / ms;
                    o.iters = uint32_t(std::min(1e8, std::max(1.0, o.iters * scale)));
                }
            }
            print_bw_row(o, nq, size, secs);
        }
    }
    return 0;
}

}  // namespace

#include "gv_bench_two_process.cuh"

int main(int argc, char** argv) {
    Opts o;
    const std::string prog = argv[0];
    return gvbench::guarded_main(prog.c_str(), [&] {
        for (int i = 1; i < argc; ++i) {
            std::string s = argv[i];
            auto val = [&]() -> std::string {
                if (i + 1 >= argc) throw InvalidUsage(s + " needs a value");
                return argv[++i];
            };
            auto num = [&](uint64_t lo, uint64_t hi) {
                return uint32_t(gvbench::parse_uint(s, val(), lo, hi));
            };
            auto client_of = [&](const std::string& host) {
                if (o.mode == Mode::Server)
                    throw InvalidUsage("--server takes no HOST (a HOST makes this the client)");
                if (o.mode == Mode::Client) throw InvalidUsage("two HOSTs: " + o.host + " and " + host);
                o.mode = Mode::Client;
                o.host = host;
            };
            if (s == "-s" || s == "--size") {
                o.sizes = {num(1, 8u << 20)};
                o.given.insert("size");
            } else if (s == "-a" || s == "--all") {
                o.sizes.clear();
                for (uint32_t z = 2; z <= (8u << 20); z *= 2) o.sizes.push_back(z);
                o.given.insert("size");
            } else if (s == "-n" || s == "--iters") {
                o.iters = num(1, 100000000);
                o.given.insert("iters");
            } else if (s == "-q" || s == "--qps") {
                o.qps = num(1, 4096);
                o.given.insert("qps");
            } else if (s == "-t" || s == "--threads" || s == "-l" || s == "--post-list") {
                o.threads = num(1, 1024);
                o.given.insert("threads");
            } else if (s == "--op") {
                o.op = val();
                if (o.op != "write" && o.op != "read" && o.op != "send")
                    throw InvalidUsage("--op " + o.op + ": expected write, read or send");
            } else if (s == "--initiator") {
                std::string v = val();
                if (v != "gpu" && v != "cpu")
                    throw InvalidUsage("--initiator " + v + ": expected gpu or cpu");
                o.gpu_init = v == "gpu";
            } else if (s == "--mem") {
                std::string v = val();
                if (v != "device" && v != "host")
                    throw InvalidUsage("--mem " + v + ": expected device or host");
                o.host_mem = v == "host";
            } else if (s == "--reps") {
                o.reps = num(1, 100);
                o.given.insert("reps");
            } else if (s == "-D" || s == "--duration") {
                std::string v = val();
                char* end;
                double d = std::strtod(v.c_str(), &end);
                if (*end || !(d > 0 && d <= 3600))
                    throw InvalidUsage(s + " " + v + ": expected seconds in (0, 3600]");
                o.duration = d;
                o.given.insert("duration");
            } else if (s == "--report_gbits") o.gbits = true;
            else if (s == "--json") o.json = true;
            else if (s == "--lat") o.lat = true;
            else if (s == "--server") {
                if (o.mode == Mode::Client)
                    throw InvalidUsage("--server takes no HOST (a HOST makes this the client)");
                o.mode = Mode::Server;
            } else if (s == "--client") client_of(val());
            else if (s == "--port") o.port = uint16_t(num(1, 65535));
            else if (s == "--timeout") o.timeout_ms = int(num(1, 3600)) * 1000;
            else if (s == "--device") o.device = val();
            else if (!s.empty() && s[0] != '-') client_of(s);
            else return usage(argv[0]);
        }
        if (o.lat && o.sizes.size() == 1 && o.sizes[0] == 65536) o.sizes = {8};
        if (o.mode == Mode::Loopback) return run_loopback(o);
        if (!o.device.empty() && o.device != "soft")
            throw InvalidUsage("--device " + o.device + ": two-process runs use the software device "
                               "(gv::SharedBuffer); run the loopback form (no HOST, no --server)");
        if (o.host_mem)
            throw InvalidUsage("--mem host: two-process buffers are GPU memory (gv::SharedBuffer)");
        if (!o.gpu_init) throw InvalidUsage("--initiator cpu: two-process mode is GPU-initiated only");
        // Two processes whose kernels wait for each other on one GPU need MPS (without it the
        // GPU time-slices between them); this must come before the process's first CUDA call.
        const std::string why = mps::ensure(true);
        if (!why.empty()) std::fprintf(stderr, "%s: warning: %s\n", prog.c_str(), why.c_str());
        return o.mode == Mode::Server ? run_server(o, prog) : run_client(o);
    });
}
