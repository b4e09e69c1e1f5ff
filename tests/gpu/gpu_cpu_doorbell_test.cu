// CPU threads ringing QPs of a software device that executes on a GPU: their doorbells go on
// the device's board (src/soft/board.hpp), whose kernels serve every QP rung; a QP the board
// has no slot for gets one launch per doorbell. Nothing may be lost on either path: several
// threads on their own QPs at once, sends that wait for receives (the receive and drive
// doorbells), QPs created and destroyed while others ring, a board too small for the QPs.
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gpu/gpu_util.cuh"

using namespace gv;
using gvtest::DevBuf;

namespace {

/// A CUDA call that must succeed; throws what failed (usable where ASSERT_* cannot return).
#define CU(call)                                                                                       \
    do {                                                                                               \
        if (cudaError_t e_ = (call); e_ != cudaSuccess)                                               \
            throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(e_));              \
    } while (0)

/// Sets an environment variable for one scope (the board reads its size when the software
/// device opens, which is when the first Context on the GPU is made).
struct EnvVar {
    std::string name;
    explicit EnvVar(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
    ~EnvVar() { unsetenv(name.c_str()); }
};

/// One connected pair with host-memory queues (CPU threads post) and its buffers: `n` 8-byte
/// words to WRITE, a receive buffer for as many SENDs.
struct Lane {
    gvtest::Pair p;
    DevBuf src, dst, rbuf;
    std::unique_ptr<MemoryRegion> ms, md, mr;
    uint32_t n;
    uint64_t seed;

    Lane(const Context& ctx, uint32_t words, uint64_t s)
        : p(ctx, {}, MemoryKind::Host), src(words * 8ull), dst(words * 8ull), rbuf(words * 8ull), n(words), seed(s) {
        std::vector<uint64_t> v(n);
        for (uint32_t i = 0; i < n; ++i) v[i] = (seed << 32) | i;
        CU(cudaMemcpy(src.p, v.data(), n * 8ull, cudaMemcpyHostToDevice));
        CU(cudaMemset(dst.p, 0, n * 8ull));
        CU(cudaMemset(rbuf.p, 0, n * 8ull));
        // cudaMemcpy from pageable memory may return before its DMA has landed, and cudaMemset
        // may run after it returns: the executor (a kernel already running for other QPs, on
        // its own streams) must not read or write these buffers before they are ready.
        CU(cudaDeviceSynchronize());
        ms = std::make_unique<MemoryRegion>(p.pd, src.p, n * 8ull, kLocalWrite);
        md = std::make_unique<MemoryRegion>(p.pd, dst.p, n * 8ull, kAllAccess);
        mr = std::make_unique<MemoryRegion>(p.pd, rbuf.p, n * 8ull, kLocalWrite);
    }

    /// WRITEs every word in batches of `batch` (the last of each signaled, one commit each),
    /// waiting for each batch's completion. Returns "" or what went wrong.
    std::string write_all(uint32_t batch) {
        auto a = p.h(0);
        for (uint32_t i = 0; i < n; i += batch) {
            const uint32_t end = std::min(n, i + batch);
            for (uint32_t k = i; k < end; ++k) {
                const Status st = dev::write(a, src.get<uint64_t>() + k, 8, ms->lkey(),
                                             uint64_t(dst.get<uint64_t>() + k), md->rkey(),
                                             k + 1 == end ? kSignaled : 0);
                if (st != Status::Ok) return "write " + std::to_string(k) + ": " + status_name(st);
            }
            if (Status st = dev::commit(a); st != Status::Ok) return std::string("commit: ") + status_name(st);
            auto c = p.scq[0]->wait(1, 20000);
            if (c.size() != 1 || !c[0].ok()) return "batch at " + std::to_string(i) + ": no good completion";
        }
        return "";
    }

