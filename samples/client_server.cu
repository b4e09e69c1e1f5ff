// client_server: a server and a client process connect queue pairs of the software RDMA
// device over TCP and run rounds of RDMA traffic driven by CUDA kernels, or, with --gpu -1,
// by CPU threads making the very same gv::dev calls. The gpuverbs counterpart of DOCA
// GPUNetIO's gpunetio_rdma_client_server_write sample.
//
//   client_server --server [--port P] [--gpu N] [--size BYTES] [--rounds N]    (one shell)
//   client_server --client HOST [--port P] [...]                               (another)
//
// Round r = 1, 2, ... (one kernel per round on each side):
//   server  posts two receives (one without a buffer for the WRITE_IMM, whose data lands in
//           A; one into B for the SEND_IMM), then lets the client go: an inline RDMA WRITE of
//           r into the client's flag word;
//   client  waits until its flag reads r, fills its buffers with round r's patterns, then
//           posts an RDMA WRITE with immediate of pattern A into the server's A, a SEND with
//           immediate of pattern B (into B) and an RDMA READ of A back, and waits for them;
//   server  checks both receive completions (opcode, immediate, byte count), then RDMA READs
//           the client's buffer C (pattern C) into its own D;
//   both    check every byte they received (server: A, B and D; client: what it read back).
// Buffers a peer reaches are gv::SharedBuffers (GPU memory on a GPU context, host memory on a
// CPU one); the rest is private. At the end each side tells the other over TCP whether it
// validated everything, then prints "Validation successful" (exit status 0) or what failed
// (exit status 1). Every wait is bounded by --timeout-ms.
//
// Built as CUDA when the library has CUDA, as plain C++ (CPU threads only) otherwise.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"
#include "gpuverbs/mps.hpp"
#include "gpuverbs/oob.hpp"

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

using namespace gv;

namespace {

// ---- what travels: patterns and immediates --------------------------------------------------

enum Kind : uint32_t { kA = 1, kB = 2, kC = 3 };  // WRITE_IMM into A, SEND_IMM into B, READ of C

/// Byte i of round r's pattern for one buffer: every round and every buffer differ.
GV_HOST_DEVICE uint8_t pattern(uint32_t kind, uint32_t round, uint64_t i) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t(round) << 8) | kind) * 0xC2B2AE3D27D4EB4Full;
    return uint8_t(x >> 56);
}

/// Immediate data of the WRITE_IMM (kind kA) and the SEND_IMM (kB) of a round.
GV_HOST_DEVICE uint32_t imm_of(uint32_t kind, uint32_t round) { return (kind << 28) | round; }

constexpr uint32_t kMaxRounds = 1000000;  // rounds fit the immediate's low 28 bits
constexpr uint64_t kMaxSize = 256ull << 20;
constexpr int kThreads = 256;  // one block per round kernel

// ---- one round, for a CUDA block or a CPU thread --------------------------------------------

/// Where a round stopped (0: it completed) and why: filled by the group's leader.
enum Step : uint32_t {
    kDone = 0,
    kPostRecv,      // server: the two receives
    kPostFlag,      // server: inline WRITE of the go flag
    kCommit,        // either: the doorbell
    kWaitFlagSent,  // server: completion of the flag WRITE
    kWaitRecv,      // server: the two receive completions
    kRecvCheck,     // server: one receive completion is not what the client sent
    kPostRead,      // server: READ of the client's C
    kWaitRead,      // server: its completion
    kWaitFlag,      // client: the go flag
    kPost,          // client: WRITE_IMM, SEND_IMM or READ (index 0, 1, 2)
    kWaitSends,     // client: their three completions
    kSendCheck,     // client: one of them failed
    kRoundHung,     // host: the round did not finish in time (a wait that is not bounded?)
    kPeerLeft,      // host: the peer closed the connection during the round
};

/// What went wrong in a check: the field, what was expected and what came.
enum Field : uint32_t { kNoField = 0, kStatus, kOpcode, kImm, kByteLen };

