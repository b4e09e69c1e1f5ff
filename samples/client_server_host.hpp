// Host side of the sample: messages, options, buffers, running a round in bounded
// time, byte checks and failure descriptions, and the TCP side (parameters, barrier,
// verdicts).
// Part of samples/client_server.cu (one translation unit: the helpers stay in its
// anonymous namespace).
#pragma once

namespace {

// ---- host side ------------------------------------------------------------------------------

using Clock = std::chrono::steady_clock;

const char* g_role = "client_server";

void vprint(FILE* f, const char* prefix, const char* fmt, va_list ap) {
    std::fprintf(f, "[%s] %s", g_role, prefix);
    std::vfprintf(f, fmt, ap);
    std::fputc('\n', f);
    std::fflush(f);
}
void say(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprint(stdout, "", fmt, ap);
    va_end(ap);
}
void error(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprint(stderr, "error: ", fmt, ap);
    va_end(ap);
}
std::string format(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char buf[512];
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

#if defined(__CUDACC__)
void check_cuda(cudaError_t e, const char* call) {
    if (e != cudaSuccess) throw CudaError(std::string(call) + ": " + cudaGetErrorString(e), int(e));
}
#define CK(call) check_cuda((call), #call)
constexpr bool kCudaBuilt = true;
#else
constexpr bool kCudaBuilt = false;
#endif

struct Args {
    bool server = false;
    std::string host;
    uint16_t port = oob::kDefaultPort;
    std::string bind = "127.0.0.1";
    std::string device = "soft";
    int gid_index = -1;  // --gid-index: the verbs backend's GID (-1: RoCE v2 over IPv4 first)
    int gpu = -2;  // -2: GPU 0 when the machine has one
    uint64_t size = 64 * 1024;
    uint32_t rounds = 10;
    int timeout_ms = oob::kDefaultTimeoutMs;
    int delay_ms = 0;
    bool no_mps = false;  // --no-mps: each process on its own GPU, MPS not needed
};

std::string usage() {
    return gvcli::format(
        "usage: client_server --server [options]\n"
        "       client_server --client HOST [options]\n"
        "Two processes connect queue pairs over TCP (the software RDMA device, or an RDMA device)\n"
        "and run rounds of RDMA WRITE_IMM, SEND_IMM and READ, driven by CUDA kernels (or, --gpu -1,\n"
        "CPU threads).\n"
        "  --server         serve one client, then exit. Listens on --bind (default 127.0.0.1: this\n"
        "                   host only); waits up to max(--timeout-ms, 60 s) in all for a well-formed\n"
        "                   client, rejecting (with the reason) connections that are not: one that\n"
        "                   closes or stays silent, sends garbage, or asks for other --size/--rounds\n"
        "  --client HOST    connect to the server at HOST (retried until --timeout-ms)\n"
        "  --port P         TCP port of the exchange (default %u; --server --port 0: a free one,\n"
        "                   printed)\n"
        "  --bind ADDR      address the server listens on (default 127.0.0.1; 0.0.0.0: every\n"
        "                   address of this host)\n"
        "  --device NAME    soft: the software RDMA device (default; both processes on this host);\n"
        "                   mlx5 or mlx5_N: a ConnectX driven by the mlx5 backend; verbs: the first\n"
        "                   RDMA device, any other name (rxe0, ...): that device, both through the\n"
        "                   verbs backend (CPU proxy). A device's peer may be another host\n"
        "  --gid-index N    the verbs backend's GID index (default: RoCE v2 over IPv4 first)\n"
        "  --gpu N          GPU whose kernels drive the data path (default 0 when the machine has\n"
        "                   one); -1: CPU threads. The two processes may use two GPUs of this\n"
        "                   host (--gpu 0 and --gpu 1) joined by NVLink or PCIe peer-to-peer\n"
        "  --no-mps         do not start the MPS daemon (not needed when each process has its own\n"
        "                   GPU; two processes on one GPU need it to run their kernels at once)\n"
        "  --size BYTES     buffer size, K or M suffix allowed (default 64K, at most 256M)\n"
        "  --rounds N       rounds (default 10)\n"
        "  --timeout-ms MS  bound of every wait, also of each client's handshake (default %d)\n"
        "  --delay-ms MS    pause before every round after the first (default 0)\n"
        "  --help           this text\n"
        "Both sides need the same --size and --rounds. Exit status: 0 validated, 1 failed (the\n"
        "reason on stderr; also when the GPU asked for does not exist), 2 bad usage.\n",
        unsigned(oob::kDefaultPort), oob::kDefaultTimeoutMs);
}

/// Parses the command line (gvcli::UsageError for a mistake).
void parse(gvcli::Args& args, Args& a) {
    bool server = false, client = false;
    while (args.next()) {
        if (args.is("--server")) server = true;
        else if (args.is("--client")) client = true, a.host = args.value();
        else if (args.is("--port")) a.port = uint16_t(args.integer(0, 65535));
        else if (args.is("--bind")) a.bind = args.value();
        else if (args.is("--device")) a.device = gvcli::device_value(args);
        else if (args.is("--gid-index")) a.gid_index = int(args.integer(0, 255));
        else if (args.is("--gpu")) a.gpu = int(args.integer(-1, 1023));
        else if (args.is("--no-mps")) a.no_mps = true;
        else if (args.is("--size")) a.size = uint64_t(args.integer(1, kMaxSize, true));
        else if (args.is("--rounds")) a.rounds = uint32_t(args.integer(1, kMaxRounds));
        else if (args.is("--timeout-ms")) a.timeout_ms = int(args.integer(1, 3600000));
        else if (args.is("--delay-ms")) a.delay_ms = int(args.integer(0, 600000));
        else args.unknown();
    }
    if (server == client) throw gvcli::UsageError("give --server or --client HOST");
    if (client && a.port == 0) throw gvcli::UsageError("--port 0: the client needs the server's port");
    if (a.gid_index >= 0 && !gvcli::is_verbs_device(a.device))
        throw gvcli::UsageError(
            "--gid-index: for the verbs backend (--device verbs or a device name such as rxe0)");
    a.server = server;
}

ContextOptions context_options(const Args& a, int gpu) {
    return gvcli::device_context(a.device, gpu, a.gid_index);
}

/// The GPU to run on (-1: CPU threads); NotSupported, saying why, when the GPU asked for
/// does not exist. Decided before anything else (before listening or connecting). On a GPU,
/// makes sure MPS runs first: that must precede this process's first CUDA call. With
/// --gpu -1 no CUDA call is made at all.
int choose_gpu(const Args& a) {
    const std::string no_gpu = kCudaBuilt ? gvcli::no_gpu_reason() : "this build has no CUDA";  // no CUDA call
    int gpu = a.gpu;
    if (gpu == -2 && !no_gpu.empty()) gpu = -1;
    if (gpu == -1) return -1;
    if (!no_gpu.empty()) throw NotSupported(format("--gpu %d: %s; use --gpu -1 (CPU threads)", gpu, no_gpu.c_str()));
    // Kernels of two processes on one GPU need MPS to run at the same time.
    // Not with --no-mps: processes on two GPUs each have a GPU of their own.
    if (!a.no_mps) {
        std::string note = mps::ensure(true);
        if (!note.empty()) std::fprintf(stderr, "[%s] warning: %s\n", g_role, note.c_str());
    }
    const int n = Context::gpu_count();
    if (a.gpu == -2) return n > 0 ? 0 : -1;
    if (gpu >= n) throw NotSupported(format("--gpu %d: %d CUDA GPU(s) visible; use --gpu -1 (CPU threads)", gpu, n));
    return gpu;
}

/// Memory only this process touches: GPU memory on a GPU context, host memory otherwise.
class LocalBuffer {
public:
    LocalBuffer(bool gpu, size_t n) : gpu_(gpu) {
#if defined(__CUDACC__)
        if (gpu) {
            CK(cudaMalloc(&p_, n));
            CK(cudaMemset(p_, 0, n));
            return;
        }
#endif
        host_.assign(n, 0);
        p_ = host_.data();
    }
    ~LocalBuffer() {
#if defined(__CUDACC__)
        if (gpu_) cudaFree(p_);
#endif
    }
    LocalBuffer(const LocalBuffer&) = delete;
    LocalBuffer& operator=(const LocalBuffer&) = delete;
    uint8_t* data() const { return static_cast<uint8_t*>(p_); }

private:
    bool gpu_;
    void* p_ = nullptr;
    std::vector<uint8_t> host_;
};

/// True when the peer closed its end of the channel: it exited, was killed, or gave up. In
/// a run that goes well neither side closes before both finished their rounds. Never
/// throws (a round's thread may be running): a channel that cannot even be polled counts as
/// gone.
bool peer_left(const oob::Channel& ch) noexcept {
    try {
        return ch.peer_closed();
    } catch (const Error&) {
        return true;
    }
}

/// Runs the rounds of one side: each as a kernel of one block on a GPU, or on a CPU thread,
/// while this thread watches the round's deadline and the channel (so a peer that went away
/// ends the run at once, not after our own bounded wait).
class RoundRunner {
public:
    explicit RoundRunner(bool gpu) : gpu_(gpu) {
#if defined(__CUDACC__)
        if (gpu) CK(cudaMalloc(&d_, sizeof(RoundResult)));
#endif
    }
    ~RoundRunner() {
#if defined(__CUDACC__)
        if (d_) cudaFree(d_);
#endif
    }
    RoundRunner(const RoundRunner&) = delete;
    RoundRunner& operator=(const RoundRunner&) = delete;

    /// Round r of job j. Its waits are bounded, so it ends within budget_ms; if not
    /// (kRoundHung), or if the peer left (kPeerLeft), the round is left running: exit then.
    template <class Job>
    RoundResult run(const Job& j, uint32_t r, int budget_ms, const oob::Channel& ch) {
        RoundResult o{};
        const auto deadline = Clock::now() + std::chrono::milliseconds(budget_ms);
        auto stop = [&](uint32_t step) {
            o.step = step;
            o.expected = uint64_t(budget_ms);
            return o;
        };
#if defined(__CUDACC__)
        if (gpu_) {
            launch(j, r, d_);
            CK(cudaGetLastError());
            cudaEvent_t ev;
            CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
            CK(cudaEventRecord(ev));
            for (;;) {
                cudaError_t e = cudaEventQuery(ev);
                if (e == cudaSuccess) break;
                if (e != cudaErrorNotReady) check_cuda(e, "the round's kernel");
                if (Clock::now() > deadline) return stop(kRoundHung);
                if (peer_left(ch)) return stop(kPeerLeft);
                std::this_thread::sleep_for(std::chrono::microseconds(20));
            }
            CK(cudaEventDestroy(ev));
            CK(cudaMemcpy(&o, d_, sizeof o, cudaMemcpyDeviceToHost));
            return o;
        }
#endif
        // Shared with the round's thread, which may outlive this call (see above).
        struct Shared {
            std::mutex m;
            std::condition_variable cv;
            bool done = false;
            RoundResult res{};
        };
        auto sh = std::make_shared<Shared>();
        std::thread t([sh, j, r] {
            RoundResult res{};
            run_cpu(j, r, &res);
            std::lock_guard<std::mutex> g(sh->m);
            sh->res = res;
            sh->done = true;
            sh->cv.notify_one();
        });
        std::unique_lock<std::mutex> lk(sh->m);
        while (!sh->done) {
            if (Clock::now() > deadline || peer_left(ch)) {
                lk.unlock();
                t.detach();
                return stop(Clock::now() > deadline ? kRoundHung : kPeerLeft);
            }
            sh->cv.wait_for(lk, std::chrono::milliseconds(1));
        }
        o = sh->res;
        lk.unlock();
        t.join();
        return o;
    }

private:
    bool gpu_;
    RoundResult* d_ = nullptr;
};

/// n bytes at p as host memory (copied from the GPU on a GPU context).
const uint8_t* host_view(const void* p, size_t n, bool gpu, std::vector<uint8_t>& tmp) {
#if defined(__CUDACC__)
    if (gpu) {
        tmp.resize(n);
        CK(cudaMemcpy(tmp.data(), p, n, cudaMemcpyDeviceToHost));
        return tmp.data();
    }
#endif
    (void)gpu;
    (void)tmp;
    return static_cast<const uint8_t*>(p);
}

/// "" when p holds round r's pattern `kind`, else the first mismatch.
std::string check_bytes(const uint8_t* p, size_t n, uint32_t kind, uint32_t r, const char* buffer) {
    for (size_t i = 0; i < n; ++i) {
        uint8_t want = pattern(kind, r, i);
        if (p[i] != want)
            return format("Validation failed: round %u, buffer %s, offset %zu: expected 0x%02x, got 0x%02x",
                          r, buffer, i, want, p[i]);
    }
    return "";
}

const char* cqe_opcode_name(uint64_t op) {
    switch (op) {
        case MLX5_CQE_REQ: return "REQ";
        case MLX5_CQE_RESP_WR_IMM: return "RESP_WR_IMM";
        case MLX5_CQE_RESP_SEND: return "RESP_SEND";
        case MLX5_CQE_RESP_SEND_IMM: return "RESP_SEND_IMM";
        case MLX5_CQE_REQ_ERR: return "REQ_ERR";
        case MLX5_CQE_RESP_ERR: return "RESP_ERR";
        default: return "?";
    }
}

/// What a RoundResult says, in words (without the round).
std::string describe(const RoundResult& o, bool server, int timeout_ms) {
    const Status st = Status(o.status);
    const std::string sts = status_name(st);
    auto timed_out = [&](const std::string& what) {
        return format("timed out after %d ms waiting for %s", timeout_ms, what.c_str());
    };
    auto wait_failed = [&](const std::string& what, const std::string& op) {
        if (st == Status::Timeout) return timed_out(what);
        if (st == Status::CompletionError && o.field == kStatus)
            return op + " completed with " + mlx5::syndrome_name(uint8_t(o.got));
        return "waiting for " + what + " failed: " + sts;
    };
    static const char* const recv_what[2] = {"the WRITE_IMM into A", "the SEND_IMM into B"};
    static const char* const send_what[3] = {"the WRITE_IMM into the server's A",
                                             "the SEND_IMM into the server's B",
                                             "the READ of the server's A"};
    switch (o.step) {
        case kPostRecv: return "posting the two receives failed: " + sts;
        case kPostFlag: return "posting the inline WRITE of the client's go flag failed: " + sts;
        case kCommit: return "ringing the doorbell failed: " + sts + " (the QP left RTS)";
        case kWaitFlagSent:
            return wait_failed("the completion of the go flag's WRITE", "the WRITE of the client's go flag");
        case kWaitRecv:
            if (st == Status::Timeout)
                return timed_out(format(
                    "the client's WRITE_IMM and SEND_IMM (%u of 2 receive completions came)", o.polled));
            return "waiting for the receive completions failed: " + sts;
        case kRecvCheck: {
            const char* what = recv_what[o.index < 2 ? o.index : 0];
            std::string pre = format("receive completion %u of 2 (%s)", o.index + 1, what);
            switch (o.field) {
                case kStatus: return pre + " failed: " + mlx5::syndrome_name(uint8_t(o.got));
                case kOpcode:
                    return pre + format(": CQE opcode expected %s, got %s (%llu)",
                                        cqe_opcode_name(o.expected), cqe_opcode_name(o.got),
                                        (unsigned long long)o.got);
                case kImm:
                    return pre + format(": immediate expected 0x%08llx, got 0x%08llx",
                                        (unsigned long long)o.expected, (unsigned long long)o.got);
                case kByteLen:
                    return pre + format(": byte count expected %llu, got %llu",
                                        (unsigned long long)o.expected, (unsigned long long)o.got);
            }
            return pre + ": unexpected";
        }
        case kPostRead: return "posting the READ of the client's C failed: " + sts;
        case kWaitRead: return wait_failed("the READ of the client's C", "the READ of the client's C");
        case kWaitFlag: {
            const std::string flag = format("the server's go flag (expected %llu, read %llu)",
                                            (unsigned long long)o.expected, (unsigned long long)o.got);
            if (st == Status::QpError) return "stopped waiting for " + flag + ": the QP left RTS";
            return timed_out(flag);
        }
        case kPost: return std::string("posting ") + send_what[o.index < 3 ? o.index : 0] + " failed: " + sts;
        case kWaitSends:
            if (st == Status::Timeout)
                return timed_out(
                    format("the completions of the WRITE_IMM, SEND_IMM and READ (%u of 3 came)", o.polled));
            return "waiting for the completions failed: " + sts;
        case kSendCheck:
            return format("completion %u of 3 (%s) failed: %s", o.index + 1,
                          send_what[o.index < 3 ? o.index : 0], mlx5::syndrome_name(uint8_t(o.got)));
        case kRoundHung:
            return format("the round did not finish within %llu ms", (unsigned long long)o.expected);
        case kPeerLeft: return format("the %s left during the round", server ? "client" : "server");
    }
    return "unknown failure";
}

// ---- the TCP side: parameters, barrier, verdicts ---------------------------------------------

/// Each side sends what it was asked to run; both must agree (RemoteError when they do not).
void agree(oob::Channel& ch, const Args& a, int timeout_ms) {
    std::vector<uint8_t> m(13);
    m[0] = 'P';
    std::memcpy(&m[1], &a.rounds, 4);
    std::memcpy(&m[5], &a.size, 8);
    ch.send_message(m, timeout_ms);
    std::vector<uint8_t> p = ch.recv_message(timeout_ms);
    if (p.size() != 13 || p[0] != 'P')
        throw RemoteError("the peer at " + ch.peer() + " speaks gpuverbs but is not a client_server of this version");
    uint32_t rounds;
    uint64_t size;
    std::memcpy(&rounds, &p[1], 4);
    std::memcpy(&size, &p[5], 8);
    if (rounds != a.rounds || size != a.size)
        throw RemoteError(
            format("the %s runs %u rounds of %llu bytes, we were asked for %u rounds of %llu bytes: "
                   "give both sides the same --rounds and --size",
                   a.server ? "client" : "server", rounds, (unsigned long long)size, a.rounds,
                   (unsigned long long)a.size));
}

/// Both sides call it once their QP is connected: neither posts before the other is ready.
void barrier(oob::Channel& ch, int timeout_ms) {
    ch.send_message(std::vector<uint8_t>{'B'}, timeout_ms);
    std::vector<uint8_t> m = ch.recv_message(timeout_ms);
    if (m != std::vector<uint8_t>{'B'})
        throw RemoteError("unexpected message from the peer instead of 'ready'");
}

/// What the peer says after a failure of ours (a reason, or that it is gone), or "".
std::string peer_news(oob::Channel& ch, const char* peer, int wait_ms) {
    try {
        std::vector<uint8_t> m = ch.recv_message(wait_ms);
        if (!m.empty() && m[0] == 'F')
            return std::string("the ") + peer + " reported: " + std::string(m.begin() + 1, m.end());
        return "";
    } catch (const TimeoutError&) {
        return "";
    } catch (const Error&) {
        return std::string("the ") + peer + " closed the connection (it exited or was killed)";
    }
}

/// Reports a failure: to us, and (best effort) to the peer. Returns the exit status.
int failed(oob::Channel& ch, QueuePair& qp, const std::string& what, bool ask_peer, const char* peer) {
    std::string msg = what;
    if (ask_peer) {
        if (qp.state() == QpState::Error) msg += "; our QP is in ERROR";
        std::string news = peer_news(ch, peer, 300);
        if (!news.empty()) msg += "; " + news;
    }
    error("%s", msg.c_str());
    try {
        const std::string m = "F" + msg;
        ch.send_message(std::vector<uint8_t>(m.begin(), m.end()), 1000);
    } catch (const Error&) {
    }
    return 1;
}

/// Swaps verdicts with the peer. Returns the exit status.
int finish(oob::Channel& ch, const Args& a, const char* peer) {
    try {
        ch.send_message(std::vector<uint8_t>{'O'}, a.timeout_ms);
        std::vector<uint8_t> m = ch.recv_message(a.timeout_ms);
        if (m.empty() || m[0] != 'O') {
            error("the %s reported: %s", peer, std::string(m.begin() + (m.empty() ? 0 : 1), m.end()).c_str());
            return 1;
        }
    } catch (const Error& e) {
        error("no verdict from the %s: %s", peer, e.what());
        return 1;
    }
    say("Validation successful: %u rounds of %llu bytes", a.rounds, (unsigned long long)a.size);
    return 0;
}

std::string where(const Context& ctx) {
    return ctx.name() +
           (ctx.gpu() >= 0 ? format(", data path in CUDA kernels (1 block of %d threads per round)", kThreads)
                           : std::string(", data path in a CPU thread"));
}

int budget_ms(const Args& a) { return 4 * a.timeout_ms + 5000; }

void set_gpu(int gpu) {
#if defined(__CUDACC__)
    if (gpu >= 0) CK(cudaSetDevice(gpu));
#else
    (void)gpu;
#endif
}

[[noreturn]] void exit_now(int code) {
    // A kernel that did not finish may still run: skip destructors that would wait for it.
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(code);
}

}  // namespace
