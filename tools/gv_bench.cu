// gv_write_bw / gv_read_bw / gv_send_bw / gv_write_lat: perftest's experiments with the
// work requests posted by CUDA kernels (or, --initiator cpu, by CPU threads), executed by
// the software RDMA device, the mlx5 backend on a ConnectX, or (--device NAME of another RDMA
// device, e.g. rxe0) the verbs backend's proxy with CPU initiators.
//
// Bandwidth: one QP per CUDA block; every thread posts one WQE (a post list of --threads
// WQEs, the last one signaled), the block commits together, thread 0 waits for the
// completion: perftest's ib_write_bw shape. Latency: two blocks ping-pong 8-byte writes.
// CPU initiators on a CPU-only context (the verbs backend, or any device in a build without
// CUDA, where this file compiles as C++): gv_bench_cpu.hpp.
//
// Modes: without a HOST, loopback between QP pairs of one process. With --server / --client
// HOST (or a bare HOST), two processes on this host, as perftest runs: the client is the
// initiator (posts, measures, prints); the server provides the target buffers (gv::SharedBuffer),
// posts and consumes the receives of send_bw and answers write_lat's ping-pong. The client
// sends its options to the server (tools/gv_bench_wire.hpp describes the conversation).
// Two-process mode with GPU initiators needs CUDA; with CPU initiators (every test on a verbs
// device such as rxe0, or on any device in a build without CUDA) it runs without:
// gv_bench_cpu_two_process.hpp.
#if defined(__CUDACC__)
#include <cuda_runtime.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bench_failure.hpp"
#include "cli.hpp"
#include "device_option.hpp"
#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"
#include "gpuverbs/oob.hpp"
#include "gpuverbs/shared_buffer.hpp"
#include "gv_bench_wire.hpp"
#include "msg_offset.hpp"
#if defined(__CUDACC__)
#include "bench_common.hpp"
#include "gpuverbs/mps.hpp"
#endif

using namespace gv;
using gvbench::Failure;
using gvbench::record_failure;
using gvbench::Step;

#include "gv_bench_host.hpp"
#include "gv_bench_cpu.hpp"
#include "gv_bench_session.hpp"
#include "gv_bench_cpu_two_process.hpp"

#if defined(__CUDACC__)
using gvbench::Buffer;
using gvbench::Event;
using gvbench::Mem;

#include "gv_bench_core.cuh"

namespace {

// ---- loopback: QP pairs of one process ----------------------------------------------------------

/// send_bw in one process on one GPU launches a block of senders and a block of receivers per QP
/// in one grid, and a sender waits for completions that only its receiver's receives let come:
/// a grid larger than what the GPU runs at once left receivers unscheduled behind senders that
/// waited for them, and every run failed after the 20 s wait ("waiting for the completion of
/// SEND #511: Timeout", -q 264 -t 512 on an H200, which runs one such block per SM). Refused
/// before anything starts, saying what fits. (Two GPUs, --peer-gpu, run the receivers in a grid
/// of their own on the peer; two processes likewise.)
void check_send_grid_fits(const Opts& o, int gpu) {
    int per_sm = 0, sms = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, bw_kernel<false>, int(o.threads), 0));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, gpu));
    const uint64_t fits = uint64_t(per_sm) * uint64_t(sms), need = 2ull * o.qps;
    if (need <= fits) return;
    const std::string t = std::to_string(o.threads);
    throw gvcli::UsageError(
        "-q " + std::to_string(o.qps) + " -t " + t + ": send_bw in one process runs a sender and a receiver block "
        "per QP, all at once (each sender waits for its receiver's receives), so it needs " + std::to_string(need) +
        " blocks of " + t + " threads running at once; " + gvbench::gpu_name(gpu) + " runs at most " +
        std::to_string(fits) + " of this kernel's (" + std::to_string(per_sm) + " per SM x " + std::to_string(sms) +
        " SMs). Use at most " + std::to_string(fits / 2) + " QPs at -t " + t +
        ", fewer threads per block, or two processes (--server and a client)");
}