struct RoundResult {
    uint32_t step;
    int32_t status;   // gv::Status of the failed call
    uint32_t index;   // which completion or post
    uint32_t polled;  // completions that came before a timeout
    uint32_t field;   // Field of a failed check
    uint32_t pad;
    uint64_t expected;  // ... and the values compared (also the flag: expected round, read value)
    uint64_t got;
};

struct ServerJob {
    dev::QpHandle qp;
    uint8_t* b;  // receive buffer B (shared): the SEND_IMM lands here
    uint32_t b_lkey;
    uint8_t* d;  // READ destination D (private)
    uint32_t d_lkey;
    RemoteBuffer flag;  // the client's go flag
    RemoteBuffer c;     // the client's buffer C
    uint32_t size;
    uint64_t timeout_ns;
};

struct ClientJob {
    dev::QpHandle qp;
    unsigned long long* flag;  // our go flag (shared): the server WRITEs the round number here
    uint8_t* src;              // private: pattern A at [0, size), pattern B at [size, 2 size)
    uint32_t src_lkey;
    uint8_t* c;     // shared: the server READs it
    uint8_t* back;  // private: our READ of the server's A lands here
    uint32_t back_lkey;
    RemoteBuffer a;  // the server's buffer A
    uint32_t size;
    uint64_t timeout_ns;
};

/// A CPU thread alone.
struct CpuGroup {
    GV_HOST_DEVICE bool lead() const { return true; }
    GV_HOST_DEVICE void sync() const {}
    GV_HOST_DEVICE uint32_t rank() const { return 0; }
    GV_HOST_DEVICE uint32_t size() const { return 1; }
    GV_HOST_DEVICE Status commit(const dev::QpHandle& qp) const { return dev::commit(qp); }
    /// Our stores before the WQEs that tell the peer to read them.
    GV_HOST_DEVICE void fence() const {
#if !GV_DEVICE_CODE
        std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
    }
};

#if defined(__CUDACC__)
/// One CUDA block: thread 0 posts and waits, every thread fills buffers and takes part in
/// the doorbell (the software device then executes the WQEs with the whole block).
struct BlockGroup {
    GV_HOST_DEVICE bool lead() const {
#if GV_DEVICE_CODE
        return threadIdx.x == 0;
#else
        return true;
#endif
    }
    GV_HOST_DEVICE void sync() const {
#if GV_DEVICE_CODE
        __syncthreads();
#endif
    }
    GV_HOST_DEVICE uint32_t rank() const {
#if GV_DEVICE_CODE
        return threadIdx.x;
#else
        return 0;
#endif
    }
    GV_HOST_DEVICE uint32_t size() const {
#if GV_DEVICE_CODE
        return blockDim.x;
#else
        return 1;
#endif
    }
    GV_HOST_DEVICE Status commit(const dev::QpHandle& qp) const {
#if GV_DEVICE_CODE
        return dev::commit<Scope::Block>(qp);
#else
        return dev::commit(qp);
#endif
    }
    GV_HOST_DEVICE void fence() const {
#if GV_DEVICE_CODE
        __threadfence_system();
#endif
    }
};
#endif

GV_HOST_DEVICE void fail(RoundResult* out, uint32_t step, Status st, uint32_t index = 0,
                         uint32_t polled = 0) {
    out->step = step;
    out->status = int32_t(st);
    out->index = index;
    out->polled = polled;
}

/// Records which value was wrong (after fail()).
GV_HOST_DEVICE void found(RoundResult* out, uint32_t field, uint64_t expected, uint64_t got) {
    out->field = field;
    out->expected = expected;
    out->got = got;
}

GV_HOST_DEVICE void mismatch(RoundResult* out, uint32_t step, uint32_t index, uint32_t field,
                             uint64_t expected, uint64_t got) {
    fail(out, step, Status::Ok, index);
    found(out, field, expected, got);
}

