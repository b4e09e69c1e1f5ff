// The software device across two GPUs of one host, one process per GPU (docs/two-gpus.md):
// this binary re-executed as the peer on GPU 1, off MPS (it is not needed when each process has
// its own GPU). The child's kernels do every operation into the parent's SharedBuffers and the
// parent's poller on GPU 0 sees RC order; a peer GPU that CUDA_VISIBLE_DEVICES hides is a clear
// error. The binary's main() (the child roles) is here. One process: two_gpu_test.cu.
#include "gpu/two_gpu_util.cuh"

namespace {
std::string g_exe;  // this binary, which the two-process tests start as the peer
}  // namespace

// ---- two processes, one GPU each ------------------------------------------------------------

namespace {

/// Starts this binary as the child `role` on GPU `gpu`, connecting to the parent's port.
/// visible: the child's CUDA_VISIBLE_DEVICES ("" leaves it as it is).
pid_t spawn_child(const char* role, int gpu, uint16_t port, const std::string& visible = "") {
    pid_t pid = fork();
    if (pid != 0) return pid;
    if (!visible.empty()) setenv("CUDA_VISIBLE_DEVICES", visible.c_str(), 1);
    const std::string p = std::to_string(port), g = std::to_string(gpu);
    execl(g_exe.c_str(), g_exe.c_str(), "--two-gpu-child", role, g.c_str(), p.c_str(), static_cast<char*>(nullptr));
    _exit(127);
}

constexpr uint32_t kOrderRounds = 64, kOrderChunks = 16;
constexpr size_t kRound = size_t(kOrderChunks) * kChunk;

// Child (GPU 1): per round, kOrderChunks WRITEs of round data into the round's own region of
// the parent's buffer, then the flag WRITE; a poller in the parent (GPU 0) checks each round.
__global__ void xorder_writer(dev::QpHandle qp, uint8_t* src, uint32_t lkey, uint64_t dst, uint32_t rkey,
                              uint64_t* src_flag, uint64_t flag, uint32_t flag_rkey, uint32_t rounds, Result* res) {
    __shared__ bool stop;
    for (uint32_t r = 1; r <= rounds; ++r) {
        uint8_t* mine = src + size_t(r) * kRound;
        if (threadIdx.x < kOrderChunks) {
            for (uint32_t i = 0; i < kChunk; ++i) mine[size_t(threadIdx.x) * kChunk + i] = uint8_t(r * 31 + threadIdx.x + i);
            dev::write(qp, mine + size_t(threadIdx.x) * kChunk, kChunk, lkey,
                       dst + size_t(r) * kRound + size_t(threadIdx.x) * kChunk, rkey, 0);
        }
        __syncthreads();
        if (threadIdx.x == kOrderChunks) {
            src_flag[r] = r;
            dev::write(qp, &src_flag[r], 8, lkey, flag, flag_rkey, kSignaled);
        }
        const Status cs = dev::commit<Scope::Block>(qp);
        if (threadIdx.x == 0) {
            // The first failed round ends the writer, with what it saw (a failure the child reports).
            const Status ws = dev::wait_send(qp, 1, &res->c[0], 5 * kNs, &res->n);
            stop = cs != Status::Ok || ws != Status::Ok;
            if (stop) {
                res->st[10] = cs;
                res->st[11] = ws;
                res->n = r;
            }
        }
        __syncthreads();
        if (stop) return;
    }
}
// Parent (GPU 0): waits for each round's flag (system scope: the writer is GPU 1's executor)
// and checks that round's bytes.
__global__ void xorder_poller(const uint8_t* dst, const uint64_t* flag, uint32_t rounds, unsigned long long* errors) {
    __shared__ uint64_t seen;
    for (uint32_t r = 1; r <= rounds; ++r) {
        if (threadIdx.x == 0) {
            const uint64_t t0 = atom::now_ns();
            uint64_t v = 0;
            while ((v = atom::load_acquire(flag, true)) < r && atom::now_ns() - t0 < 20 * kNs) {
            }
            seen = v;
        }
        __syncthreads();
        if (seen < r) {
            if (threadIdx.x == 0) atomicAdd(errors, 1ull << 48);
            return;
        }
        for (uint32_t w = 0; w < kOrderChunks; ++w)
            for (uint32_t i = threadIdx.x; i < kChunk; i += blockDim.x)
                if (dst[size_t(r) * kRound + size_t(w) * kChunk + i] != uint8_t(r * 31 + w + i)) atomicAdd(errors, 1ull);
        __syncthreads();
    }
}

/// The first byte of round r's region of the parent's buffer that is not what the writer
/// stores there (-1: all are).
long first_bad_round(const uint8_t* dst, uint32_t r) {
    std::vector<uint8_t> b = download(dst + size_t(r) * kRound, kRound);
    for (uint32_t w = 0; w < kOrderChunks; ++w)
        for (uint32_t i = 0; i < kChunk; ++i)
            if (b[size_t(w) * kChunk + i] != uint8_t(r * 31 + w + i)) return long(size_t(w) * kChunk + i);
    return -1;
}

void barrier(Channel& ch, uint8_t tag) { gvtest::barrier(ch, tag, kMs); }

// The child on GPU 1: every operation into the parent's SharedBuffers (GPU 0), then the
// ordering rounds.
int child_ops_role(int gpu, uint16_t port) {
    Channel ch = Channel::connect("127.0.0.1", port, kMs);
    gvtest::Side s(gpu);
    SharedBuffer local(s.ctx, 2 * kBig + (kOrderRounds + 1) * kRound + 64);
    CK(cudaSetDevice(gpu));
    uint8_t* src = local.as<uint8_t>();
    uint8_t* rd = src + kBig;
    uint8_t* osrc = src + 2 * kBig;
    uint64_t* old = reinterpret_cast<uint64_t*>(osrc + (kOrderRounds + 1) * kRound);
    CK(cudaMemset(local.data(), 0, local.size()));
    fill(gpu, src, kBig, 1);
    MemoryRegion ml(s.pd, local.data(), local.size(), kAllAccess);
    Exchanged got = ch.exchange(Backend::Soft, {s.qp.endpoint()}, {}, kMs);
    XCHECK(got.buffers.size() == 6, "exchange: 6 buffers expected");
    s.qp.connect(got.qps[0]);
    barrier(ch, 1);  // the parent connected and posted its receive
    Ops o{src, rd, old, ml.lkey(), ml.lkey(), ml.lkey(), got.buffers[0], got.buffers[1], got.buffers[2],
          got.buffers[3]};
    ResultMem r;
    ops_kernel<<<1, 128>>>(s.h(), o, r.r);
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < 8; ++i) XCHECK(r->st[i] == Status::Ok, "call " + std::to_string(i) + ": " + status_name(r->st[i]));
    XCHECK(r->n == 6, "6 completions");
    for (int i = 0; i < 6; ++i)
        XCHECK(r->c[i].ok(), "completion " + std::to_string(i) + ": " + mlx5::syndrome_name(r->c[i].status));
    XCHECK(first_bad(rd, kBig, 2) == -1, "READ data differs from the parent's buffer");
    std::vector<uint8_t> ov = download(old, 24);
    uint64_t v[3];
    std::memcpy(v, ov.data(), 24);
    XCHECK(v[0] == kCounter0 && v[1] == kCounter0 + 5 && v[2] == 0,
           "old values " + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ", " + std::to_string(v[2]));
    barrier(ch, 2);  // the parent checked; its poller starts
    barrier(ch, 3);
    ResultMem w;
    xorder_writer<<<1, 32>>>(s.h(), osrc, ml.lkey(), got.buffers[4].addr, got.buffers[4].rkey,
                             reinterpret_cast<uint64_t*>(osrc), got.buffers[5].addr, got.buffers[5].rkey,
                             kOrderRounds, w.r);
    CK(cudaDeviceSynchronize());
    XCHECK(w->st[10] == Status::Ok && w->st[11] == Status::Ok,
           "ordering writer, round " + std::to_string(w->n) + " of " + std::to_string(kOrderRounds) + ": commit " +
               status_name(w->st[10]) + ", wait_send " + status_name(w->st[11]) + " (completion: " +
               mlx5::syndrome_name(w->c[0].status) + "); the QP is in " + qp_state_name(s.qp.state()) +
               ", syndrome " + mlx5::syndrome_name(s.qp.error_syndrome()));
    barrier(ch, 4);
    return 0;
}