int run_loopback(Opts& o) {
    gvbench::require_gpu();
    check_gpus(o);
    const int op = op_index(o.op);
    const bool xgpu = o.peer_gpu >= 0;
    CUDA_CHECK(cudaSetDevice(o.gpu));
    if (op == 2 && !o.lat && o.gpu_init && !xgpu) check_send_grid_fits(o, o.gpu);
    Context ctx(context_for(o));
    if (ctx.backend() != Backend::Soft) std::fprintf(stderr, "# %s: %s\n", ctx.name().c_str(), ctx.selection().c_str());
    ProtectionDomain pd(ctx);
    // --peer-gpu: the responder QPs (odd ones) and the target buffers belong to a context of
    // the peer's GPU; the requesters' executor moves bytes into that GPU's memory.
    std::optional<Context> pctx;
    std::optional<ProtectionDomain> ppd;
    if (xgpu) {
        Opts po = o;
        po.gpu = o.peer_gpu;
        pctx.emplace(context_for(po));
        ppd.emplace(*pctx);
    }
    const uint32_t nq = o.lat ? 1 : o.qps;
    MemoryKind qmem = o.gpu_init ? MemoryKind::Device : MemoryKind::Host;
    std::vector<std::unique_ptr<CompletionQueue>> cqs;
    std::vector<std::unique_ptr<QueuePair>> qps;
    for (uint32_t q = 0; q < 2 * nq; ++q)
        if (xgpu && (q & 1)) add_qp(*pctx, *ppd, o, qmem, cqs, qps);
        else add_qp(ctx, pd, o, qmem, cqs, qps);
    for (uint32_t q = 0; q < nq; ++q) {
        qps[2 * q]->connect(qps[2 * q + 1]->endpoint());
        qps[2 * q + 1]->connect(qps[2 * q]->endpoint());
    }
    const uint64_t slice = slice_bytes(o);
    uint64_t total = slice * nq;
    // Declared before the regions over them: the regions go first.
    const Mem bmem = o.host_mem ? Mem::HostMapped : Mem::Device;
    Buffer<uint8_t> src_buf(total, bmem);
    if (xgpu) CUDA_CHECK(cudaSetDevice(o.peer_gpu));
    Buffer<uint8_t> dst_buf(total, bmem);
    uint8_t *src = src_buf.get(), *dst = dst_buf.get();
    CUDA_CHECK(cudaMemset(dst, 0, total));
    CUDA_CHECK(cudaSetDevice(o.gpu));
    CUDA_CHECK(cudaMemset(src, 0x5a, total));
    MemoryRegion ms(pd, src, total, kAllAccess), md(xgpu ? *ppd : pd, dst, total, kAllAccess);
    std::vector<Job> jobs(nq);
    for (uint32_t q = 0; q < nq; ++q)
        jobs[q] = Job{qps[2 * q]->device_handle(), qps[2 * q + 1]->device_handle(), src + q * slice,
                      dst + q * slice, ms.lkey(), md.rkey(), md.lkey(), slice};
    Buffer<Job> d_jobs(jobs.size());
    CUDA_CHECK(cudaMemcpy(d_jobs.get(), jobs.data(), jobs.size() * sizeof(Job), cudaMemcpyHostToDevice));
    Buffer<Failure> d_fail(1);
    CUDA_CHECK(cudaMemset(d_fail.get(), 0, sizeof(Failure)));
    // --peer-gpu: what runs on the peer's GPU (the latency responder, send_bw's receivers) has
    // its own job list and failure record there.
    std::optional<Buffer<Job>> p_jobs;
    std::optional<Buffer<Failure>> p_fail;
    if (xgpu) {
        CUDA_CHECK(cudaSetDevice(o.peer_gpu));
        p_jobs.emplace(jobs.size());
        p_fail.emplace(1);
        CUDA_CHECK(cudaMemcpy(p_jobs->get(), jobs.data(), jobs.size() * sizeof(Job), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemset(p_fail->get(), 0, sizeof(Failure)));
        CUDA_CHECK(cudaSetDevice(o.gpu));
    }
    auto check_peer = [&](const char* who, uint32_t size, const std::string& run) {
        if (!xgpu) return;
        CUDA_CHECK(cudaSetDevice(o.peer_gpu));
        CUDA_CHECK(cudaDeviceSynchronize());
        const Failure f = gvbench::read_failure(p_fail->get());
        CUDA_CHECK(cudaSetDevice(o.gpu));
        if (f.count) throw Error(failure_text(o, who, size, run, f, qps));
    };
    const std::string gpu = gvbench::gpu_name(o.gpu) + peer_where(o);

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
            if (xgpu) {
                // The responder on the peer's GPU, the initiator on ours: each polls its own memory.
                CUDA_CHECK(cudaSetDevice(o.peer_gpu));
                launch_lat<1>(!o.separate_commit, 1, b, b, size, o.iters, nullptr, p_fail->get());
                CUDA_CHECK(cudaGetLastError());
                CUDA_CHECK(cudaSetDevice(o.gpu));
                launch_lat<0>(!o.separate_commit, 1, a, a, size, o.iters, d_st.get(), d_fail.get());
            } else {
                launch_lat<-1>(!o.separate_commit, 2, a, b, size, o.iters, d_st.get(), d_fail.get());
            }
            CUDA_CHECK(cudaGetLastError());
            CUDA_CHECK(cudaDeviceSynchronize());
            check_peer("the ping-pong responder", size, "");
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
                    if (xgpu && op == 2) {
                        // send_bw's receivers on the peer's GPU (every block receives), started first.
                        CUDA_CHECK(cudaSetDevice(o.peer_gpu));
                        bw_kernel<false><<<nq, o.threads>>>(p_jobs->get(), 0, op, size, o.iters, p_fail->get(),
                                                            o.rx_rounds);
                        CUDA_CHECK(cudaGetLastError());
                        CUDA_CHECK(cudaSetDevice(o.gpu));
                    }
                    // Between the two records nothing but the launch: their results are checked after.
                    const cudaError_t rec0 = cudaEventRecord(e0);
                    bw_kernel<false><<<op == 2 && !xgpu ? 2 * nq : nq, o.threads>>>(d_jobs.get(), nq, op, size,
                                                                                    o.iters, d_fail.get(), o.rx_rounds);
                    const cudaError_t rec1 = cudaEventRecord(e1);
                    CUDA_CHECK(rec0);
                    CUDA_CHECK(rec1);
                    CUDA_CHECK(cudaGetLastError());
                    CUDA_CHECK(cudaEventSynchronize(e1));
                    ms = gvbench::elapsed_ms(e0, e1);
                    const Failure f = gvbench::read_failure(d_fail.get());
                    if (f.count)
                        throw Error(failure_text(o, "the benchmark kernel", size, run_label(o, r), f, qps));
                    check_peer("the receivers' kernel", size, run_label(o, r));
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
                if (r == 0) scale_iters(o, ms / 1e3);  // -D
            }
            print_bw_row(o, nq, size, secs);
        }
    }
    return 0;
}

}  // namespace