/// Checks a receive completion against what the client posted; false (and *out) if it differs.
GV_HOST_DEVICE bool check_recv(const Completion& c, uint32_t index, uint8_t opcode, uint32_t imm,
                               uint32_t len, RoundResult* out) {
    if (c.status != 0) mismatch(out, kRecvCheck, index, kStatus, 0, c.status);
    else if (c.cqe_opcode != opcode) mismatch(out, kRecvCheck, index, kOpcode, opcode, c.cqe_opcode);
    else if (c.imm != imm) mismatch(out, kRecvCheck, index, kImm, imm, c.imm);
    else if (c.byte_len != len) mismatch(out, kRecvCheck, index, kByteLen, len, c.byte_len);
    else return true;
    return false;
}

/// The server's part of round r.
template <class G>
GV_HOST_DEVICE void server_round(const G& g, const ServerJob& j, uint32_t r, RoundResult* out) {
    const dev::QpHandle& qp = j.qp;
    if (g.lead()) {
        *out = RoundResult{};
        // The WRITE_IMM consumes a receive too, but its data goes to the address it names:
        // that receive needs no buffer. The SEND_IMM's lands in B.
        Status st = dev::post_recv(qp, nullptr, 0, j.timeout_ns);
        if (st == Status::Ok) st = dev::recv(qp, j.b, j.size, j.b_lkey, j.timeout_ns);
        if (st != Status::Ok) {
            fail(out, kPostRecv, st);
        } else {
            // Both receives are posted: let the client go. Its WRITE_IMM and SEND_IMM find
            // them (one not yet visible to the peer would make the SEND wait and retry, as the
            // RNR rules say, not fail).
            const unsigned long long flag = r;
            st = dev::write_inline(qp, &flag, sizeof flag, j.flag.addr, j.flag.rkey, kSignaled, j.timeout_ns);
            if (st != Status::Ok) fail(out, kPostFlag, st);
        }
    }
    g.sync();
    if (out->step) return;
    Status cs = g.commit(qp);
    if (g.lead()) {
        Completion c[2];
        uint32_t polled = 0;
        Status st;
        if (cs != Status::Ok) {
            fail(out, kCommit, cs);
        } else if ((st = dev::wait_send(qp, 1, c, j.timeout_ns, &polled)) != Status::Ok) {
            fail(out, kWaitFlagSent, st, 0, polled);
            if (st == Status::CompletionError) found(out, kStatus, 0, c[0].status);
        } else if ((st = dev::wait_recv(qp, 2, c, j.timeout_ns, &polled)) != Status::Ok &&
                   st != Status::CompletionError) {
            fail(out, kWaitRecv, st, 0, polled);
        } else if (check_recv(c[0], 0, MLX5_CQE_RESP_WR_IMM, imm_of(kA, r), j.size, out) &&
                   check_recv(c[1], 1, MLX5_CQE_RESP_SEND_IMM, imm_of(kB, r), j.size, out)) {
            st = dev::read(qp, j.d, j.size, j.d_lkey, j.c.addr, j.c.rkey, kSignaled, j.timeout_ns);
            if (st != Status::Ok) fail(out, kPostRead, st);
        }
    }
    g.sync();
    if (out->step) return;
    cs = g.commit(qp);
    if (g.lead()) {
        Completion c[1];
        uint32_t polled = 0;
        Status st;
        if (cs != Status::Ok) {
            fail(out, kCommit, cs);
        } else if ((st = dev::wait_send(qp, 1, c, j.timeout_ns, &polled)) != Status::Ok) {
            fail(out, kWaitRead, st, 0, polled);
            if (st == Status::CompletionError) found(out, kStatus, 0, c[0].status);
        }
    }
}