    /// SENDs every word into receives posted by this thread, `ahead` receives before the
    /// sends when ahead > 0; when ahead == 0 each SEND goes first and its receive a little
    /// later, so that the send waits under the RNR rules until the receive's doorbell (or the
    /// waiter's drive) lets it go.
    std::string send_all(uint32_t ahead, uint32_t count) {
        auto a = p.h(0), b = p.h(1);
        uint32_t posted = 0;
        auto post_recv = [&]() {
            const Status st = dev::recv(b, rbuf.get<uint64_t>() + posted, 8, mr->lkey());
            ++posted;
            return st;
        };
        for (uint32_t k = 0; k < ahead && posted < count; ++k)
            if (Status st = post_recv(); st != Status::Ok) return std::string("recv: ") + status_name(st);
        for (uint32_t k = 0; k < count; ++k) {
            if (Status st = dev::send(a, src.get<uint64_t>() + k, 8, ms->lkey(), kSignaled); st != Status::Ok)
                return "send " + std::to_string(k) + ": " + status_name(st);
            if (Status st = dev::commit(a); st != Status::Ok) return std::string("commit: ") + status_name(st);
            if (ahead == 0) {
                std::this_thread::sleep_for(std::chrono::microseconds(300));
                if (Status st = post_recv(); st != Status::Ok) return std::string("recv: ") + status_name(st);
            } else if (posted < count) {
                if (Status st = post_recv(); st != Status::Ok) return std::string("recv: ") + status_name(st);
            }
            auto c = p.scq[0]->wait(1, 20000);
            if (c.size() != 1 || !c[0].ok()) return "send " + std::to_string(k) + ": no good completion";
            auto r = p.rcq[1]->wait(1, 20000);
            if (r.size() != 1 || !r[0].ok() || r[0].byte_len != 8)
                return "receive " + std::to_string(k) + ": no good completion";
        }
        return "";
    }