#include "gv_bench_two_process.cuh"
#endif  // __CUDACC__

namespace {

#if defined(__CUDACC__)

// Two-process mode: what it needs is checked before listening or connecting, so a machine
// that cannot run it says so at once instead of after a client or a server came.
void check_two_process(const std::string& prog, const Opts& o) {
    const std::string no_gpu = gvcli::no_gpu_reason();
    if (!no_gpu.empty()) throw NotSupported(no_gpu + ": the benchmarks need a CUDA GPU");
    // Two processes whose kernels wait for each other on one GPU need MPS (without it the GPU
    // time-slices between them); this must come before the process's first CUDA call.
    // One process per GPU (--no-mps) needs no MPS: each GPU runs one process's context.
    if (!o.no_mps) {
        const std::string why = mps::ensure(true);
        if (!why.empty()) std::fprintf(stderr, "%s: warning: %s\n", prog.c_str(), why.c_str());
    }
    gvbench::require_gpu();
    check_gpus(o);
    if (gvbench::boot_id().empty())
        throw SystemError("cannot read /proc/sys/kernel/random/boot_id, which tells two processes of one host "
                          "apart from two hosts",
                          errno ? errno : ENOENT);
}

#endif  // __CUDACC__

int bench_main(gvcli::Args& args, const std::string& prog, const char* default_op, bool default_lat) {
    Opts o;
    o.op = default_op;
    o.lat = default_lat;
    while (args.next()) {
        auto num = [&](uint64_t lo, uint64_t hi) { return uint32_t(args.integer((long long)lo, (long long)hi)); };
        auto client_of = [&](const std::string& host) {
            if (o.mode == Mode::Server)
                throw gvcli::UsageError("--server takes no HOST (a HOST makes this the client): " + host);
            if (o.mode == Mode::Client) throw gvcli::UsageError("two HOSTs: " + o.host + " and " + host);
            if (host.empty()) throw gvcli::UsageError("an empty HOST: expected the server's address, e.g. 127.0.0.1");
            o.mode = Mode::Client;
            o.host = host;
        };
        if (args.is("-s", "--size")) {
            o.sizes = {num(1, 8u << 20)};
            o.given.insert("size");
        } else if (args.is("-a", "--all")) {
            o.sizes.clear();
            for (uint32_t z = 2; z <= (8u << 20); z *= 2) o.sizes.push_back(z);
            o.given.insert("size");
        } else if (args.is("-n", "--iters")) {
            o.iters = num(1, 100000000);
            o.given.insert("iters");
        } else if (args.is("-q", "--qps")) {
            o.qps = num(1, 4096);
            o.given.insert("qps");
        } else if (args.is("-t", "--threads") || args.is("-l", "--post-list")) {
            o.threads = num(1, 1024);
            o.given.insert("threads");
        } else if (args.is("--op")) {
            o.op = args.one_of({"write", "read", "send"});
        } else if (args.is("--initiator")) {
            o.gpu_init = args.one_of({"gpu", "cpu"}) == "gpu";
            o.given.insert("initiator");
        } else if (args.is("--mem")) {
            o.host_mem = args.one_of({"device", "host"}) == "host";
        } else if (args.is("--reps")) {
            o.reps = num(1, 100);
            o.given.insert("reps");
        } else if (args.is("-D", "--duration")) {
            o.duration = args.number(0, 3600);
            o.given.insert("duration");
        } else if (args.is("--report_gbits")) o.gbits = true;
        else if (args.is("--json")) o.json = true;
        else if (args.is("--lat")) o.lat = true;
        else if (args.is("--server")) {
            if (o.mode == Mode::Client) throw gvcli::UsageError("--server takes no HOST (a HOST makes this the client)");
            o.mode = Mode::Server;
        } else if (args.is("--client")) client_of(args.value());
        else if (args.is("--port")) o.port = uint16_t(num(0, 65535));
        else if (args.is("--timeout")) o.timeout_ms = int(num(1, 3600)) * 1000;
        else if (args.is("-d", "--device")) o.device = gvcli::device_value(args);
        else if (args.is("-x", "--gid-index")) o.gid_index = int(num(0, 255));
        else if (args.is("--proxy-idle-sleep-us")) o.proxy_idle_us = int(num(0, 100000));
        else if (args.is("--proxy-only")) o.proxy_only = true;
        else if (args.is("-I", "--inline-size")) {
            o.inline_size = int(num(0, gvbench::kMaxInline));
            o.given.insert("inline");
        } else if (args.is("--bind")) o.bind = args.value();
        else if (args.is("--gpu")) o.gpu = int(num(0, 1023));
        else if (args.is("--peer-gpu")) o.peer_gpu = int(num(0, 1023));
        else if (args.is("--no-mps")) o.no_mps = true;
        else if (args.is("--separate-commit")) o.separate_commit = true;
        else if (args.is("--rx-rounds")) {
            o.rx_rounds = num(1, 2);
            o.given.insert("rx_rounds");
        }
        else if (!args.is_option()) client_of(args.arg());
        else args.unknown();
    }
    if (o.lat && o.sizes.size() == 1 && o.sizes[0] == 65536) o.sizes = {8};
    if (o.given.count("rx_rounds") && o.mode == Mode::Client)
        throw gvcli::UsageError("--rx-rounds: the server's option (its kernel posts the receives of send_bw)");
    if (o.given.count("rx_rounds") && o.mode == Mode::Loopback && (o.op != "send" || o.lat))
        throw gvcli::UsageError("--rx-rounds: send_bw's receivers (--op send, bandwidth)");
    if (o.mode == Mode::Client && o.port == 0) throw gvcli::UsageError("--port 0: the client needs the server's port");
    if (o.peer_gpu >= 0 && o.peer_gpu == o.gpu)
        throw gvcli::UsageError("--peer-gpu " + std::to_string(o.peer_gpu) + " is this process's GPU (--gpu)");
    if (o.peer_gpu >= 0 && (o.host_mem || !o.gpu_init || o.device != "soft"))
        throw gvcli::UsageError("--peer-gpu: GPU-initiated runs of the software device on device memory only");
    if ((o.proxy_only || o.proxy_idle_us >= 0) && !verbs_device(o))
        throw gvcli::UsageError(std::string(o.proxy_only ? "--proxy-only" : "--proxy-idle-sleep-us") +
                                ": the verbs backend's proxy (a --device such as rxe0)");
    if (o.given.count("inline") && !o.lat)
        throw gvcli::UsageError("--inline-size: the latency test's option (gv_write_lat); the bandwidth tests "
                                "post from their buffers");
    if (!o.bind.empty() && (o.mode != Mode::Server || !verbs_device(o)))
        throw gvcli::UsageError("--bind " + o.bind + ": the listening address of a --server on a verbs --device "
                                "such as rxe0 (other servers listen on 127.0.0.1: the software device reaches "
                                "processes of this host only)");
#if defined(__CUDACC__)
    const bool cpu_only = verbs_device(o);
#else
    const bool cpu_only = true;  // no CUDA: CPU initiators on a CPU-only context, whatever the device
#endif
    if (cpu_only) {
        // The verbs backend (or, without CUDA, any device): CPU initiators on host memory, in
        // one process or in two (a --server and a client, every test, as perftest runs them).
        if (o.gpu_init && o.given.count("initiator"))
            throw gvcli::UsageError(verbs_device(o) ? "--initiator gpu: on --device " + o.device +
                                                          " (the verbs backend) this tool posts from CPU threads; "
                                                          "use --initiator cpu"
                                                    : "--initiator gpu: this build has no CUDA");
        if (o.peer_gpu >= 0 || o.gpu != 0)
            throw gvcli::UsageError(std::string(o.peer_gpu >= 0 ? "--peer-gpu" : "--gpu") +
                                    ": CPU initiators on host memory use no GPU (" +
                                    (verbs_device(o) ? "the verbs backend" : "this build has no CUDA") + ")");
        if (o.given.count("rx_rounds"))
            throw gvcli::UsageError("--rx-rounds: send_bw's GPU receivers (CPU receivers keep their receive "
                                    "queue full, reposting as each receive completes)");
        o.gpu_init = false;
        o.host_mem = true;
        if (o.mode == Mode::Server) return cpu_run_server(o, prog);
        if (o.mode == Mode::Client) return cpu_run_client(o);
        return run_cpu(o);
    }
    if (o.given.count("inline"))
        throw gvcli::UsageError("--inline-size: CPU initiators only (a verbs --device such as rxe0, or a build "
                                "without CUDA); kernels post from their buffers");
#if defined(__CUDACC__)
    if (o.gpu_init && !o.lat && o.threads > kMaxBlockThreads)
        throw gvcli::UsageError("--threads " + std::to_string(o.threads) + ": GPU initiators take at most " +
                                std::to_string(kMaxBlockThreads) +
                                " threads per block (the kernel is built with __launch_bounds__(" +
                                std::to_string(kMaxBlockThreads) +
                                ") so that it fits 128 registers a thread); up to 1024 with --initiator cpu");
    if (o.mode == Mode::Loopback) {
        if (!o.gpu_init && (op_index(o.op) == 2 || o.lat))
            throw gvcli::UsageError("--initiator cpu: supported by write_bw and read_bw only (on the software "
                                    "device and mlx5; every test on a verbs device such as rxe0)");
        return run_loopback(o);
    }
    if (o.device != "soft")
        throw gvcli::UsageError(
            "--device " + o.device +
            ": two-process runs with GPU initiators are the software "
            "device's (this tool has no GPU-initiated client/server over a ConnectX); run "
            "the loopback form (no HOST, no --server)");
    if (o.host_mem) throw gvcli::UsageError("--mem host: two-process buffers are GPU memory (gv::SharedBuffer)");
    if (!o.gpu_init) throw gvcli::UsageError("--initiator cpu: two-process mode is GPU-initiated only");
    if (o.mode == Mode::Server && o.peer_gpu >= 0)
        throw gvcli::UsageError("--peer-gpu is the client's (the server's GPU is its --gpu)");
    check_two_process(prog, o);
    return o.mode == Mode::Server ? run_server(o, prog) : run_client(o);
#else
    return 1;  // not reached: without CUDA every run is cpu_only
#endif
}

}  // namespace

/// The four tools' entry (gv_bench_main.cpp): default_op "write", "read" or "send"; default_lat
/// true for gv_write_lat.
int gv_bench_tool_main(int argc, char** argv, const char* default_op, bool default_lat) {
    const std::string prog = gvcli::program_name(argc > 0 ? argv[0] : nullptr);
    return gvcli::run(argc, argv, usage(prog),
                      [&](gvcli::Args& args) { return bench_main(args, prog, default_op, default_lat); });
}