// The child sees only GPU 1 (CUDA_VISIBLE_DEVICES=1): connecting to the parent's QP on GPU 0
// must fail with the reason. It sends the message to the parent.
int child_hidden_role(int gpu, uint16_t port) {
    Channel ch = Channel::connect("127.0.0.1", port, kMs);
    gvtest::Side s(gpu);
    Exchanged got = ch.exchange(Backend::Soft, {s.qp.endpoint()}, {}, kMs);
    std::string msg = "connected";
    try {
        s.qp.connect(got.qps[0]);
    } catch (const Error& e) {
        msg = e.what();
    }
    ch.send_message(std::vector<uint8_t>(msg.begin(), msg.end()), kMs);
    barrier(ch, 9);
    return 0;
}

int run_child(const std::string& role, int gpu, uint16_t port) {
    alarm(150);
    try {
        if (role == "ops") return child_ops_role(gpu, port);
        if (role == "hidden") return child_hidden_role(gpu, port);
        std::fprintf(stderr, "unknown child role %s\n", role.c_str());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d (%s): %s\n", int(getpid()), role.c_str(), e.what());
        return 100;
    }
}

}  // namespace

// Bounds a two-process test: if it has not finished after `secs`, says which step it was in,
// kills the child and ends the process (a failure ctest reports at once, instead of the test's
// whole TIMEOUT; this test once hung on the two-H200 machine: see docs/two-gpus.md).
struct Watchdog {
    std::atomic<const char*> step{"start"};
    std::atomic<bool> done{false};
    pid_t child = 0;
    std::thread t;
    explicit Watchdog(int secs) {
        t = std::thread([this, secs] {
            const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(secs);
            while (!done.load() && std::chrono::steady_clock::now() < end)
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
            if (done.load()) return;
            std::fprintf(stderr, "watchdog: the test did not end within %d s; it was at: %s\n", secs, step.load());
            std::fflush(stderr);
            if (child > 0) kill(child, SIGKILL);
            _exit(1);
        });
    }
    ~Watchdog() {
        done.store(true);
        t.join();
    }
};