    /// Where the WRITEs (words [0, writes)) and the SENDs (words [0, sends)) landed, against
    /// what was sent: "" or the first difference.
    std::string check(uint32_t writes, uint32_t sends) const {
        std::vector<uint64_t> d(n), r(n);
        CU(cudaMemcpy(d.data(), dst.p, n * 8ull, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(r.data(), rbuf.p, n * 8ull, cudaMemcpyDeviceToHost));
        for (uint32_t i = 0; i < writes; ++i)
            if (d[i] != ((seed << 32) | i)) return "written word " + std::to_string(i) + " wrong";
        for (uint32_t i = 0; i < sends; ++i)
            if (r[i] != ((seed << 32) | i)) return "received word " + std::to_string(i) + " wrong";
        return "";
    }
};

/// `threads` CPU threads, each on its own Lane, WRITE and SEND at once; every byte and every
/// completion must arrive.
void run_lanes(uint32_t threads, uint32_t words, uint32_t batch) {
    Context ctx = gvtest::gpu_ctx();
    std::vector<std::unique_ptr<Lane>> lanes;
    for (uint32_t t = 0; t < threads; ++t) lanes.push_back(std::make_unique<Lane>(ctx, words, 100 + t));
    std::vector<std::string> err(threads);
    std::vector<std::thread> th;
    for (uint32_t t = 0; t < threads; ++t)
        th.emplace_back([&, t] {
            try {
                err[t] = lanes[t]->write_all(batch);
                if (err[t].empty()) err[t] = lanes[t]->send_all(16, words / 4);
            } catch (const std::exception& e) {
                err[t] = e.what();
            }
        });
    for (auto& x : th) x.join();
    for (uint32_t t = 0; t < threads; ++t) {
        EXPECT_EQ(err[t], "") << "thread " << t;
        EXPECT_EQ(lanes[t]->check(words, words / 4), "") << "thread " << t;
    }
}

}  // namespace

TEST(CpuDoorbells, ThreadsOnTheirOwnQpsLoseNothing) {
    GV_SKIP_WITHOUT_GPU();
    run_lanes(8, 4096, 64);
}

// One WQE per doorbell: the most doorbells for the work, each a board kernel's sweep or a
// counter a running kernel must notice.
TEST(CpuDoorbells, OneWqePerDoorbell) {
    GV_SKIP_WITHOUT_GPU();
    run_lanes(4, 1024, 1);
}

// A board of 3 slots for 16 QPs: the first three get slots, the others a launch per doorbell;
// both kinds run side by side.
TEST(CpuDoorbells, BoardTooSmallFallsBackToALaunchPerDoorbell) {
    GV_SKIP_WITHOUT_GPU();
    EnvVar env("GV_DOORBELL_BOARD_SLOTS", "3");
    run_lanes(8, 1024, 16);
}

// No board at all (GV_DOORBELL_BOARD_SLOTS=0): every doorbell its own launch, as before.
TEST(CpuDoorbells, NoBoardLaunchesPerDoorbell) {
    GV_SKIP_WITHOUT_GPU();
    EnvVar env("GV_DOORBELL_BOARD_SLOTS", "0");
    run_lanes(4, 1024, 16);
}

// Board kernels whose time runs out while they still find work: each block must agree on
// when to stop. Warps that once read the clock each for themselves disagreed when the time
// ran out between their reads, their barriers stopped pairing up, and a drain's WQEs staged by
// warps 1 to 7 were other ring slots (LOCAL_QP_OP_ERR, words not written): on the H200 in about
// one run in five of ThreadsOnTheirOwnQpsLoseNothing repeated in one process. Every kernel that
// ends on the clock rather than on an idle sweep is one chance for that race; with 2 us nearly
// every kernel that finds work ends so, and four rounds give it more chances again.
TEST(CpuDoorbells, KernelsOutOfTimeMidWorkLoseNothing) {
    GV_SKIP_WITHOUT_GPU();
    EnvVar env("GV_DOORBELL_BOARD_SWEEP_NS", "2000");
    for (int round = 0; round < 4 && !::testing::Test::HasFailure(); ++round) run_lanes(8, 4096, 64);
}

TEST(CpuDoorbells, BadSweepTimeIsRefused) {
    GV_SKIP_WITHOUT_GPU();
    for (const char* bad : {"soon", "-5", "2000000000"}) {
        EnvVar env("GV_DOORBELL_BOARD_SWEEP_NS", bad);
        try {
            Context ctx = gvtest::gpu_ctx();
            ADD_FAILURE() << "a Context opened with GV_DOORBELL_BOARD_SWEEP_NS=" << bad;
        } catch (const InvalidUsage& e) {
            EXPECT_NE(std::string(e.what()).find(std::string("GV_DOORBELL_BOARD_SWEEP_NS=") + bad), std::string::npos)
                << e.what();
            EXPECT_NE(std::string(e.what()).find("0 (one sweep per kernel) to 1000000000"), std::string::npos)
                << e.what();
        }
    }
}

TEST(CpuDoorbells, BadBoardSizeIsRefused) {
    GV_SKIP_WITHOUT_GPU();
    EnvVar env("GV_DOORBELL_BOARD_SLOTS", "lots");
    try {
        Context ctx = gvtest::gpu_ctx();
        FAIL() << "a Context opened with GV_DOORBELL_BOARD_SLOTS=lots";
    } catch (const InvalidUsage& e) {
        EXPECT_NE(std::string(e.what()).find("GV_DOORBELL_BOARD_SLOTS=lots"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("0 (no board) to 65535"), std::string::npos) << e.what();
    }
}

// Each SEND is posted before its receive: it waits under the RNR rules until the receive's
// doorbell (or the CPU waiter's drive doorbell) lets it go. Both kinds go through the board.
TEST(CpuDoorbells, SendsWaitForReceivesPostedLater) {
    GV_SKIP_WITHOUT_GPU();
    Context ctx = gvtest::gpu_ctx();
    Lane a(ctx, 64, 7), b(ctx, 64, 8);
    std::string ea, eb;
    std::thread t([&] { eb = b.send_all(0, 32); });
    ea = a.send_all(0, 32);
    t.join();
    EXPECT_EQ(ea, "");
    EXPECT_EQ(eb, "");
    EXPECT_EQ(a.check(0, 32), "");
    EXPECT_EQ(b.check(0, 32), "");
}

// QPs come and go (their slots freed and taken again) while other threads keep ringing theirs:
// a freed slot is never served for the QP that had it, a new QP's slot starts clean.
TEST(CpuDoorbells, QpsComeAndGoWhileOthersRing) {
    GV_SKIP_WITHOUT_GPU();
    Context ctx = gvtest::gpu_ctx();
    std::vector<std::unique_ptr<Lane>> busy;
    for (int t = 0; t < 4; ++t) busy.push_back(std::make_unique<Lane>(ctx, 2048, 200 + t));
    std::vector<std::string> err(busy.size());
    std::vector<std::thread> th;
    for (size_t t = 0; t < busy.size(); ++t)
        th.emplace_back([&, t] {
            try {
                for (int round = 0; round < 8 && err[t].empty(); ++round) err[t] = busy[t]->write_all(8);
            } catch (const std::exception& e) {
                err[t] = e.what();
            }
        });
    std::string churn;
    try {
        for (int i = 0; i < 40 && churn.empty(); ++i) {
            Lane l(ctx, 64, 300 + i);
            churn = l.write_all(16);
            if (churn.empty()) churn = l.check(64, 0);
            if (!churn.empty()) churn = "QP pair " + std::to_string(i) + ": " + churn;
        }
    } catch (const std::exception& e) {
        churn = e.what();
    }
    for (auto& x : th) x.join();
    EXPECT_EQ(churn, "");
    for (size_t t = 0; t < busy.size(); ++t) {
        EXPECT_EQ(err[t], "") << "thread " << t;
        EXPECT_EQ(busy[t]->check(2048, 0), "") << "thread " << t;
    }
}

// One commit publishes far more WQEBBs than the executor stages at once (64), with WQEs of one
// and of two WQEBBs mixed, so that stage boundaries fall inside two-WQEBB WQEs and the ring
// wraps: each drain takes the whole WQEs its stage holds, the next stages the rest, and every
// byte lands where its WQE says.
TEST(CpuDoorbells, LongListsOfMixedSizesCrossTheStage) {
    GV_SKIP_WITHOUT_GPU();
    Context ctx = gvtest::gpu_ctx();
    QpOptions o;
    o.sq_depth = 512;  // WQEs of max_send_sge entries: 1024 WQEBBs
    o.max_send_sge = 4;
    gvtest::Pair p(ctx, o, MemoryKind::Host);
    constexpr uint32_t kWords = 600;  // about 400 WQEBBs a round: within the ring, no completion polled before the last
    DevBuf src(kWords * 8), dst(kWords * 8);
    std::vector<uint64_t> v(kWords), out(kWords);
    for (uint32_t i = 0; i < kWords; ++i) v[i] = 0xd00d000000000000ull | (uint64_t(i) << 8) | 0x5a;
    CUDA_OK(cudaMemcpy(src.p, v.data(), kWords * 8, cudaMemcpyHostToDevice));
    CUDA_OK(cudaDeviceSynchronize());
    MemoryRegion ms(p.pd, src.p, kWords * 8, kLocalWrite);
    MemoryRegion md(p.pd, dst.p, kWords * 8, kAllAccess);
    auto a = p.h(0);
    const auto* s = src.get<uint64_t>();
    auto* d = dst.get<uint64_t>();
    for (int round = 0; round < 3; ++round) {  // the second and third rounds wrap the ring
        CUDA_OK(cudaMemset(dst.p, 0, kWords * 8));
        CUDA_OK(cudaDeviceSynchronize());  // the buffers ready before the executor touches them
        uint32_t k = 0, wqes = 0;
        while (k < kWords) {
            // Three 8-byte pieces gathered into 24 contiguous bytes (ctrl, raddr, three data
            // segments: two WQEBBs), or one piece (one WQEBB); the pattern shifts each round.
            const bool three = ((k + round) % 5) < 2 && k + 3 <= kWords;
            const uint32_t n = three ? 3 : 1;
            Sge sg[3];
            for (uint32_t j = 0; j < n; ++j) sg[j] = {uint64_t(s + k + j), 8, ms.lkey()};
            const bool last = k + n == kWords;
            ASSERT_EQ(dev::post_sge(a, MLX5_OPCODE_RDMA_WRITE, sg, n, uint64_t(d + k), md.rkey(), 0,
                                    last ? kSignaled : 0u),
                      Status::Ok)
                << "round " << round << " word " << k;
            k += n;
            ++wqes;
            if (wqes % 100 == 0 && !last) ASSERT_EQ(dev::commit(a), Status::Ok);  // some lists, not one
        }
        ASSERT_EQ(dev::commit(a), Status::Ok);
        auto c = p.scq[0]->wait(1, 20000);
        ASSERT_EQ(c.size(), 1u);
        EXPECT_TRUE(c[0].ok()) << "status " << int(c[0].status);
        CUDA_OK(cudaMemcpy(out.data(), dst.p, kWords * 8, cudaMemcpyDeviceToHost));
        for (uint32_t i = 0; i < kWords; ++i) ASSERT_EQ(out[i], v[i]) << "round " << round << " word " << i;
    }
}
