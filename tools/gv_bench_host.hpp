// The benchmarks' host side: options, the output both modes print, the QPs' setup, failure
// messages. Host code only, so that the CPU-only build (gv_bench.cu compiled as C++, the CPU
// initiator of gv_bench_cpu.hpp) shares it with the CUDA one.
// Part of tools/gv_bench.cu (one translation unit for the four tools; these helpers stay in its
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
    std::string op = "write";  // the tool's default (gv_bench_tool_main), then --op
    bool lat = false;          // the tool's default (gv_write_lat: true), then --lat
    std::vector<uint32_t> sizes{65536};
    uint32_t iters = 1000;  // WQEs per QP (bw) or round trips (lat)
    uint32_t qps = 1;
    uint32_t threads = 256;  // post list = WQEs per commit
    bool gpu_init = true;
    bool host_mem = false;
    bool json = false;
    bool gbits = false;
    // --device (never empty): soft the software device, mlx5 / mlx5_N a ConnectX (mlx5 backend,
    // with CUDA), verbs or any other RDMA device the verbs backend (CPU initiators)
    std::string device = "soft";
    int gid_index = -1;  // --gid-index (perftest's -x): the verbs backend's GID (-1: RoCE v2 first)
    int proxy_idle_us = -1;  // --proxy-idle-sleep-us: the verbs proxy's idle sleep bound (-1: 0 for
                             // latency with --proxy-only; the library's default otherwise)
    bool proxy_only = false;  // --proxy-only: VerbsOptions::cpu_posts_inline off
    int inline_size = -1;     // -I: latency with CPU initiators, messages up to it posted inline (-1: 0)
    std::string bind;         // --bind: a verbs two-process server's listening address ("": 127.0.0.1)
    uint32_t reps = 3;
    double duration = 0;  // -D: seconds per measurement (iterations scaled to fill it)
    int gpu = 0;          // --gpu: this process's GPU (its context, its buffers, its kernels)
    int peer_gpu = -1;    // --peer-gpu: the responder's GPU (loopback), the server's (client); -1: ours
    bool no_mps = false;  // --no-mps: do not start the MPS daemon (one process per GPU)
    bool separate_commit = false;  // --separate-commit: latency's WRITEs posted and committed in two calls
    uint32_t rx_rounds = 2;  // --rx-rounds: rounds of receives send_bw's receivers keep posted (1 or 2)
};

std::string usage(const std::string& me) {
    const char* m = me.c_str();
    return gvcli::format(
        "usage: %s [options]                in-process loopback\n"
        "       %s --server [--port N]      two processes: serve one client, then exit\n"
        "       %s [options] HOST           two processes: client of the server on HOST\n"
        "perftest's experiment with the work requests posted by CUDA kernels (or CPU threads),\n"
        "executed by the software RDMA device, a ConnectX (mlx5 backend) or any RDMA device through\n"
        "the verbs backend's proxy (CPU threads post). GPU initiators need CUDA; a build without\n"
        "CUDA runs CPU initiators on a CPU-only context, in one process or two (every test).\n"
        "  -s, --size BYTES      message size, 1 .. 8388608 (default 65536; 8 for latency)\n"
        "  -a, --all             all sizes 2 B .. 8 MiB\n"
        "  -n, --iters N         WQEs per QP (bandwidth) or round trips (latency), 1 .. 1e8 (default 1000)\n"
        "  -q, --qps N           QPs, one CUDA block each, 1 .. 4096 (default 1)\n"
        "  -t, --threads N       threads per block = WQEs per commit (post list), 1 .. 512 (GPU initiators)\n"
        "                        or 1 .. 1024 (CPU initiators) (default 256)\n"
        "  -l, --post-list N     same as --threads\n"
        "      --op write|read|send\n"
        "      --lat             latency (ping-pong) instead of bandwidth\n"
        "      --initiator gpu|cpu  who posts (default gpu; cpu: write_bw and read_bw in loopback;\n"
        "                        every test on the verbs backend and without CUDA)\n"
        "      --mem device|host    where the buffers live (default device; host: loopback only)\n"
        "  -d, --device NAME     soft (the software device, default), a ConnectX: mlx5_N or mlx5 (the\n"
        "                        first; the mlx5 backend: loopback between two QPs of that NIC), or\n"
        "                        verbs (the first RDMA device) or any other RDMA device such as rxe0:\n"
        "                        the verbs backend, CPU initiators, host memory; loopback or two\n"
        "                        processes (without CUDA every NAME but soft goes there)\n"
        "  -x, --gid-index N     the verbs backend's GID index (default: RoCE v2 over IPv4 first)\n"
        "      --proxy-idle-sleep-us N  the verbs backend's proxy: longest idle sleep, 0 .. 100000 us\n"
        "                        (0: busy-poll; default 100000, as the initiator threads drive their\n"
        "                        QPs themselves; with --proxy-only the library's, or 0 for latency)\n"
        "  -I, --inline-size N   latency with CPU initiators: messages of up to N bytes posted inline\n"
        "                        (the payload in the WQE; IBV_SEND_INLINE on a verbs device), as\n"
        "                        perftest's -I; 0 .. 912 (default 0: from the registered buffer, which\n"
        "                        is what perftest does on devices it does not know, rxe among them)\n"
        "      --proxy-only      the verbs backend: only its proxy threads post and poll (by default\n"
        "                        the initiator threads do it themselves when the proxy is not on the\n"
        "                        QP: VerbsOptions::cpu_posts_inline)\n"
        "      --separate-commit  latency with GPU initiators: post each WRITE, then commit it, in two\n"
        "                        calls (default: one call, the kCommit flag; on the software device the\n"
        "                        posting thread then executes it itself); give it to both processes\n"
        "      --rx-rounds N     send_bw: rounds of receives (one per thread) each receiver keeps\n"
        "                        posted: 2 (default) posts the next round before it waits for this\n"
        "                        one, as perftest keeps its rx-depth posted; 1 posts it after, so a\n"
        "                        sender that is ahead waits under the RNR rules (measures that\n"
        "                        path). A server's option in two processes\n"
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
        "                        then exits; listens on 127.0.0.1 (the software device reaches\n"
        "                        processes of this host only); rejects, with the reason, clients that\n"
        "                        close, stay silent for 10 s, send garbage or ask for what it cannot run.\n"
        "                        Every test, with GPU initiators or with CPU initiators (a verbs\n"
        "                        --device such as rxe0, or a build without CUDA)\n"
        "      --bind ADDR       a --server on a verbs device: listen on ADDR instead (its peers may be\n"
        "                        on other hosts)\n"
        "      --client HOST     run against the server on HOST (same as a bare HOST: 127.0.0.1)\n"
        "      --port N          TCP port of the exchange (default %u; --server --port 0: a free one)\n"
        "      --timeout SECS    limit of connecting, of the server's whole wait for a client, and of\n"
        "                        each wait for the peer, 1 .. 3600 (default 60)\n"
        "      --help            this text\n"
        "Exit status: 0 measured, 1 failed (the reason on stderr: no GPU, no server, a failed work\n"
        "request, ...), 2 bad usage.\n",
        m, m, m, unsigned(oob::kDefaultPort))
#if !defined(__CUDACC__)
        + "This build has no CUDA: CPU initiators on a CPU-only context (--device soft: the software\n"
          "device on CPU threads, the default; any other NAME: the verbs backend), in one process or\n"
          "two.\n"
#endif
        ;
}

