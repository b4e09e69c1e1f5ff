// Options, the measured kernels (bandwidth and latency), the CPU initiator, the memcpy
// ceiling, and the output both modes print.
// Part of tools/gv_bench.cu (one translation unit per tool; these helpers stay in its
// anonymous namespace).
#pragma once

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
    std::string device;  // --device: "" or "soft" the software device, else a ConnectX (mlx5)
    uint32_t reps = 3;
    double duration = 0;  // -D: seconds per measurement (iterations scaled to fill it)
    int gpu = 0;          // --gpu: this process's GPU (its context, its buffers, its kernels)
    int peer_gpu = -1;    // --peer-gpu: the responder's GPU (loopback), the server's (client); -1: ours
    bool no_mps = false;  // --no-mps: do not start the MPS daemon (one process per GPU)
};

std::string usage(const std::string& me) {
    const char* m = me.c_str();
    return gvcli::format(
        "usage: %s [options]                in-process loopback\n"
        "       %s --server [--port N]      two processes: serve one client, then exit\n"
        "       %s [options] HOST           two processes: client of the server on HOST\n"
        "perftest's experiment with the work requests posted by CUDA kernels (or CPU threads),\n"
        "executed by the software RDMA device. Needs a CUDA GPU.\n"
        "  -s, --size BYTES      message size, 1 .. 8388608 (default 65536; 8 for latency)\n"
        "  -a, --all             all sizes 2 B .. 8 MiB\n"
        "  -n, --iters N         WQEs per QP (bandwidth) or round trips (latency), 1 .. 1e8 (default 1000)\n"
        "  -q, --qps N           QPs, one CUDA block each, 1 .. 4096 (default 1)\n"
        "  -t, --threads N       threads per block = WQEs per commit (post list), 1 .. 1024 (default 256)\n"
        "  -l, --post-list N     same as --threads\n"
        "      --op write|read|send\n"
        "      --lat             latency (ping-pong) instead of bandwidth\n"
        "      --initiator gpu|cpu  who posts (default gpu; cpu: write_bw and read_bw in loopback)\n"
        "      --mem device|host    where the buffers live (default device; host: loopback only)\n"
        "      --device NAME     soft (the software device, default) or a ConnectX such as mlx5_0\n"
        "                        (the mlx5 backend: loopback between two QPs of that NIC)\n"
        "      --gpu N           this process's GPU (default 0)\n"
        "      --peer-gpu N      the peer's GPU: in loopback the responder QPs, their context and the\n"
        "                        target buffers are on GPU N (peer access over NVLink / PCIe); as a\n"
        "                        client, the GPU the server runs on (--gpu N there). Adds the same-run\n"
        "                        cudaMemcpyPeer ceiling between the two GPUs to every row\n"
        "      --no-mps          two processes: do not start the MPS daemon (not needed when each\n"
        "                        process has its own GPU; needed when both share one)\n"
        "      --reps N          repetitions, 1 .. 100 (peak = best, average = mean; default 3)\n"
        "  -D, --duration SECS   scale the iterations so each repetition lasts about SECS\n"
        "      --report_gbits    report Gb/s instead of GB/s\n"
        "      --json            one JSON object per size\n"
        "      --server          wait for a client; it sends the options to use. Serves one client,\n"
        "                        then exits; listens on 127.0.0.1 only (the software device reaches\n"
        "                        processes of this host only); rejects, with the reason, clients that\n"
        "                        close, stay silent for 10 s, send garbage or ask for what it cannot run\n"
        "      --client HOST     run against the server on HOST (same as a bare HOST: 127.0.0.1)\n"
        "      --port N          TCP port of the exchange (default %u; --server --port 0: a free one)\n"
        "      --timeout SECS    limit of connecting, of the server's whole wait for a client, and of\n"
        "                        each wait for the peer, 1 .. 3600 (default 60)\n"
        "      --help            this text\n"
        "Exit status: 0 measured, 1 failed (the reason on stderr: no GPU, no server, a failed work\n"
        "request, ...), 2 bad usage.\n",
        m, m, m, unsigned(oob::kDefaultPort));
}

