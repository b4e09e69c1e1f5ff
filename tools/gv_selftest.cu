// gv_selftest: a user's first run of the ConnectX (mlx5) backend. Two QPs of one ConnectX
// connected to each other (loopback); a kernel posts, rings and waits for each operation:
// RDMA WRITE, RDMA READ (with the read flush), SEND into a posted receive, fetch-add and
// compare-swap, put-with-signal; every byte is checked. One PASS / FAIL / SKIP line per
// operation and doorbell handler (gpu: kernels ring the UAR; cpu-proxy: a CPU thread rings
// it). Every wait is bounded; an error completion is decoded (syndrome, vendor syndrome, the
// likely cause).
//
// Exit status: 0 every operation passed; 1 one failed (or the run itself failed); 2 a bad
// command line; 77 skipped: no ConnectX, no GPU, or a build without CUDA (the line says
// which, and what a run needs). 77 is the "skipped" status of automake and ctest's
// SKIP_RETURN_CODE, so scripts tell "nothing to test here" from a failure.
//
// Built as gv_selftest_standin too (GV_SELFTEST_STANDIN): the same program over the stand-in
// NIC of the tests (the software executor behind a watched doorbell word), which is how it is
// tested on machines without a ConnectX.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"
#include "mlx5/report.hpp"

#if GV_HAVE_CUDA
#include <cuda_runtime.h>
#endif
#ifdef GV_SELFTEST_STANDIN
#include "mlx5/standin_nic.hpp"
#endif

using namespace gv;
namespace be = gv::detail::mlx5be;

namespace {

constexpr int kSkip = 77;
#ifdef GV_SELFTEST_STANDIN
const char* kProg = "gv_selftest_standin";
#else
const char* kProg = "gv_selftest";
#endif

const char* kUsage =
    "usage: gv_selftest [--device NAME] [--gpu N] [--handler auto|gpu|cpu-proxy|all] [--size BYTES]\n"
    "                   [--timeout-ms MS]\n"
    "\n"
    "The first run of gpuverbs' ConnectX (mlx5) backend on a machine: two QPs of one ConnectX\n"
    "connected in loopback, a CUDA kernel posting RDMA WRITE, READ, SEND, atomics and\n"
    "put-with-signal, ringing the doorbell and waiting (bounded) for each completion; every\n"
    "byte is checked. One PASS/FAIL/SKIP line per operation and doorbell handler.\n"
    "\n"
    "  --device NAME     the ConnectX (default: the first mlx5 device)\n"
    "  --gpu N           the GPU (default 0)\n"
    "  --handler H       doorbell handler(s): gpu, cpu-proxy, auto, or all (default: gpu and\n"
    "                    cpu-proxy; gpu is reported SKIP when the GPU cannot map the UAR)\n"
    "  --size BYTES      bytes per WRITE/READ/SEND (default 65536, at most 1 GiB)\n"
    "  --timeout-ms MS   bound of every wait (default 5000)\n"
    "  -h, --help        this text\n"
    "\n"
    "Exit status: 0 all passed; 1 something failed; 2 a bad command line; 77 skipped (no\n"
    "ConnectX, no GPU, or gpuverbs built without CUDA: the output says which and what is\n"
    "needed; gpuverbs_info lists what this machine has).\n";

struct Options {
    std::string device;
    int gpu = 0;
    std::string handler = "all";
    uint64_t size = 65536;
    uint64_t timeout_ms = 5000;
#ifdef GV_SELFTEST_STANDIN
    bool uar_unmappable = false;  // the stand-in reports a UAR the GPU cannot map
#endif
};

int skip(const std::string& why) {
    std::printf("%s: SKIP: %s\n", kProg, why.c_str());
    return kSkip;
}

#if GV_HAVE_CUDA

// ---- the kernels: one thread posts, commits, waits; results go to pinned host memory ----
enum class Op : int { Write, Read, Send, FetchAdd, CompareSwap, PutSignal };

struct Job {
    dev::QpHandle a, b;  // a posts; b receives (SEND)
    uint8_t* src;        // GPU memory
    uint8_t* dst;
    uint8_t* back;
    uint8_t* rbuf;
    uint64_t* word;      // GPU memory: the atomics' target; word[1] the signal
    uint64_t* old;       // GPU memory: the fetched values
    uint32_t lsrc, rdst, lback, lrbuf, rword, lold;
    uint32_t size;
    uint64_t timeout_ns;
};

struct Result {
    int post;      // Status of the posting calls
    int wait;      // Status of the send completion wait
    int recv;      // Status of the receive wait (SEND)
    int flush;     // Status of flush_gpu_writes (READ)
    uint32_t polled;
    Completion c[2];
    Completion rc;
    int done;
};

__global__ void op_kernel(Job j, Op op, Result* r) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    Status st = Status::Ok;
    switch (op) {
        case Op::Write: st = dev::write(j.a, j.src, j.size, j.lsrc, uint64_t(j.dst), j.rdst); break;
        case Op::Read: st = dev::read(j.a, j.back, j.size, j.lback, uint64_t(j.dst), j.rdst); break;
        case Op::Send:
            st = dev::recv(j.b, j.rbuf, j.size, j.lrbuf, j.timeout_ns);
            if (st == Status::Ok) st = dev::send(j.a, j.src, j.size, j.lsrc, kSignaled, j.timeout_ns);
            break;
        case Op::FetchAdd: st = dev::fetch_add(j.a, j.old, j.lold, uint64_t(j.word), j.rword, 5); break;
        case Op::CompareSwap:
            st = dev::compare_swap(j.a, j.old + 1, j.lold, uint64_t(j.word), j.rword, 47, 1234);
            break;
        case Op::PutSignal:
            st = dev::put_signal(j.a, j.src, j.size, j.lsrc, uint64_t(j.dst), j.rdst, j.old + 2, j.lold,
                                 uint64_t(j.word + 1), j.rword, 1);
            break;
    }
    r->post = int(st);
    if (st == Status::Ok) st = dev::commit(j.a);
    if (st != Status::Ok) {
        r->post = int(st);
        atom::store_release(&r->done, 1, true);
        return;
    }
    uint32_t got = 0;
    r->wait = int(dev::wait_send(j.a, 1, r->c, j.timeout_ns, &got));
    r->polled = got;
    if (op == Op::Send) r->recv = int(dev::wait_recv(j.b, 1, &r->rc, j.timeout_ns));
    // The consistency step before the data a NIC wrote into GPU memory is read.
    if (op == Op::Read || op == Op::Send) r->flush = int(dev::flush_gpu_writes(j.a, j.timeout_ns));
    atom::store_release(&r->done, 1, true);
}