// -D: after a size's warm-up run of `secs` seconds, the iteration count that makes one run
// last about o.duration (1 .. 1e8); unchanged without -D. Returns whether the warm-up was too
// short to tell (under a quarter of the duration, where start-up costs such as the CPU
// initiators' threads weigh): the CPU runs then warm up again with the new count, up to three
// times.
bool scale_iters(Opts& o, double secs) {
    if (o.duration <= 0 || secs <= 0) return false;
    const uint32_t before = o.iters;
    o.iters = uint32_t(std::min(1e8, std::max(1.0, o.iters * (o.duration / secs))));
    return secs < o.duration / 4 && o.iters > before;
}

// CPU initiators: post lists in flight per QP (CQ moderation as perftest's tx-depth), and the
// bound of a wait for a list's completion.
constexpr uint32_t kCpuLists = 4;
constexpr uint64_t kCpuWaitNs = 20'000'000'000ull;

#if defined(__CUDACC__)
double memcpy_ceiling(size_t bytes);
double peer_ceiling(const Opts& o, size_t bytes);
#endif

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
    qo.rq_depth = std::max<uint32_t>(o.rx_rounds * o.threads, 64);  // rounds of receives (bw_kernel)
    qo.memory = qmem;
    qps.push_back(std::make_unique<QueuePair>(pd, qo));
}

// `where`: "" in loopback mode, else who the peer is (appended to the first line).
void print_lat_header(const Opts& o, const char* gpu, const std::string& where) {
    if (!o.json)
        std::printf(
            "# gv_%s_lat: %s, initiator %s, %s memory, %u round trips%s\n"
            "%10s %12s %10s %10s %10s %10s %10s %10s %10s\n",
            o.op.c_str(), gpu, o.gpu_init ? "gpu" : "cpu", o.host_mem ? "host" : "device", o.iters, where.c_str(), "#bytes",
            "#iterations", "t_min[us]", "t_max[us]", "t_typical", "t_avg[us]", "t_stdev", "99%", "99.9%");
}

// Latency rows of a peer-GPU run carry the same-run cudaMemcpyPeer ceiling (1 MiB) too.
std::string ceiling_field(const Opts& o) {
#if defined(__CUDACC__)
    if (o.peer_gpu < 0) return "";
    char b[64];
    std::snprintf(b, sizeof b, ",\"memcpy_peer_GBps\":%.1f", peer_ceiling(o, 1u << 20));
    return b;
#else
    (void)o;
    return "";
#endif
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
            "\"p999\":%.3f,\"inline_size\":%d%s}\n",
            o.op.c_str(), mode_name(o), o.gpu, o.peer_gpu, size, us.size(), us.front(), us.back(), pct(0.5), avg,
            sd, pct(0.99), pct(0.999), std::max(o.inline_size, 0), ceiling_field(o).c_str());
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
#if defined(__CUDACC__)
    // Peer-GPU runs: the cudaMemcpyPeer ceiling between the two GPUs, in the data's direction.
    const size_t cbytes = size_t(std::min<double>(bytes, 4e9));
    double ceil = o.host_mem ? 0 : o.peer_gpu >= 0 ? peer_ceiling(o, cbytes) : memcpy_ceiling(cbytes);
#else
    double ceil = 0;  // no GPU: no memcpy ceiling
#endif
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
        // CPU initiators (emulated devices, a proxy): rates far below 0.01 Mpps keep 6 digits,
        // as perftest prints them.
        std::printf(o.gpu_init ? "%10u %12u %14.2f %14.2f %14.2f %14.1f %9.1f%%\n"
                               : "%10u %12u %14.6f %14.6f %14.6f %14.1f %9.1f%%\n",
                    size, o.iters, peak * scale, avg * scale, mpps, ceil, ceil > 0 ? 100.0 * avg / ceil : 0.0);
}
}  // namespace