/// The context --device names: the software device on GPU 0, or the mlx5 backend on that
/// ConnectX (GPU 0 drives its queues).
inline ContextOptions context_for(const Opts& o) {
    ContextOptions c;
    c.gpu = o.gpu;
    if (o.device.empty() || o.device == "soft") {
        c.backend = Backend::Soft;
    } else {
        c.backend = Backend::Mlx5;
        c.device = o.device;
    }
    return c;
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
                    record_failure(fail, Step::PostRecv, q, j.peer.q.qpn, base + threadIdx.x, st);
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                Status st = dev::wait_recv(j.peer, n, nullptr, 20'000'000'000ull);
                if (st != Status::Ok) record_failure(fail, Step::WaitRecv, q, j.peer.q.qpn, base + n - 1, st);
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
            if (st != Status::Ok) record_failure(fail, Step::Post, blockIdx.x, j.qp.q.qpn, i, st);
        }
        const Status cs = dev::commit<Scope::Block>(j.qp);
        if (threadIdx.x == 0) {
            if (cs != Status::Ok) record_failure(fail, Step::Commit, blockIdx.x, j.qp.q.qpn, base + n - 1, cs);
            const Status ws = dev::wait_send(j.qp, 1, nullptr, 20'000'000'000ull);
            if (ws != Status::Ok)
                record_failure(fail, Step::WaitSend, blockIdx.x, j.qp.q.qpn, base + n - 1, ws);
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
                    record_failure(fail, Step::AwaitPing, q, me.qp.q.qpn, i - 1, Status::Timeout);
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
            record_failure(fail, ws != Status::Ok ? Step::Post : Step::Commit, q, me.qp.q.qpn, i - 1,
                           ws != Status::Ok ? ws : cs);
            return;
        }
        if (i % 64 == 0) {
            const Status st = dev::wait_send(me.qp, 1, nullptr, 5'000'000'000ull);
            if (st != Status::Ok) {
                record_failure(fail, Step::WaitSend, q, me.qp.q.qpn, i - 1, st);
                return;
            }
        }
        if (initiator) {
            uint64_t t0 = atom::now_ns();
            while (atom::load_acquire(reinterpret_cast<uint64_t*>(const_cast<uint64_t*>(mine)) + (size / 8 - 1)) != i)
                if (atom::now_ns() - t0 > 5'000'000'000ull) {
                    record_failure(fail, Step::AwaitPong, q, me.qp.q.qpn, i - 1, Status::Timeout);
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
                    record_failure(fail, Step::WaitSend, q, j.qp.q.qpn, last_of(reaped + i),
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
                    record_failure(fail, Step::WaitSend, q, j.qp.q.qpn, last_of(reaped), Status::Timeout);
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
                record_failure(fail, Step::Post, q, j.qp.q.qpn, base + k, st);
                return;
            }
        }
        const Status cs = dev::commit(j.qp);
        if (cs != Status::Ok) {
            record_failure(fail, Step::Commit, q, j.qp.q.qpn, base + n - 1, cs);
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

// Bytes per second of a cudaMemcpyPeer of `bytes` from GPU `from` to GPU `to`, best of five,
// with peer access enabled both ways (as the software device runs; without it CUDA stages the
// copy through host memory): the ceiling of a peer-GPU run. Timed on `from`'s stream.
double memcpy_peer_ceiling(int from, int to, size_t bytes) {
    for (auto [a, b] : {std::pair<int, int>{from, to}, std::pair<int, int>{to, from}}) {
        CUDA_CHECK(cudaSetDevice(a));
        const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
        else CUDA_CHECK(e);
    }
    CUDA_CHECK(cudaSetDevice(to));
    Buffer<uint8_t> dst(bytes);
    CUDA_CHECK(cudaSetDevice(from));
    Buffer<uint8_t> src(bytes);
    Event e0, e1;
    CUDA_CHECK(cudaMemcpyPeer(dst.get(), to, src.get(), from, bytes));
    float best = 1e30f;
    for (int r = 0; r < 5; ++r) {
        const cudaError_t rec0 = cudaEventRecord(e0);
        const cudaError_t copy = cudaMemcpyPeerAsync(dst.get(), to, src.get(), from, bytes, 0);
        const cudaError_t rec1 = cudaEventRecord(e1);
        CUDA_CHECK(rec0);
        CUDA_CHECK(copy);
        CUDA_CHECK(rec1);
        CUDA_CHECK(cudaEventSynchronize(e1));
        best = std::min(best, gvbench::elapsed_ms(e0, e1));
    }
    return bytes / (best / 1e3) / 1e9;
}

// --gpu and --peer-gpu name visible GPUs, and the two have peer access (else the software
// device refuses to connect them; say so before anything is set up).
void check_gpus(const Opts& o) {
    const int n = Context::gpu_count();
    const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
    const std::string hint = vis ? std::string(" (CUDA_VISIBLE_DEVICES=") + vis + ")" : "";
    for (auto [name, g] : {std::pair<const char*, int>{"--gpu", o.gpu}, {"--peer-gpu", o.peer_gpu}})
        if (g >= n)
            throw NotSupported(std::string(name) + " " + std::to_string(g) + ": " + std::to_string(n) +
                               " CUDA GPU(s) visible" + hint);
    if (o.peer_gpu < 0) return;
    int a = 0;
    CUDA_CHECK(cudaDeviceCanAccessPeer(&a, o.gpu, o.peer_gpu));
    if (!a)
        throw NotSupported("GPU " + std::to_string(o.gpu) + " cannot reach the memory of GPU " +
                           std::to_string(o.peer_gpu) + " (cudaDeviceCanAccessPeer = 0): no peer-to-peer path");
}

// ", GPU 0 -> GPU 1 (peer)" for the headers of peer-GPU runs.
std::string peer_where(const Opts& o) {
    if (o.peer_gpu < 0) return "";
    return ", GPU " + std::to_string(o.gpu) + " -> GPU " + std::to_string(o.peer_gpu) + " (" +
           gvbench::gpu_name(o.peer_gpu) + ")";
}

// The direction bytes move in a run of `op` between this GPU and the peer's: READ moves them
// from the peer to us.
double peer_ceiling(const Opts& o, size_t bytes) {
    const bool read = o.op == "read";
    const double c = memcpy_peer_ceiling(read ? o.peer_gpu : o.gpu, read ? o.gpu : o.peer_gpu, bytes);
    CUDA_CHECK(cudaSetDevice(o.gpu));
    return c;
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

// Latency rows of a peer-GPU run carry the same-run cudaMemcpyPeer ceiling (1 MiB) too.
std::string ceiling_field(const Opts& o) {
    if (o.peer_gpu < 0) return "";
    char b[64];
    std::snprintf(b, sizeof b, ",\"memcpy_peer_GBps\":%.1f", peer_ceiling(o, 1u << 20));
    return b;
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
            "{\"bench\":\"%s_lat\",\"mode\":\"%s\",\"gpu\":%d,\"peer_gpu\":%d,\"bytes\":%u,\"iterations\":%zu,"
            "\"t_min\":%.3f,\"t_max\":%.3f,\"t_typical\":%.3f,\"t_avg\":%.3f,\"t_stdev\":%.3f,\"p99\":%.3f,"
            "\"p999\":%.3f%s}\n",
            o.op.c_str(), mode_name(o), o.gpu, o.peer_gpu, size, us.size(), us.front(), us.back(), pct(0.5), avg,
            sd, pct(0.99), pct(0.999), ceiling_field(o).c_str());
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
    // Peer-GPU runs: the cudaMemcpyPeer ceiling between the two GPUs, in the data's direction.
    const size_t cbytes = size_t(std::min<double>(bytes, 4e9));
    double ceil = o.host_mem ? 0 : o.peer_gpu >= 0 ? peer_ceiling(o, cbytes) : memcpy_ceiling(cbytes);
    double peak = bytes / best / 1e9, avg = bytes / mean / 1e9;
    double mpps = double(o.iters) * nq / mean / 1e6;
    if (o.json)
        std::printf(
            "{\"bench\":\"%s_bw\",\"mode\":\"%s\",\"initiator\":\"%s\",\"mem\":\"%s\",\"qps\":%u,"
            "\"threads\":%u,\"bytes\":%u,\"iterations\":%u,\"bw_peak_GBps\":%.3f,\"bw_avg_GBps\":%.3f,"
            "\"msg_rate_Mpps\":%.3f,\"gpu\":%d,\"peer_gpu\":%d,\"%s\":%.1f}\n",
            o.op.c_str(), mode_name(o), o.gpu_init ? "gpu" : "cpu", o.host_mem ? "host" : "device", nq,
            o.threads, size, o.iters, peak, avg, mpps, o.gpu, o.peer_gpu,
            o.peer_gpu >= 0 ? "memcpy_peer_GBps" : "memcpy_GBps", ceil);
    else
        std::printf("%10u %12u %14.2f %14.2f %14.2f %14.1f %9.1f%%\n", size, o.iters, peak * scale,
                    avg * scale, mpps, ceil, ceil > 0 ? 100.0 * avg / ceil : 0.0);
}

}  // namespace