// Parent on GPU 0, child on GPU 1, one process each: the child's kernels do every operation
// into the parent's SharedBuffers (the parent's arena, on GPU 0, imported by the child and
// mapped for GPU 1), and the parent's poller on GPU 0 sees RC order of the child's WRITEs.
TEST(TwoGpu, EveryOperationAcrossGpusTwoProcesses) {
    SKIP_WITHOUT_TWO_GPUS();
    Watchdog wd(90);
    Listener lis = Channel::listen(0);
    pid_t child = spawn_child("ops", 1, lis.port());
    ASSERT_GT(child, 0);
    wd.child = child;
    wd.step = "accepting the child's connection";
    Channel ch = lis.accept(kMs);
    gvtest::Side s(0);
    SharedBuffer dst(s.ctx, kBig + kSig), rsrc(s.ctx, kBig), counter(s.ctx, 8), sig(s.ctx, 8), rbuf(s.ctx, kMsg);
    SharedBuffer odata(s.ctx, (kOrderRounds + 1) * kRound), oflag(s.ctx, 8);
    CK(cudaSetDevice(0));  // the buffers are mapped for GPU 0 (an earlier test may leave GPU 1 current)
    for (SharedBuffer* b : {&dst, &counter, &sig, &rbuf, &odata, &oflag}) CK(cudaMemset(b->data(), 0, b->size()));
    fill(0, rsrc.data(), kBig, 2);
    CK(cudaMemcpy(counter.data(), &kCounter0, 8, cudaMemcpyDefault));
    MemoryRegion md(s.pd, dst.data(), dst.size(), kAllAccess), mrs(s.pd, rsrc.data(), kBig, kAllAccess),
        mc(s.pd, counter.data(), 8, kAllAccess), msg(s.pd, sig.data(), 8, kAllAccess),
        mrb(s.pd, rbuf.data(), kMsg, kLocalWrite), mod(s.pd, odata.data(), odata.size(), kAllAccess),
        mof(s.pd, oflag.data(), 8, kAllAccess);
    wd.step = "exchanging endpoints and buffers";
    Exchanged got = ch.exchange(Backend::Soft, {s.qp.endpoint()},
                                {remote(dst.data(), md), remote(rsrc.data(), mrs), remote(counter.data(), mc),
                                 remote(sig.data(), msg), remote(odata.data(), mod), remote(oflag.data(), mof)},
                                kMs);
    wd.step = "connecting to the child's QP (GPU 1)";
    s.qp.connect(got.qps[0]);
    ResultMem r;
    CK(cudaSetDevice(0));
    wd.step = "posting the receive";
    post_recv_k<<<1, 1>>>(s.h(), rbuf.as<uint8_t>(), kMsg, mrb.lkey(), r.r);
    CK(cudaDeviceSynchronize());
    wd.step = "barrier 1 (the child connected)";
    barrier(ch, 1);
    wd.step = "barrier 2 (the child's operations done)";
    barrier(ch, 2);
    wd.step = "waiting for the child's SEND";
    wait_recv_k<<<1, 1>>>(s.h(), r.r);
    CK(cudaDeviceSynchronize());
    EXPECT_EQ(r->st[8], Status::Ok);
    EXPECT_EQ(r->st[9], Status::Ok) << status_name(r->st[9]);
    EXPECT_TRUE(r->c[7].ok() && r->c[7].byte_len == kMsg);
    EXPECT_EQ(first_bad(dst.data(), kBig, 1), -1) << "WRITE from GPU 1's process";
    EXPECT_EQ(first_bad(dst.as<uint8_t>() + kBig, kSig, 1, kBig - kSig), -1) << "put-with-signal data";
    EXPECT_EQ(first_bad(rbuf.data(), kMsg, 1), -1) << "SEND";
    EXPECT_EQ(get<uint64_t>(counter.data()), 77u);
    EXPECT_EQ(get<uint64_t>(sig.data()), 1u);
    GpuMem err(0, 8);
    cudaStream_t st0;
    CK(cudaStreamCreateWithFlags(&st0, cudaStreamNonBlocking));
    xorder_poller<<<1, 256, 0, st0>>>(odata.as<uint8_t>(), oflag.as<uint64_t>(), kOrderRounds,
                                      err.as<unsigned long long>());
    CK(cudaGetLastError());
    wd.step = "barrier 3 (the ordering poller started)";
    barrier(ch, 3);
    wd.step = "the ordering poller on GPU 0";
    CK(cudaStreamSynchronize(st0));
    CK(cudaStreamDestroy(st0));
    const unsigned long long e = get<unsigned long long>(err.p);
    EXPECT_EQ(e, 0ull) << "stale bytes seen on GPU 0: " << (e & 0xffffffff) << ", poller timeouts: " << (e >> 48)
                       << "; the flag reads " << get<uint64_t>(oflag.data()) << ", round 1's first bad byte: "
                       << first_bad_round(odata.as<uint8_t>(), 1);
    wd.step = "barrier 4 (the child's writer done)";
    barrier(ch, 4);
    wd.step = "waiting for the child to exit";
    gvtest::expect_exit_ok(gvtest::wait_child(child, 60000));
    wd.step = "tearing down";
}