/// The client's part of round r.
template <class G>
GV_HOST_DEVICE void client_round(const G& g, const ClientJob& j, uint32_t r, RoundResult* out) {
    const dev::QpHandle& qp = j.qp;
    if (g.lead()) {
        *out = RoundResult{};
        // The server's executor writes the flag; system scope: it runs in another process.
        // No completion tells us when the server is gone, but our QP goes to ERROR then (the
        // library watches the peer process): stop at once rather than at the timeout.
        const uint64_t start = atom::now_ns();
        uint32_t spins = 0;
        unsigned long long v;
        while ((v = atom::load_acquire(j.flag, true)) != r) {
            const bool error = dev::qp_in_error(qp);
            if (error || atom::now_ns() - start > j.timeout_ns) {
                fail(out, kWaitFlag, error ? Status::QpError : Status::Timeout);
                found(out, kNoField, r, v);
                break;
            }
            dev::spin_pause(spins, 1024);
        }
    }
    g.sync();
    if (out->step) return;
    for (uint64_t i = g.rank(); i < j.size; i += g.size()) {
        j.src[i] = pattern(kA, r, i);
        j.src[j.size + i] = pattern(kB, r, i);
        j.c[i] = pattern(kC, r, i);
    }
    // C must be visible to the server's executor (another process) before it READs C, which
    // it does once our SEND_IMM arrived.
    g.fence();
    g.sync();
    if (g.lead()) {
        Status st = dev::write_imm(qp, j.src, j.size, j.src_lkey, j.a.addr, j.a.rkey, imm_of(kA, r),
                                   kSignaled, j.timeout_ns);
        if (st != Status::Ok) {
            fail(out, kPost, st, 0);
        } else if ((st = dev::send_imm(qp, j.src + j.size, j.size, j.src_lkey, imm_of(kB, r), kSignaled,
                                       j.timeout_ns)) != Status::Ok) {
            fail(out, kPost, st, 1);
        } else if ((st = dev::read(qp, j.back, j.size, j.back_lkey, j.a.addr, j.a.rkey, kSignaled,
                                   j.timeout_ns)) != Status::Ok) {
            fail(out, kPost, st, 2);
        }
    }
    g.sync();
    if (out->step) return;
    Status cs = g.commit(qp);  // one doorbell for the three WQEs
    if (g.lead()) {
        Completion c[3];
        uint32_t polled = 0;
        Status st;
        if (cs != Status::Ok) {
            fail(out, kCommit, cs);
        } else if ((st = dev::wait_send(qp, 3, c, j.timeout_ns, &polled)) != Status::Ok) {
            if (st != Status::CompletionError) {
                fail(out, kWaitSends, st, 0, polled);
            } else {
                for (uint32_t i = 0; i < 3; ++i)
                    if (c[i].status != 0) {
                        fail(out, kSendCheck, st, i);
                        found(out, kStatus, 0, c[i].status);
                        break;
                    }
            }
        }
    }
}

#if defined(__CUDACC__)
__global__ void server_kernel(ServerJob j, uint32_t r, RoundResult* out) {
    server_round(BlockGroup{}, j, r, out);
}
__global__ void client_kernel(ClientJob j, uint32_t r, RoundResult* out) {
    client_round(BlockGroup{}, j, r, out);
}
void launch(const ServerJob& j, uint32_t r, RoundResult* out) { server_kernel<<<1, kThreads>>>(j, r, out); }
void launch(const ClientJob& j, uint32_t r, RoundResult* out) { client_kernel<<<1, kThreads>>>(j, r, out); }
#endif
void run_cpu(const ServerJob& j, uint32_t r, RoundResult* out) { server_round(CpuGroup{}, j, r, out); }
void run_cpu(const ClientJob& j, uint32_t r, RoundResult* out) { client_round(CpuGroup{}, j, r, out); }

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
    int gpu = -2;  // -2: GPU 0 when the machine has one
    uint64_t size = 64 * 1024;
    uint32_t rounds = 10;
    int timeout_ms = oob::kDefaultTimeoutMs;
    int delay_ms = 0;
};

int usage(const char* me, FILE* f = stderr) {
    std::fprintf(f,
                 "usage: %s --server [options]\n"
                 "       %s --client HOST [options]\n"
                 "  --server         wait for a client (on --bind, default 127.0.0.1)\n"
                 "  --client HOST    connect to the server at HOST\n"
                 "  --port P         TCP port of the exchange (default %u; --server --port 0: a free one,\n"
                 "                   printed)\n"
                 "  --bind ADDR      address the server listens on (default 127.0.0.1)\n"
                 "  --device NAME    RDMA device: soft (the software device, default), mlx5, mlx5_N, verbs\n"
                 "  --gpu N          GPU whose kernels drive the data path (default 0 when the machine has\n"
                 "                   one); -1: CPU threads\n"
                 "  --size BYTES     buffer size, K or M suffix allowed (default 64K, at most 256M)\n"
                 "  --rounds N       rounds (default 10)\n"
                 "  --timeout-ms MS  bound of every wait (default %d; the server waits at least 60 s for a\n"
                 "                   client)\n"
                 "  --delay-ms MS    pause before every round after the first (default 0)\n"
                 "Both sides need the same --size and --rounds. Exit status: 0 validated, 1 failed,\n"
                 "2 bad usage, 77 the GPU asked for does not exist.\n",
                 me, me, unsigned(oob::kDefaultPort), oob::kDefaultTimeoutMs);
    return f == stderr ? 2 : 0;
}

