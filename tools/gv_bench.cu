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

namespace {

enum class Mode { Loopback, Server, Client };

struct Opts {
    Mode mode = Mode::Loopback;
    std::string host;  // client: the server's host
    uint16_t port = oob::kDefaultPort;
    int timeout_ms = 60000;      // connect, accept and every wait for the peer
    std::set<std::string> given;  // options set on the command line (a server checks them)
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
                 "usage: %s [options]                in-process loopback\n"
                 "       %s --server [--port N]      two processes: serve one client, then exit\n"
                 "       %s [options] HOST           two processes: client of the server on HOST\n"
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
                 "      --json            one JSON object per size\n"
                 "      --server          wait for a client; it sends the options to use\n"
                 "      --client HOST     run against the server on HOST (same as a bare HOST; the software\n"
                 "                        device reaches processes of this host only: 127.0.0.1)\n"
                 "      --port N          TCP port of the exchange (default %u)\n"
                 "      --timeout SECS    limit of connecting and of each wait for the peer (default 60)\n",
                 me, me, me, unsigned(oob::kDefaultPort));
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

// Block-uniform: true when some block of the kernel recorded a failure in *fail.
__device__ bool block_stop(Failure* fail) {
    __shared__ int stop;
    if (threadIdx.x == 0) stop = atomicAdd(&fail->count, 0u);
    __syncthreads();
    bool r = stop != 0;
    __syncthreads();  // everyone read `stop` before thread 0 may write it again
    return r;
}

// op: 0 write, 1 read, 2 send. Blocks [0, Q) post; for send, blocks [Q, 2Q) receive (with
// nq = 0 every block receives: the two-process server of send_bw). Every failed call is
// recorded in *fail (the first one with its QP, work request and status; the waits keep no
// completion, which would cost the kernel registers: the host adds the failed QP's state and
// syndrome). kStop (two-process mode): leave at the first failure, since every later wait on
// a dead peer would wait out its own timeout.
template <bool kStop>
__global__ void bw_kernel(const Job* jobs, uint32_t nq, int op, uint32_t size, uint32_t iters,
                          Failure* fail) {
    if (blockIdx.x >= nq) {  // receiver of a send_bw pair
        const uint32_t q = blockIdx.x - nq;
        const Job& j = jobs[q];
        for (uint32_t base = 0; base < iters; base += blockDim.x) {
            uint32_t n = min(blockDim.x, iters - base);
            if (threadIdx.x < n) {
                uint64_t off = off_of(base + threadIdx.x, size, j.slice);
                Status st = dev::recv(j.peer, j.dst + off, size, j.dkey);
                if (st != Status::Ok)
                    record_failure(fail, Step::PostRecv, q, j.peer.qpn, base + threadIdx.x, st);
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                Status st = dev::wait_recv(j.peer, n, nullptr, 20'000'000'000ull);
                if (st != Status::Ok) record_failure(fail, Step::WaitRecv, q, j.peer.qpn, base + n - 1, st);
            }
            __syncthreads();
            if constexpr (kStop) {
                if (block_stop(fail)) return;
            }
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
            if (st != Status::Ok) record_failure(fail, Step::Post, blockIdx.x, j.qp.qpn, i, st);
        }
        const Status cs = dev::commit<Scope::Block>(j.qp);
        if (threadIdx.x == 0) {
            if (cs != Status::Ok) record_failure(fail, Step::Commit, blockIdx.x, j.qp.qpn, base + n - 1, cs);
            const Status ws = dev::wait_send(j.qp, 1, nullptr, 20'000'000'000ull);
            if (ws != Status::Ok)
                record_failure(fail, Step::WaitSend, blockIdx.x, j.qp.qpn, base + n - 1, ws);
        }
        __syncthreads();
        if constexpr (kStop) {
            if (block_stop(fail)) return;
        }
    }
}

// Ping-pong: the initiator writes i to the peer's slot and stamps until the peer's answer i
// lands in its own slot; the responder waits for i, then answers with i. kSide -1 (loopback):
// block 0 of two initiates with job a (QP 0), block 1 answers with job b (QP 1). kSide 0 / 1
// (two-process): the one block is the initiator / the responder, with job a (QP 0). A failure
// is recorded in *fail and ends the block (the peer's next wait then times out).
template <int kSide>
__global__ void lat_kernel(Job a, Job b, uint32_t size, uint32_t iters, unsigned long long* stamps,
                           Failure* fail) {
    const bool initiator = kSide < 0 ? blockIdx.x == 0 : kSide == 0;
    const bool responder = kSide < 0 ? blockIdx.x == 1 : kSide == 1;
    const Job& me = kSide < 0 ? (blockIdx.x == 0 ? a : b) : a;
    const uint32_t q = kSide < 0 ? blockIdx.x : 0;
    volatile uint64_t* mine = reinterpret_cast<uint64_t*>(me.src + 4096);  // where the peer's writes land
    uint64_t* out = reinterpret_cast<uint64_t*>(me.src);                    // what we send
    if (threadIdx.x != 0) return;
    for (uint32_t i = 1; i <= iters; ++i) {
        if (responder) {
            uint64_t t0 = atom::now_ns();
            while (atom::load_acquire(reinterpret_cast<uint64_t*>(const_cast<uint64_t*>(mine)) + (size / 8 - 1)) != i)
                if (atom::now_ns() - t0 > 5'000'000'000ull) {
                    record_failure(fail, Step::AwaitPing, q, me.qp.qpn, i - 1, Status::Timeout);
                    return;
                }
        } else {
            stamps[i - 1] = atom::now_ns();
        }
        out[size / 8 - 1] = i;
        const Status ws = dev::write(me.qp, out, size, me.lkey, uint64_t(me.dst + 4096), me.rkey,
                                     (i % 64) == 0 ? kSignaled : 0);
        const Status cs = dev::commit(me.qp);
        if (ws != Status::Ok || cs != Status::Ok) {
            record_failure(fail, ws != Status::Ok ? Step::Post : Step::Commit, q, me.qp.qpn, i - 1,
                           ws != Status::Ok ? ws : cs);
            return;
        }
        if (i % 64 == 0) {
            const Status st = dev::wait_send(me.qp, 1, nullptr, 5'000'000'000ull);
            if (st != Status::Ok) {
                record_failure(fail, Step::WaitSend, q, me.qp.qpn, i - 1, st);
                return;
            }
        }
        if (initiator) {
            uint64_t t0 = atom::now_ns();
            while (atom::load_acquire(reinterpret_cast<uint64_t*>(const_cast<uint64_t*>(mine)) + (size / 8 - 1)) != i)
                if (atom::now_ns() - t0 > 5'000'000'000ull) {
                    record_failure(fail, Step::AwaitPong, q, me.qp.qpn, i - 1, Status::Timeout);
                    return;
                }
            stamps[i - 1] = atom::now_ns() - stamps[i - 1];
        }
    }
}

// CPU-initiated: post lists of `list` WQEs (the last one signaled), one doorbell per list,
// up to kCpuLists lists in flight (CQ moderation as perftest's tx-depth), polled without
// blocking the posting of the next list. A thread stops at its first failure (recorded in
// *fail) or when a list's completion does not come within kCpuWaitNs (as the kernels' waits).
constexpr uint32_t kCpuLists = 4;
constexpr uint64_t kCpuWaitNs = 20'000'000'000ull;

void cpu_bw(const Job& j, uint32_t q, int op, uint32_t size, uint32_t iters, uint32_t list, Failure* fail) {
    uint32_t outstanding = 0, reaped = 0;  // lists in flight, lists completed
    // The signaled (last) work request of list k.
    auto last_of = [&](uint32_t k) {
        return uint32_t(std::min<uint64_t>(uint64_t(k + 1) * list, iters) - 1);
    };
    // Polls the send CQ; block: until a completion comes. False after a failure.
    auto reap = [&](bool block) {
        Completion c[kCpuLists];
        uint32_t idle = 0;
        uint64_t t0 = 0;
        for (;;) {
            uint32_t k = dev::poll_cq(j.qp.scq, c, kCpuLists);
            for (uint32_t i = 0; i < k; ++i)
                if (!c[i].ok()) {
                    record_failure(fail, Step::WaitSend, q, j.qp.qpn, last_of(reaped + i),
                                   Status::CompletionError, c[i]);
                    return false;
                }
            outstanding -= k;
            reaped += k;
            if (k || !block) return true;
            if ((++idle & 63) == 0) {  // bounded wait: read the clock now and then
                const uint64_t now = atom::now_ns();
                if (!t0) t0 = now;
                else if (now - t0 > kCpuWaitNs) {
                    record_failure(fail, Step::WaitSend, q, j.qp.qpn, last_of(reaped), Status::Timeout);
                    return false;
                }
            }
            std::this_thread::yield();
        }
    };
    for (uint32_t base = 0; base < iters; base += list) {
        uint32_t n = std::min(list, iters - base);
        while (outstanding >= kCpuLists)
            if (!reap(true)) return;
        for (uint32_t k = 0; k < n; ++k) {
            uint64_t off = (uint64_t(base + k) * size) % (j.slice - size + 1);
            uint32_t fl = k == n - 1 ? kSignaled : 0;
            Status st = op == 0 ? dev::write(j.qp, j.src + off, size, j.lkey, uint64_t(j.dst + off), j.rkey, fl)
                                : dev::read(j.qp, j.src + off, size, j.lkey, uint64_t(j.dst + off), j.rkey, fl);
            if (st != Status::Ok) {
                record_failure(fail, Step::Post, q, j.qp.qpn, base + k, st);
                return;
            }
        }
        const Status cs = dev::commit(j.qp);
        if (cs != Status::Ok) {
            record_failure(fail, Step::Commit, q, j.qp.qpn, base + n - 1, cs);
            return;
        }
        ++outstanding;
        if (!reap(false)) return;
    }
    while (outstanding)
        if (!reap(true)) return;
}

// Bytes per second of a cudaMemcpy device to device of `bytes`, best of five.
double memcpy_ceiling(size_t bytes) {
    Buffer<uint8_t> a(bytes), b(bytes);
    Event e0, e1;
    CUDA_CHECK(cudaMemcpy(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice));
    float best = 1e30f;
    for (int r = 0; r < 5; ++r) {
        // Between the two records nothing but the copy: their results are checked after.
        const cudaError_t rec0 = cudaEventRecord(e0);
        const cudaError_t copy = cudaMemcpy(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice);
        const cudaError_t rec1 = cudaEventRecord(e1);
        CUDA_CHECK(rec0);
        CUDA_CHECK(copy);
        CUDA_CHECK(rec1);
        CUDA_CHECK(cudaEventSynchronize(e1));
        best = std::min(best, gvbench::elapsed_ms(e0, e1));
    }
    return bytes / (best / 1e3) / 1e9;
}

// ---- both modes: setup and output --------------------------------------------------------------

const char* const kOps[] = {"write", "read", "send"};
int op_index(const std::string& op) { return op == "write" ? 0 : op == "read" ? 1 : 2; }
const char* mode_name(const Opts& o) { return o.mode == Mode::Loopback ? "loopback" : "two-process"; }

// Which repetition of a bandwidth measurement ("" for latency).
std::string run_label(const Opts& o, uint32_t rep) {
    if (o.lat) return "";
    return ", run " + std::to_string(rep) + " of 0.." + std::to_string(o.reps) + " (0: warm-up)";
}

// A failure record in words: what `who` ran (test, size, `run`), which QP, call, status and
// syndrome failed, and the state that QP (one of `qps`) is in now.
std::string failure_text(const Opts& o, const std::string& who, uint32_t size, const std::string& run,
                         const Failure& f, const std::vector<std::unique_ptr<QueuePair>>& qps) {
    const char* const what[] = {"WRITE", "READ", "SEND"};
    std::string s = who + " failed (gv_" + o.op + (o.lat ? "_lat" : "_bw") + ", initiator " +
                    (o.gpu_init ? "gpu" : "cpu") + ", " + std::to_string(size) + " bytes" + run +
                    "): " + gvbench::describe(f, what[op_index(o.op)]);
    for (const auto& q : qps) {
        if (q->qpn() != f.qpn) continue;
        try {  // a failed CUDA context may make even this fail: it only adds to the message
            const QpState st = q->state();
            s += std::string("; the QP is now in ") + qp_state_name(st);
            if (st == QpState::Error && q->error_syndrome())
                s += std::string(" (syndrome ") + mlx5::syndrome_name(q->error_syndrome()) + ")";
        } catch (const std::exception&) {
        }
    }
    return s;
}

// Bytes per QP of the source and of the target: room for min(threads, 64) messages of the
// largest size.
uint64_t slice_bytes(const Opts& o) {
    uint32_t maxsize = *std::max_element(o.sizes.begin(), o.sizes.end());
    uint64_t slice = std::max<uint64_t>(uint64_t(maxsize) * std::min<uint32_t>(o.threads, 64), 8192);
    return std::min<uint64_t>(std::max<uint64_t>(slice, maxsize), 256ull << 20);
}

// One QP with its own CQ (send and receive completions).
void add_qp(const Context& ctx, const ProtectionDomain& pd, const Opts& o, MemoryKind qmem,
            std::vector<std::unique_ptr<CompletionQueue>>& cqs,
            std::vector<std::unique_ptr<QueuePair>>& qps) {
    cqs.push_back(std::make_unique<CompletionQueue>(ctx, CqOptions{2048, qmem}));
    QpOptions qo;
    qo.send_cq = qo.recv_cq = cqs.back().get();
    qo.sq_depth = std::max<uint32_t>(o.threads * (o.gpu_init ? 1 : kCpuLists), 64);
    qo.rq_depth = std::max<uint32_t>(o.threads, 64);
    qo.memory = qmem;
    qps.push_back(std::make_unique<QueuePair>(pd, qo));
}

// `where`: "" in loopback mode, else who the peer is (appended to the first line).
void print_lat_header(const Opts& o, const char* gpu, const std::string& where) {
    if (!o.json)
        std::printf(
            "# gv_%s_lat: %s, initiator gpu, %s memory, %u round trips%s\n"
            "%10s %12s %10s %10s %10s %10s %10s %10s %10s\n",
            o.op.c_str(), gpu, o.host_mem ? "host" : "device", o.iters, where.c_str(), "#bytes",
            "#iterations", "t_min[us]", "t_max[us]", "t_typical", "t_avg[us]", "t_stdev", "99%", "99.9%");
}

// st: the round trip of every iteration, in ns.
void print_lat_row(const Opts& o, uint32_t size, const std::vector<unsigned long long>& st) {
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
        std::printf(
            "{\"bench\":\"%s_lat\",\"mode\":\"%s\",\"bytes\":%u,\"iterations\":%zu,\"t_min\":%.3f,"
            "\"t_max\":%.3f,\"t_typical\":%.3f,\"t_avg\":%.3f,\"t_stdev\":%.3f,\"p99\":%.3f,\"p999\":%.3f}\n",
            o.op.c_str(), mode_name(o), size, us.size(), us.front(), us.back(), pct(0.5), avg, sd, pct(0.99),
            pct(0.999));
    else
        std::printf("%10u %12zu %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f\n", size, us.size(),
                    us.front(), us.back(), pct(0.5), avg, sd, pct(0.99), pct(0.999));
}

void print_bw_header(const Opts& o, const char* gpu, uint32_t nq, const std::string& where) {
    const char* unit = o.gbits ? "Gb/s" : "GB/s";
    if (!o.json)
        std::printf(
            "# gv_%s_bw: %s, initiator %s, %u QPs x %u threads (post list), %s memory%s\n"
            "%10s %12s %14s %14s %14s %14s %10s\n",
            o.op.c_str(), gpu, o.gpu_init ? "gpu" : "cpu", nq, o.threads, o.host_mem ? "host" : "device",
            where.c_str(), "#bytes", "#iterations", (std::string("BW peak[") + unit + "]").c_str(),
            (std::string("BW average[") + unit + "]").c_str(), "MsgRate[Mpps]", "ceiling[GB/s]", "%ceiling");
}

// secs: the seconds of every measured repetition (the warm-up left out).
void print_bw_row(const Opts& o, uint32_t nq, uint32_t size, const std::vector<double>& secs) {
    const double scale = o.gbits ? 8.0 : 1.0;
    double bytes = double(size) * o.iters * nq;
    double best = *std::min_element(secs.begin(), secs.end());
    double mean = 0;
    for (double s : secs) mean += s;
    mean /= secs.size();
    double ceil = o.host_mem ? 0 : memcpy_ceiling(size_t(std::min<double>(bytes, 4e9)));
    double peak = bytes / best / 1e9, avg = bytes / mean / 1e9;
    double mpps = double(o.iters) * nq / mean / 1e6;
    if (o.json)
        std::printf(
            "{\"bench\":\"%s_bw\",\"mode\":\"%s\",\"initiator\":\"%s\",\"mem\":\"%s\",\"qps\":%u,"
            "\"threads\":%u,\"bytes\":%u,\"iterations\":%u,\"bw_peak_GBps\":%.3f,\"bw_avg_GBps\":%.3f,"
            "\"msg_rate_Mpps\":%.3f,\"memcpy_GBps\":%.1f}\n",
            o.op.c_str(), mode_name(o), o.gpu_init ? "gpu" : "cpu", o.host_mem ? "host" : "device", nq,
            o.threads, size, o.iters, peak, avg, mpps, ceil);
    else
        std::printf("%10u %12u %14.2f %14.2f %14.2f %14.1f %9.1f%%\n", size, o.iters, peak * scale,
                    avg * scale, mpps, ceil, ceil > 0 ? 100.0 * avg / ceil : 0.0);
}

// ---- loopback: QP pairs of one process ----------------------------------------------------------

int run_loopback(Opts& o) {
    gvbench::require_gpu();
    const int op = op_index(o.op);
    if (!o.gpu_init && (op == 2 || o.lat))
        throw NotSupported("--initiator cpu supports write_bw and read_bw");
    Context ctx(ContextOptions{Backend::Soft, 0});
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

// ---- two processes: a client that measures, a server that provides the targets ----------------

using gvbench::Ctl;
using Clock = std::chrono::steady_clock;

// Longest a side's kernel may still run once the measurement is over or has failed; its
// waits are bounded (20 s per wait, 5 s per ping-pong step, less when a dead peer's QPs flush).
constexpr double kKernelGraceS = 45;

double secs_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One side of a two-process run. The destructor first waits (bounded) for the side's last
// kernel, so that nothing is freed under a running kernel; then the members go in reverse
// order of declaration, which is dependency order (regions before buffers, QPs before CQs).
struct Side {
    std::optional<Context> ctx;
    std::optional<ProtectionDomain> pd;
    std::vector<std::unique_ptr<CompletionQueue>> cqs;
    std::vector<std::unique_ptr<QueuePair>> qps;
    std::optional<SharedBuffer> shared;  // what the peer targets (GPU memory of the device's arena)
    Buffer<uint8_t> priv;                // the client's source for bandwidth runs (cudaMalloc)
    std::optional<MemoryRegion> mr;      // over `shared` or `priv`
    Buffer<Job> d_jobs;
    Buffer<Failure> d_fail;
    Buffer<unsigned long long> d_st;
    std::optional<Event> start, last;  // `last` is recorded after every launch

    Side() = default;
    Side(const Side&) = delete;
    Side& operator=(const Side&) = delete;
    ~Side() {
        if (last) {
            const auto t0 = Clock::now();
            while (cudaEventQuery(*last) == cudaErrorNotReady) {
                if (secs_since(t0) > kKernelGraceS) {
                    std::fprintf(
                        stderr,
                        "a benchmark kernel still runs %.0f s after the end; exiting without cleanup\n",
                        kKernelGraceS);
                    std::fflush(stdout);
                    std::fflush(stderr);
                    std::_Exit(1);
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
        }
    }
};

// The software device's GPU arena holds every QP a peer process reaches (state, queues, CQs)
// and every SharedBuffer; it is 1 GiB unless GV_GPU_ARENA_MB says otherwise, read when the
// device opens. Unless the environment sizes it, size it for this side: the target buffer,
// the queues (WQEs of up to 256 B, 64-byte receive entries and CQEs), 256 MiB to spare.
void size_arena(const Opts& o, uint32_t nq, uint64_t shared_bytes) {
    if (std::getenv("GV_GPU_ARENA_MB")) return;
    const uint64_t per_qp = uint64_t(std::max<uint32_t>(o.threads, 64)) * (256 + 64) + 2048 * 64 + (64 << 10);
    const uint64_t mb = ((shared_bytes + nq * per_qp) >> 20) + 256;
    if (mb > 1024) setenv("GV_GPU_ARENA_MB", std::to_string(mb).c_str(), 0);
}

// This side's context, QPs (queues and CQs in GPU memory) and its one registered buffer:
// `shared_bytes` of SharedBuffer (what the peer targets) or else `priv_bytes` of private GPU
// memory filled with 0x5a (the client's source).
void setup_side(Side& s, const Opts& o, uint32_t nq, uint64_t shared_bytes, uint64_t priv_bytes) {
    size_arena(o, nq, shared_bytes);
    gvbench::require_gpu();
    s.ctx.emplace(ContextOptions{Backend::Soft, 0});
    s.pd.emplace(*s.ctx);
    for (uint32_t q = 0; q < nq; ++q) add_qp(*s.ctx, *s.pd, o, MemoryKind::Device, s.cqs, s.qps);
    if (shared_bytes) {
        try {
            s.shared.emplace(*s.ctx, shared_bytes);
        } catch (const Error& e) {
            throw Error("the buffer the peer targets (gv::SharedBuffer of " +
                        std::to_string(shared_bytes >> 20) + " MiB): " + e.what());
        }
        s.mr.emplace(*s.pd, s.shared->data(), shared_bytes, kAllAccess);
    } else {
        s.priv = Buffer<uint8_t>(priv_bytes);
        CUDA_CHECK(cudaMemset(s.priv.get(), 0x5a, priv_bytes));
        s.mr.emplace(*s.pd, s.priv.get(), priv_bytes, kAllAccess);
    }
    s.d_fail = Buffer<Failure>(1);
    CUDA_CHECK(cudaMemset(s.d_fail.get(), 0, sizeof(Failure)));
    s.start.emplace();
    s.last.emplace();
}

// Swaps QP endpoints and buffers with the peer and connects QP i to the peer's QP i.
oob::Exchanged exchange_and_connect(Side& s, gvbench::Peer& peer, const std::vector<RemoteBuffer>& mine) {
    std::vector<QpEndpoint> eps;
    for (auto& q : s.qps) eps.push_back(q->endpoint());
    oob::Exchanged got;
    try {
        got = peer.ch.exchange(Backend::Soft, eps, mine, peer.timeout_ms);
    } catch (const Error& e) {
        throw RemoteError(std::string("exchange with the ") + peer.name + " failed: " + e.what());
    }
    for (const QpEndpoint& e : got.qps)
        // pid 0 would make connect() look the QP up by number on this process's own device.
        if (e.soft.pid == 0 || e.soft.pid == uint32_t(getpid()))
            throw NotSupported(std::string("the ") + peer.name + "'s QP " + std::to_string(e.qpn) +
                               " carries no locator of another process: its software device cannot be "
                               "reached across processes");
    for (size_t q = 0; q < s.qps.size(); ++q) s.qps[q]->connect(got.qps[q]);
    return got;
}

// Waits for this side's last kernel. heartbeat_to: tells that peer about once a second that
// we are alive (a measurement may last longer than its --timeout). limit_s > 0: throws
// TimeoutError after that long.
void wait_kernel(Side& s, gvbench::Peer* heartbeat_to, double limit_s) {
    const auto t0 = Clock::now();
    auto beat = t0;
    for (;;) {
        cudaError_t r = cudaEventQuery(*s.last);
        if (r == cudaSuccess) return;
        if (r != cudaErrorNotReady) CUDA_CHECK(r);
        if (heartbeat_to && secs_since(beat) >= 1.0) {
            heartbeat_to->send(Ctl::Heartbeat);
            beat = Clock::now();
        }
        if (limit_s > 0 && secs_since(t0) > limit_s)
            throw TimeoutError("this process's benchmark kernel still runs " + std::to_string(int(limit_s)) +
                               " s after the peer finished");
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
}

// The client after a run: tells the server how many calls of its kernel failed and hears
// back; throws when either side failed. The server answers a failure of its own kernel with
// an Error that describes it (RemoteError here); the client's failure, described, reaches the
// server the same way when the thrown error ends the client (run_client).
void check_run(const Opts& o, gvbench::Peer& peer, Side& s, uint32_t size, uint32_t rep) {
    const Failure f = gvbench::read_failure(s.d_fail.get());
    const std::string mine =
        f.count ? failure_text(o, "this client's kernel", size, run_label(o, rep), f, s.qps) : "";
    peer.send(Ctl::Done, f.count);
    try {
        peer.expect(Ctl::Result);
    } catch (const RemoteError& e) {
        if (f.count) throw Error(mine + "; " + e.what());
        throw;
    }
    if (f.count) throw Error(mine);
}

gvbench::Params params_of(const Opts& o) {
    gvbench::Params p;
    p.lat = o.lat;
    p.op = uint8_t(op_index(o.op));
    p.host_mem = o.host_mem;
    p.gpu_init = o.gpu_init;
    p.iters = o.iters;
    p.qps = o.qps;
    p.threads = o.threads;
    p.reps = o.reps;
    p.duration_us = uint32_t(std::llround(o.duration * 1e6));
    p.sizes = o.sizes;
    p.boot_id = gvbench::boot_id();
    return p;
}

std::string test_name(bool lat, const std::string& op) { return op + (lat ? "_lat" : "_bw"); }

std::string size_list(const std::vector<uint32_t>& v) {
    std::string s;
    for (uint32_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
    return s;
}

// Why this server cannot run what the client asks ("" when it can): another test than this
// binary's (or than --op / --lat here), an option given here with another value than the
// client's, another host, or what two-process mode does not do.
std::string refusal(const Opts& s, const gvbench::Params& c) {
    const std::string theirs = test_name(c.lat, kOps[c.op]), ours = test_name(s.lat, s.op);
    if (theirs != ours)
        return "the client runs " + theirs + ", this server " + ours + ": start the server as gv_" + theirs +
               " --server";
    const std::string here = gvbench::boot_id();
    if (here.empty() || c.boot_id != here)
        return "the client runs on another host (boot id '" + c.boot_id + "', here '" + here +
               "'): the software device connects processes of one host only";
    if (c.host_mem) return "--mem host: two-process buffers are GPU memory (gv::SharedBuffer)";
    if (!c.gpu_init) return "--initiator cpu: two-process mode is GPU-initiated only";
    struct Check {
        const char* key;
        const char* opt;
        std::string here, there;
    };
    const Check checks[] = {
        {"size", "--size/--all", size_list(s.sizes), size_list(c.sizes)},
        {"iters", "--iters", std::to_string(s.iters), std::to_string(c.iters)},
        {"qps", "--qps", std::to_string(s.qps), std::to_string(c.qps)},
        {"threads", "--threads", std::to_string(s.threads), std::to_string(c.threads)},
        {"reps", "--reps", std::to_string(s.reps), std::to_string(c.reps)},
        {"duration", "--duration", std::to_string(std::llround(s.duration * 1e6)),
         std::to_string(c.duration_us)},
    };
    for (const Check& k : checks)
        if (s.given.count(k.key) && k.here != k.there)
            return std::string(k.opt) + " is " + k.here + " here, " + k.there + " on the client" +
                   (std::string(k.key) == "duration" ? " (in us)" : "");
    return "";
}

// The server runs what the client asked for.
void adopt(Opts& o, const gvbench::Params& c) {
    o.lat = c.lat;
    o.op = kOps[c.op];
    o.host_mem = c.host_mem;
    o.gpu_init = c.gpu_init;
    o.iters = c.iters;
    o.qps = c.qps;
    o.threads = c.threads;
    o.reps = c.reps;
    o.duration = c.duration_us / 1e6;
    o.sizes = c.sizes;
}

void client_bw(Opts& o, Side& s, gvbench::Peer& peer, const RemoteBuffer& target, uint32_t nq, uint64_t slice,
               const std::string& where) {
    const int op = op_index(o.op);
    std::vector<Job> jobs(nq);
    for (uint32_t q = 0; q < nq; ++q)
        jobs[q] = Job{s.qps[q]->device_handle(),
                      {},
                      s.priv.get() + q * slice,
                      reinterpret_cast<uint8_t*>(target.addr + q * slice),
                      s.mr->lkey(),
                      target.rkey,
                      0,
                      slice};
    s.d_jobs = Buffer<Job>(jobs.size());
    CUDA_CHECK(cudaMemcpy(s.d_jobs.get(), jobs.data(), jobs.size() * sizeof(Job), cudaMemcpyHostToDevice));
    print_bw_header(o, gvbench::gpu_name().c_str(), nq, where);
    for (uint32_t size : o.sizes) {
        if (size > slice) continue;
        std::vector<double> secs;
        for (uint32_t r = 0; r <= o.reps; ++r) {  // rep 0 warms up
            peer.send(Ctl::Run, size, o.iters);
            peer.expect(Ctl::Ready);
            // Between the two records nothing but the launch: their results are checked after.
            const cudaError_t rec0 = cudaEventRecord(*s.start);
            bw_kernel<true><<<nq, o.threads>>>(s.d_jobs.get(), nq, op, size, o.iters, s.d_fail.get());
            const cudaError_t rec1 = cudaEventRecord(*s.last);
            CUDA_CHECK(rec0);
            CUDA_CHECK(rec1);
            CUDA_CHECK(cudaGetLastError());
            wait_kernel(s, &peer, 0);
            const float ms = gvbench::elapsed_ms(*s.start, *s.last);
            check_run(o, peer, s, size, r);
            if (r) secs.push_back(ms / 1e3);
            if (r == 0 && o.duration > 0 && ms > 0) {
                // -D: scale the iteration count so one repetition lasts `duration`.
                double scale = o.duration * 1e3 / ms;
                o.iters = uint32_t(std::min(1e8, std::max(1.0, o.iters * scale)));
            }
        }
        print_bw_row(o, nq, size, secs);
    }
}

void client_lat(Opts& o, Side& s, gvbench::Peer& peer, const RemoteBuffer& target, uint64_t slice,
                const std::string& where) {
    // Our writes go to the server's slot at target + 4096, its answers land in ours.
    Job me{s.qps[0]->device_handle(),
           {},
           s.shared->as<uint8_t>(),
           reinterpret_cast<uint8_t*>(target.addr),
           s.mr->lkey(),
           target.rkey,
           0,
           slice};
    print_lat_header(o, gvbench::gpu_name().c_str(), where);
    s.d_st = Buffer<unsigned long long>(o.iters);
    for (uint32_t size : o.sizes) {
        size = std::max<uint32_t>(8, size & ~7u);
        if (size > 4096) continue;
        CUDA_CHECK(cudaMemset(me.src, 0, slice));
        CUDA_CHECK(cudaDeviceSynchronize());
        peer.send(Ctl::Run, size, o.iters);
        peer.expect(Ctl::Ready);  // the server cleared its slot and its side runs
        lat_kernel<0><<<1, 32>>>(me, me, size, o.iters, s.d_st.get(), s.d_fail.get());
        CUDA_CHECK(cudaEventRecord(*s.last));
        CUDA_CHECK(cudaGetLastError());
        wait_kernel(s, &peer, 0);
        check_run(o, peer, s, size, 0);
        std::vector<unsigned long long> st(o.iters);
        CUDA_CHECK(cudaMemcpy(st.data(), s.d_st.get(), st.size() * 8, cudaMemcpyDeviceToHost));
        print_lat_row(o, size, st);
    }
}

int run_client(Opts& o) {
    const uint32_t nq = o.lat ? 1 : o.qps;
    const uint64_t slice = slice_bytes(o);
    oob::Channel ch = oob::Channel::connect(o.host, o.port, o.timeout_ms);
    gvbench::Peer peer{ch, "server", o.timeout_ms};
    Side s;
    try {
        ch.send_message(params_of(o).serialize(), o.timeout_ms);
        setup_side(s, o, nq, o.lat ? slice : 0, o.lat ? 0 : slice * nq);
        peer.expect(Ctl::Accept);  // the server took our parameters and set up its side
        peer.send(Ctl::Accept);
        std::vector<RemoteBuffer> mine;
        if (o.lat) mine.push_back(s.mr->remote());
        oob::Exchanged got = exchange_and_connect(s, peer, mine);
        const uint64_t need = o.lat ? slice : slice * nq;
        if (got.buffers.size() != 1 || got.buffers[0].length < need)
            throw RemoteError("the server exported " + std::to_string(got.buffers.size()) +
                              " buffers; expected one of at least " + std::to_string(need) + " bytes");
        const std::string where = ", two-process (server " + ch.peer() + ")";
        // The server connected its QPs before it answers our first Run: we post only after that.
        if (o.lat) client_lat(o, s, peer, got.buffers[0], slice, where);
        else client_bw(o, s, peer, got.buffers[0], nq, slice, where);
        peer.send(Ctl::Bye);
        return 0;
    } catch (const std::exception& e) {
        peer.fail(e.what());
        throw;
    }
}

int run_server(Opts& o, const std::string& prog) {
    oob::Listener lis = oob::Channel::listen(o.port);
    std::printf("# %s: waiting up to %d s for a client on %s:%u\n", prog.c_str(), o.timeout_ms / 1000,
                lis.address().c_str(), unsigned(lis.port()));
    std::fflush(stdout);
    oob::Channel ch = lis.accept(o.timeout_ms);
    lis.close();
    gvbench::Peer peer{ch, "client", o.timeout_ms};
    Side s;
    try {
        const gvbench::Params c = gvbench::Params::parse(ch.recv_message(o.timeout_ms));
        const std::string why = refusal(o, c);
        if (!why.empty()) throw InvalidUsage("refused: " + why);
        adopt(o, c);
        const int op = op_index(o.op);
        const uint32_t nq = o.lat ? 1 : o.qps;
        const uint64_t slice = slice_bytes(o);
        setup_side(s, o, nq, slice * nq, 0);
        peer.send(Ctl::Accept);
        peer.expect(Ctl::Accept);  // the client set up its side
        oob::Exchanged got = exchange_and_connect(s, peer, {s.mr->remote()});
        if (o.lat ? got.buffers.size() != 1 || got.buffers[0].length < slice : !got.buffers.empty())
            throw RemoteError(
                "the client exported " + std::to_string(got.buffers.size()) + " buffers; expected " +
                (o.lat ? "one of at least " + std::to_string(slice) + " bytes" : std::string("none")));
        Job me{};  // write_lat: our answers go to the client's slot at its buffer + 4096
        if (o.lat) {
            me = Job{s.qps[0]->device_handle(),
                     {},
                     s.shared->as<uint8_t>(),
                     reinterpret_cast<uint8_t*>(got.buffers[0].addr),
                     s.mr->lkey(),
                     got.buffers[0].rkey,
                     0,
                     slice};
        } else if (op == 2) {  // send_bw: block q receives into slice q
            std::vector<Job> jobs(nq);
            for (uint32_t q = 0; q < nq; ++q)
                jobs[q] = Job{{},
                              s.qps[q]->device_handle(),
                              nullptr,
                              s.shared->as<uint8_t>() + q * slice,
                              0,
                              0,
                              s.mr->lkey(),
                              slice};
            s.d_jobs = Buffer<Job>(jobs.size());
            CUDA_CHECK(
                cudaMemcpy(s.d_jobs.get(), jobs.data(), jobs.size() * sizeof(Job), cudaMemcpyHostToDevice));
        }
        uint32_t runs = 0;
        std::set<uint32_t> sizes;
        for (;;) {
            const gvbench::CtlMsg m = peer.expect(Ctl::Run, Ctl::Bye);
            if (m.type == Ctl::Bye) break;
            const uint32_t size = m.a, iters = m.b;
            const bool size_ok = o.lat ? size >= 8 && size <= 4096 && size % 8 == 0
                                       : size <= slice && std::count(o.sizes.begin(), o.sizes.end(), size);
            if (!size_ok || iters < 1 || iters > 100000000)
                throw RemoteError("the client asked for a run of " + std::to_string(iters) + " x " +
                                  std::to_string(size) + " bytes, outside its own parameters");
            CUDA_CHECK(cudaMemset(s.d_fail.get(), 0, sizeof(Failure)));
            bool launched = true;
            if (o.lat) {
                CUDA_CHECK(cudaMemset(s.shared->data(), 0, slice));
                CUDA_CHECK(cudaDeviceSynchronize());  // cleared before the client's first write can land
                lat_kernel<1><<<1, 32>>>(me, me, size, iters, nullptr, s.d_fail.get());
            } else if (op == 2) {
                bw_kernel<true><<<nq, o.threads>>>(s.d_jobs.get(), 0, op, size, iters,
                                                   s.d_fail.get());  // nq 0: all receive
            } else {
                launched = false;  // WRITE and READ need nothing from the server's GPU
            }
            if (launched) {
                CUDA_CHECK(cudaEventRecord(*s.last));
                CUDA_CHECK(cudaGetLastError());
            }
            peer.send(Ctl::Ready);
            peer.expect(Ctl::Done);  // a failed client says why in its next message (an Error)
            if (launched) wait_kernel(s, nullptr, kKernelGraceS);
            const Failure f = launched ? gvbench::read_failure(s.d_fail.get()) : Failure{};
            if (f.count)
                throw Error(failure_text(o, "this server's kernel", size,
                                         ", run #" + std::to_string(runs) + " of the session", f, s.qps));
            peer.send(Ctl::Result, 0);
            ++runs;
            sizes.insert(size);
        }
        std::printf(
            "# %s server: client %s done: %s, %u runs of %zu sizes, %u QPs x %u threads, "
            "no failed work request or wait\n",
            prog.c_str(), ch.peer().c_str(), test_name(o.lat, o.op).c_str(), runs, sizes.size(), nq,
            o.threads);
        return 0;
    } catch (const std::exception& e) {
        peer.fail(e.what());
        throw;
    }
}

}  // namespace

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
            else if (!s.empty() && s[0] != '-') client_of(s);
            else return usage(argv[0]);
        }
        if (o.lat && o.sizes.size() == 1 && o.sizes[0] == 65536) o.sizes = {8};
        if (o.mode == Mode::Loopback) return run_loopback(o);
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