// Fills GPU memory with a pattern from a seed (so the host can recompute it).
__global__ void fill_kernel(uint8_t* p, uint64_t n, uint32_t seed) {
    for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
        p[i] = uint8_t((i * 2654435761u + seed) >> 7);
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            throw std::runtime_error(std::string(#call) + " failed: " + cudaGetErrorString(e_)); \
    } while (0)

const char* op_name(Op o) {
    switch (o) {
        case Op::Write: return "RDMA WRITE";
        case Op::Read: return "RDMA READ";
        case Op::Send: return "SEND/RECV";
        case Op::FetchAdd: return "fetch-add";
        case Op::CompareSwap: return "compare-swap";
        case Op::PutSignal: return "put-with-signal";
    }
    return "?";
}

std::string describe_completion(const Completion& c) {
    char b[512];
    std::snprintf(b, sizeof b, "error completion %s (syndrome 0x%02x, vendor syndrome 0x%02x, QP 0x%x, WQE %u): %s",
                  mlx5::syndrome_name(c.status), c.status, c.vendor_err, c.qpn, c.wqe_counter,
                  be::likely_cause(c.status));
    return b;
}

std::string describe_status(const char* what, int st, uint32_t polled, uint64_t timeout_ms) {
    if (Status(st) == Status::Timeout)
        return std::string(what) + ": no completion within " + std::to_string(timeout_ms) + " ms (" +
               std::to_string(polled) + " polled): the NIC did not execute the WQE: the doorbell did not reach it "
               "(UAR mapping, doorbell record), or the QP is not in RTS";
    return std::string(what) + ": " + status_name(Status(st));
}

struct Counts {
    int pass = 0, fail = 0, skip = 0;
};

class Harness {
public:
    Harness(const Options& o, DoorbellHandler h, Counts& counts) : o_(o), h_(h), counts_(counts) {}

    void run() {
        const char* hn = doorbell_handler_name(h_);
        Context ctx = open();
        std::printf("  %s handler: %s\n", hn, ctx.selection().c_str());
        ProtectionDomain pd(ctx);
        CompletionQueue scq_a(ctx, CqOptions{64}), rcq_a(ctx, CqOptions{64});
        CompletionQueue scq_b(ctx, CqOptions{64}), rcq_b(ctx, CqOptions{64});
        QpOptions qo;
        qo.sq_depth = 16;
        qo.rq_depth = 16;
        qo.send_cq = &scq_a;
        qo.recv_cq = &rcq_a;
        QueuePair a(pd, qo);
        qo.send_cq = &scq_b;
        qo.recv_cq = &rcq_b;
        QueuePair b(pd, qo);
        a.connect(b.endpoint());
        b.connect(a.endpoint());

        const size_t n = o_.size;
        uint8_t *src, *dst, *back, *rbuf;
        uint64_t* words;
        CK(cudaMalloc(&src, n));
        CK(cudaMalloc(&dst, n));
        CK(cudaMalloc(&back, n));
        CK(cudaMalloc(&rbuf, n));
        CK(cudaMalloc(&words, 64));
        struct Free {
            void* p[5];
            ~Free() {
                for (void* x : p) cudaFree(x);
            }
        } free_all{{src, dst, back, rbuf, words}};
        MemoryRegion msrc(pd, src, n, kLocalWrite);
        MemoryRegion mdst(pd, dst, n, kAllAccess);
        MemoryRegion mback(pd, back, n, kLocalWrite);
        MemoryRegion mrbuf(pd, rbuf, n, kLocalWrite);
        MemoryRegion mwords(pd, words, 64, kAllAccess);

        Job j{};
        j.a = a.device_handle();
        j.b = b.device_handle();
        j.src = src;
        j.dst = dst;
        j.back = back;
        j.rbuf = rbuf;
        j.word = words;
        j.old = words + 4;
        j.lsrc = msrc.lkey();
        j.rdst = mdst.rkey();
        j.lback = mback.lkey();
        j.lrbuf = mrbuf.lkey();
        j.rword = mwords.rkey();
        j.lold = mwords.lkey();
        j.size = uint32_t(n);
        j.timeout_ns = o_.timeout_ms * 1000000ull;

        for (Op op : {Op::Write, Op::Read, Op::Send, Op::FetchAdd, Op::CompareSwap, Op::PutSignal}) {
            std::string why = run_op(j, op);
            report(op, why);
            if (!why.empty() && (a.state() == QpState::Error || b.state() == QpState::Error)) {
                // The QPs are in ERROR: what follows would only flush. Reconnect for the next one.
                a.reset();
                b.reset();
                a.connect(b.endpoint());
                b.connect(a.endpoint());
                j.a = a.device_handle();
                j.b = b.device_handle();
            }
        }
    }

private:
    Context open() {
#ifdef GV_SELFTEST_STANDIN
        gv::test::StandinOptions so;
        so.uar_mappable = !o_.uar_unmappable;
        if (o_.uar_unmappable)
            so.uar_map_error = "stand-in: cudaHostRegister(UAR page, Portable|Mapped|IoMemory) failed: "
                               "cudaErrorNotSupported (simulated)";
        so.gdr_writes_ordering = 0;  // exercise the flush READ
        Mlx5Options mo;
        mo.doorbell = h_;
        return gv::test::standin_context(o_.gpu, so, mo);
#else
        ContextOptions co;
        co.backend = Backend::Mlx5;
        co.gpu = o_.gpu;
        co.device = o_.device;
        co.mlx5.doorbell = h_;
        return Context(co);
#endif
    }

    /// Runs one operation: "" when it passed, else why not.
    std::string run_op(const Job& j, Op op) {
        const size_t n = o_.size;
        const uint32_t seed = uint32_t(op) * 7919u + 1;
        fill_kernel<<<64, 256>>>(j.src, n, seed);
        CK(cudaMemset(j.dst, 0, n));
        CK(cudaMemset(j.back, 0, n));
        CK(cudaMemset(j.rbuf, 0, n));
        CK(cudaMemset(j.word, 0, 64));
        if (op == Op::Read) fill_kernel<<<64, 256>>>(j.dst, n, seed);
        if (op == Op::CompareSwap) {
            uint64_t v = 47;
            CK(cudaMemcpy(j.word, &v, 8, cudaMemcpyHostToDevice));
        }
        if (op == Op::FetchAdd) {
            uint64_t v = 37;
            CK(cudaMemcpy(j.word, &v, 8, cudaMemcpyHostToDevice));
        }
        CK(cudaDeviceSynchronize());
        Result* r = nullptr;
        CK(cudaHostAlloc(&r, sizeof(Result), cudaHostAllocMapped));
        std::memset(r, 0, sizeof *r);
        struct FreeHost {
            Result* r;
            ~FreeHost() { cudaFreeHost(r); }
        } fr{r};
        const auto t0 = std::chrono::steady_clock::now();
        op_kernel<<<1, 32>>>(j, op, r);
        CK(cudaGetLastError());
        // The kernel bounds its own waits; this bounds the kernel (a doorbell store into a
        // page the GPU cannot reach could stall it): 4 waits of the timeout, and a margin.
        const auto limit = std::chrono::milliseconds(4 * o_.timeout_ms + 5000);
        while (cudaStreamQuery(0) == cudaErrorNotReady) {
            if (std::chrono::steady_clock::now() - t0 > limit) {
                std::printf("  FAIL %-16s (%s): the kernel did not return within %lld ms; stopping (a kernel cannot be "
                            "cancelled)\n",
                            op_name(op), doorbell_handler_name(h_), (long long)limit.count());
                std::fflush(stdout);
                std::_Exit(1);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        last_us_ = us;
        if (Status(r->post) != Status::Ok) return std::string("posting: ") + status_name(Status(r->post));
        if (Status(r->wait) == Status::CompletionError || (r->polled && !r->c[0].ok())) return describe_completion(r->c[0]);
        if (Status(r->wait) != Status::Ok) return describe_status("send completion", r->wait, r->polled, o_.timeout_ms);
        if (op == Op::Send) {
            if (Status(r->recv) == Status::CompletionError || !r->rc.ok()) return "receive: " + describe_completion(r->rc);
            if (Status(r->recv) != Status::Ok) return describe_status("receive completion", r->recv, 0, o_.timeout_ms);
            if (r->rc.byte_len != n) return "receive completion says " + std::to_string(r->rc.byte_len) + " bytes";
        }
        if ((op == Op::Read || op == Op::Send) && Status(r->flush) != Status::Ok)
            return std::string("flush READ: ") + status_name(Status(r->flush));
        // The bytes.
        std::vector<uint8_t> want(n), got(n);
        for (size_t i = 0; i < n; ++i) want[i] = uint8_t((i * 2654435761u + seed) >> 7);
        uint64_t w[8];
        CK(cudaMemcpy(w, j.word, 64, cudaMemcpyDeviceToHost));
        switch (op) {
            case Op::Write:
            case Op::PutSignal: CK(cudaMemcpy(got.data(), j.dst, n, cudaMemcpyDeviceToHost)); break;
            case Op::Read: CK(cudaMemcpy(got.data(), j.back, n, cudaMemcpyDeviceToHost)); break;
            case Op::Send: CK(cudaMemcpy(got.data(), j.rbuf, n, cudaMemcpyDeviceToHost)); break;
            default: got = want;
        }
        for (size_t i = 0; i < n; ++i)
            if (got[i] != want[i])
                return "byte " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " + std::to_string(want[i]);
        if (op == Op::FetchAdd && (w[0] != 42 || w[4] != 37))
            return "fetch-add: target " + std::to_string(w[0]) + " (expected 42), fetched " + std::to_string(w[4]) +
                   " (expected 37)";
        if (op == Op::CompareSwap && (w[0] != 1234 || w[5] != 47))
            return "compare-swap: target " + std::to_string(w[0]) + " (expected 1234), fetched " + std::to_string(w[5]) +
                   " (expected 47)";
        if (op == Op::PutSignal && w[1] != 1) return "put-with-signal: the signal is " + std::to_string(w[1]) + ", expected 1";
        return "";
    }

    void report(Op op, const std::string& why) {
        const char* hn = doorbell_handler_name(h_);
        if (why.empty()) {
            ++counts_.pass;
            std::printf("  PASS %-16s (%s handler) %llu bytes, %.0f us\n", op_name(op), hn,
                        (unsigned long long)(op == Op::FetchAdd || op == Op::CompareSwap ? 8 : o_.size), last_us_);
        } else {
            ++counts_.fail;
            std::printf("  FAIL %-16s (%s handler) %s\n", op_name(op), hn, why.c_str());
        }
        std::fflush(stdout);
    }

    const Options& o_;
    DoorbellHandler h_;
    Counts& counts_;
    double last_us_ = 0;
};

int run(const Options& o) {
    int ngpu = 0;
    cudaError_t e = cudaGetDeviceCount(&ngpu);
    if (e != cudaSuccess || ngpu == 0)
        return skip(std::string("no GPU (") + (e != cudaSuccess ? cudaGetErrorString(e) : "none visible") +
                    "): the self-test runs CUDA kernels that drive the NIC");
    if (o.gpu >= ngpu) throw std::runtime_error("GPU " + std::to_string(o.gpu) + " asked for, " + std::to_string(ngpu) + " visible");
#ifndef GV_SELFTEST_STANDIN
    // A ConnectX to test?
    be::Report rep = be::gather_report(o.device, o.gpu);
    const be::DeviceRow* nic = nullptr;
    for (const be::DeviceRow& d : rep.devices)
        if (d.mlx5 && !nic) nic = &d;
    if (!nic) {
        std::string seen;
        for (const be::DeviceRow& d : rep.devices) seen += (seen.empty() ? "" : ", ") + d.name + (d.mlx5 ? " (mlx5)" : "");
        std::string why = o.device.empty() ? std::string("no ConnectX (mlx5) RDMA device")
                                           : "no ConnectX (mlx5) RDMA device named '" + o.device + "'";
        why += seen.empty() ? ": libibverbs lists no RDMA device" : ": libibverbs lists " + seen;
        why += ". A run needs a ConnectX-5 or later with the mlx5_core and mlx5_ib drivers and rdma-core's libmlx5; "
               "GPU-memory queues need DevX and dma-buf (NVIDIA open kernel modules, rdma-core >= 43) or "
               "nvidia-peermem; kernels ring the doorbell with the NVIDIA driver's PeerMappingOverride=1 (else a CPU "
               "proxy does). gpuverbs_info lists what this machine has and lacks.";
        return skip(why);
    }
    std::printf("%s: %s with GPU %d (%s)\n", kProg, nic->name.c_str(), o.gpu,
                rep.gpus.size() > size_t(o.gpu) ? rep.gpus[size_t(o.gpu)].name.c_str() : "?");
    std::printf("  the mlx5 backend has not run on ConnectX hardware before this version's first self-test: report what "
                "this prints\n");
#else
    std::printf("%s: the stand-in NIC (software executor behind a watched doorbell word) with GPU %d\n", kProg, o.gpu);
#endif
    std::vector<DoorbellHandler> handlers;
    if (o.handler == "all") handlers = {DoorbellHandler::Gpu, DoorbellHandler::CpuProxy};
    else if (o.handler == "gpu") handlers = {DoorbellHandler::Gpu};
    else if (o.handler == "cpu-proxy") handlers = {DoorbellHandler::CpuProxy};
    else handlers = {DoorbellHandler::Auto};
    Counts counts;
    for (DoorbellHandler h : handlers) {
        try {
            Harness(o, h, counts).run();
        } catch (const NotSupported& ex) {
            if (h == DoorbellHandler::Gpu && o.handler == "all") {
                ++counts.skip;
                std::printf("  SKIP gpu handler: %s\n", ex.what());
            } else {
                ++counts.fail;
                std::printf("  FAIL %s handler: %s\n", doorbell_handler_name(h), ex.what());
            }
        } catch (const std::exception& ex) {
            ++counts.fail;
            std::printf("  FAIL %s handler: %s\n", doorbell_handler_name(h), ex.what());
        }
        std::fflush(stdout);
    }
    std::printf("%s: %d passed, %d failed, %d skipped\n", kProg, counts.pass, counts.fail, counts.skip);
    return counts.fail ? 1 : (counts.pass ? 0 : kSkip);
}

#else  // !GV_HAVE_CUDA

int run(const Options&) {
    return skip("gpuverbs was built without CUDA: the self-test runs CUDA kernels that drive the NIC (rebuild with nvcc "
                "in PATH)");
}

#endif

}  // namespace

int main(int argc, char** argv) {
    Options o;
    return gvcli::run(argc, argv, kUsage, [&](gvcli::Args& args) -> int {
        while (args.next()) {
            if (args.is("--device")) {
                o.device = args.value();
            } else if (args.is("--gpu")) {
                o.gpu = int(args.integer(0, 1023));
            } else if (args.is("--handler")) {
                o.handler = args.one_of({"auto", "gpu", "cpu-proxy", "all"});
            } else if (args.is("--size")) {
                o.size = uint64_t(args.integer(8, 1ll << 30, true));
            } else if (args.is("--timeout-ms")) {
                o.timeout_ms = uint64_t(args.integer(1, 3600000));
#ifdef GV_SELFTEST_STANDIN
            } else if (args.is("--uar-unmappable")) {
                o.uar_unmappable = true;
#endif
            } else {
                args.unknown();
            }
        }
        try {
            return run(o);
        } catch (const std::exception& e) {
            // One FAIL line on stdout, with the PASS/SKIP lines before it (exit 1).
            std::printf("%s: FAIL: %s\n", kProg, e.what());
            return 1;
        }
    });
}