/// Parses the command line; returns 0 to run, -1 after --help, or 2 after a usage error.
int parse(int argc, char** argv, Args& a) {
    bool server = false, client = false;
    for (int i = 1; i < argc; ++i) {
        std::string s = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw InvalidUsage(s + " needs a value");
            return argv[++i];
        };
        auto number = [&](long long lo, long long hi, bool suffix = false) {
            std::string v = value();
            char* end = nullptr;
            errno = 0;
            long long n = std::strtoll(v.c_str(), &end, 10);
            if (suffix && end && (*end == 'k' || *end == 'K')) n *= 1024, ++end;
            else if (suffix && end && (*end == 'm' || *end == 'M')) n *= 1024 * 1024, ++end;
            if (v.empty() || errno || *end || n < lo || n > hi)
                throw InvalidUsage(s + " " + v + ": expected an integer in " + std::to_string(lo) + " .. " +
                                   std::to_string(hi));
            return n;
        };
        if (s == "--server") server = true;
        else if (s == "--client") client = true, a.host = value();
        else if (s == "--port") a.port = uint16_t(number(0, 65535));
        else if (s == "--bind") a.bind = value();
        else if (s == "--device") a.device = value();
        else if (s == "--gpu") a.gpu = int(number(-1, 1023));
        else if (s == "--size") a.size = uint64_t(number(1, kMaxSize, true));
        else if (s == "--rounds") a.rounds = uint32_t(number(1, kMaxRounds));
        else if (s == "--timeout-ms") a.timeout_ms = int(number(1, 3600000));
        else if (s == "--delay-ms") a.delay_ms = int(number(0, 600000));
        else if (s == "--help" || s == "-h") return usage(argv[0], stdout) - 1;  // -1: exit 0
        else throw InvalidUsage("unknown option " + s);
    }
    if (server == client) throw InvalidUsage("give --server or --client HOST");
    if (client && a.port == 0) throw InvalidUsage("the client needs the server's --port");
    a.server = server;
    return 0;
}

ContextOptions context_options(const Args& a, int gpu) {
    ContextOptions o;
    o.gpu = gpu;
    if (a.device == "soft") o.backend = Backend::Soft;
    else if (a.device == "verbs") o.backend = Backend::Verbs;
    else if (a.device == "mlx5" || a.device.rfind("mlx5_", 0) == 0)
        o.backend = Backend::Mlx5, o.device = a.device == "mlx5" ? "" : a.device;
    else throw InvalidUsage("--device " + a.device + ": expected soft, mlx5, mlx5_N or verbs");
    return o;
}