// A child that sees only its own GPU (CUDA_VISIBLE_DEVICES=1) cannot reach the parent's GPU:
// its connect fails at once, naming the peer's GPU and CUDA_VISIBLE_DEVICES.
TEST(TwoGpu, PeerGpuHiddenByCudaVisibleDevicesIsAClearError) {
    SKIP_WITHOUT_TWO_GPUS();
    Listener lis = Channel::listen(0);
    pid_t child = spawn_child("hidden", 0, lis.port(), "1");
    ASSERT_GT(child, 0);
    Channel ch = lis.accept(kMs);
    gvtest::Side s(0);
    Exchanged got = ch.exchange(Backend::Soft, {s.qp.endpoint()}, {}, kMs);
    const std::vector<uint8_t> m = ch.recv_message(kMs);
    const std::string msg(m.begin(), m.end());
    EXPECT_NE(msg.find("which this process does not see"), std::string::npos) << msg;
    EXPECT_NE(msg.find("CUDA_VISIBLE_DEVICES=1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("GPU-"), std::string::npos) << msg;
    barrier(ch, 9);
    gvtest::expect_exit_ok(gvtest::wait_child(child, 60000));
}

int main(int argc, char** argv) {
    g_exe = "/proc/self/exe";
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n > 0) g_exe.assign(buf, size_t(n));
    // One process per GPU needs no MPS: keep this process and its children off any daemon
    // (a control directory with none), so the runs show it.
    const std::string dir = "/tmp/gv-two-gpu-no-mps-" + std::to_string(getpid());
    if (argc == 5 && std::string(argv[1]) == "--two-gpu-child")
        return run_child(argv[2], std::atoi(argv[3]), uint16_t(std::atoi(argv[4])));
    mkdir(dir.c_str(), 0700);
    setenv("CUDA_MPS_PIPE_DIRECTORY", dir.c_str(), 1);
    testing::InitGoogleTest(&argc, argv);
    const int rc = RUN_ALL_TESTS();
    rmdir(dir.c_str());
    return rc;
}