/// The GPU to run on (-1: CPU threads), or -2 with *exit_code set. On a GPU, makes sure MPS
/// runs first: that must precede this process's first CUDA call.
int choose_gpu(const Args& a, int* exit_code) {
    const bool driver = access("/dev/nvidiactl", F_OK) == 0;  // no CUDA call yet
    int gpu = a.gpu;
    if (gpu == -2 && !(kCudaBuilt && driver)) gpu = -1;
    if (gpu == -1) return -1;
    if (!kCudaBuilt || !driver) {
        error("--gpu %d: %s; use --gpu -1 (CPU threads)", gpu,
              kCudaBuilt ? "no NVIDIA driver on this machine (no /dev/nvidiactl)" : "this build has no CUDA");
        *exit_code = 77;
        return -2;
    }
    // Kernels of two processes on one GPU need MPS to run at the same time.
    std::string note = mps::ensure(true);
    if (!note.empty()) std::fprintf(stderr, "[%s] warning: %s\n", g_role, note.c_str());
    const int n = Context::gpu_count();
    if (a.gpu == -2) return n > 0 ? 0 : -1;
    if (gpu >= n) {
        error("--gpu %d: %d CUDA GPU(s) visible; use --gpu -1 (CPU threads)", gpu, n);
        *exit_code = 77;
        return -2;
    }
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

/// Each side sends what it was asked to run; both must agree.
void agree(oob::Channel& ch, const Args& a) {
    std::vector<uint8_t> m(13);
    m[0] = 'P';
    std::memcpy(&m[1], &a.rounds, 4);
    std::memcpy(&m[5], &a.size, 8);
    ch.send_message(m, a.timeout_ms);
    std::vector<uint8_t> p = ch.recv_message(a.timeout_ms);
    if (p.size() != 13 || p[0] != 'P') throw RemoteError("the peer is not a client_server of this version");
    uint32_t rounds;
    uint64_t size;
    std::memcpy(&rounds, &p[1], 4);
    std::memcpy(&size, &p[5], 8);
    if (rounds != a.rounds || size != a.size)
        throw InvalidUsage(
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

int run_server(const Args& a) {
    int code = 0;
    const int gpu = choose_gpu(a, &code);
    if (code) return code;
    Context ctx(context_options(a, gpu));
    const bool on_gpu = ctx.gpu() >= 0;
    set_gpu(ctx.gpu());
    say("%s; %u rounds of %llu bytes", where(ctx).c_str(), a.rounds, (unsigned long long)a.size);
    ProtectionDomain pd(ctx);
    CompletionQueue scq(ctx), rcq(ctx);
    QpOptions qo;
    qo.send_cq = &scq;
    qo.recv_cq = &rcq;
    QueuePair qp(pd, qo);
    const size_t n = a.size;
    SharedBuffer buf_a(ctx, n), buf_b(ctx, n);  // the client WRITEs and READs A, SENDs into B
    LocalBuffer buf_d(on_gpu, n);               // our READ of the client's C lands here
    MemoryRegion mr_a(pd, buf_a.data(), n, kLocalWrite | kRemoteWrite | kRemoteRead);
    MemoryRegion mr_b(pd, buf_b.data(), n, kLocalWrite);
    MemoryRegion mr_d(pd, buf_d.data(), n, kLocalWrite);
    RoundRunner runner(on_gpu);

    oob::Listener lis = oob::Channel::listen(a.port, a.bind);
    say("listening on %s:%u", lis.address().c_str(), unsigned(lis.port()));
    oob::Channel ch = lis.accept(std::max(a.timeout_ms, 60000));
    lis.close();
    say("client %s connected", ch.peer().c_str());
    agree(ch, a);
    oob::Exchanged got = ch.exchange(ctx.backend(), {qp.endpoint()}, {mr_a.remote()}, a.timeout_ms);
    if (got.buffers.size() != 2 || got.buffers[0].length < 8 || got.buffers[1].length < n)
        throw RemoteError("the client exported unexpected buffers (want its flag and its buffer C)");
    qp.connect(got.qps.at(0));
    barrier(ch, a.timeout_ms);

    ServerJob j{qp.device_handle(), buf_b.as<uint8_t>(), mr_b.lkey(),
                buf_d.data(),       mr_d.lkey(),         got.buffers[0],
                got.buffers[1],     uint32_t(n),         uint64_t(a.timeout_ms) * 1000000ull};
    std::vector<uint8_t> tmp;
    for (uint32_t r = 1; r <= a.rounds; ++r) {
        if (r > 1 && a.delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(a.delay_ms));
        RoundResult o = runner.run(j, r, budget_ms(a), ch);
        if (o.step) {
            int rc =
                failed(ch, qp, format("round %u: ", r) + describe(o, true, a.timeout_ms), true, "client");
            if (o.step == kRoundHung || o.step == kPeerLeft) exit_now(rc);  // the round still runs
            return rc;
        }
        struct {
            const void* p;
            uint32_t kind;
            const char* name;
        } const checks[] = {
            {buf_a.data(), kA, "A"}, {buf_b.data(), kB, "B"}, {buf_d.data(), kC, "D (READ of C)"}};
        for (const auto& c : checks) {
            std::string bad = check_bytes(host_view(c.p, n, on_gpu, tmp), n, c.kind, r, c.name);
            if (!bad.empty()) return failed(ch, qp, bad, false, "client");
        }
        say("round %u verified: WRITE_IMM into A, SEND_IMM into B, READ of the client's C", r);
    }
    return finish(ch, a, "client");
}

int run_client(const Args& a) {
    int code = 0;
    const int gpu = choose_gpu(a, &code);
    if (code) return code;
    Context ctx(context_options(a, gpu));
    const bool on_gpu = ctx.gpu() >= 0;
    set_gpu(ctx.gpu());
    say("%s; %u rounds of %llu bytes", where(ctx).c_str(), a.rounds, (unsigned long long)a.size);
    ProtectionDomain pd(ctx);
    CompletionQueue scq(ctx), rcq(ctx);
    QpOptions qo;
    qo.send_cq = &scq;
    qo.recv_cq = &rcq;
    QueuePair qp(pd, qo);
    const size_t n = a.size;
    SharedBuffer flag(ctx, 64), buf_c(ctx, n);  // the server WRITEs the flag and READs C
    LocalBuffer src(on_gpu, 2 * n), back(on_gpu, n);
    MemoryRegion mr_flag(pd, flag.data(), 64, kLocalWrite | kRemoteWrite);
    MemoryRegion mr_c(pd, buf_c.data(), n, kRemoteRead);
    MemoryRegion mr_src(pd, src.data(), 2 * n, kLocalWrite);
    MemoryRegion mr_back(pd, back.data(), n, kLocalWrite);
    RoundRunner runner(on_gpu);

    oob::Channel ch = oob::Channel::connect(a.host, a.port, a.timeout_ms);
    say("connected to %s", ch.peer().c_str());
    agree(ch, a);
    oob::Exchanged got =
        ch.exchange(ctx.backend(), {qp.endpoint()}, {mr_flag.remote(), mr_c.remote()}, a.timeout_ms);
    if (got.buffers.size() != 1 || got.buffers[0].length < n)
        throw RemoteError("the server exported unexpected buffers (want its buffer A)");
    qp.connect(got.qps.at(0));
    barrier(ch, a.timeout_ms);

    ClientJob j{qp.device_handle(),  flag.as<unsigned long long>(),
                src.data(),          mr_src.lkey(),
                buf_c.as<uint8_t>(), back.data(),
                mr_back.lkey(),      got.buffers[0],
                uint32_t(n),         uint64_t(a.timeout_ms) * 1000000ull};
    std::vector<uint8_t> tmp;
    for (uint32_t r = 1; r <= a.rounds; ++r) {
        RoundResult o = runner.run(j, r, budget_ms(a), ch);
        if (o.step) {
            int rc =
                failed(ch, qp, format("round %u: ", r) + describe(o, false, a.timeout_ms), true, "server");
            if (o.step == kRoundHung || o.step == kPeerLeft) exit_now(rc);  // the round still runs
            return rc;
        }
        std::string bad =
            check_bytes(host_view(back.data(), n, on_gpu, tmp), n, kA, r, "READ of the server's A");
        if (!bad.empty()) return failed(ch, qp, bad, false, "server");
        say("round %u verified: WRITE_IMM into the server's A, SEND_IMM into its B, READ of A back", r);
    }
    return finish(ch, a, "server");
}

}  // namespace

int main(int argc, char** argv) {
    Args a;
    try {
        int rc = parse(argc, argv, a);
        if (rc) return rc < 0 ? 0 : rc;
    } catch (const Error& e) {
        std::fprintf(stderr, "client_server: %s\n", e.what());
        return usage(argv[0]);
    }
    g_role = a.server ? "server" : "client";
    try {
        return a.server ? run_server(a) : run_client(a);
    } catch (const std::exception& e) {
        error("%s", e.what());
        return 1;
    }
}
