// The executor's group path on the CPU: one drain run by a group of CPU threads (rank, size,
// a barrier, a broadcast), as a CUDA block runs it, so that the hand-off of plans, the copy by
// every member but the planning warp and the plan made ahead (groups of 256 or more: drain()
// in gpuverbs/detail/soft/exec.cuh) are checked where a debugger and sanitizers reach them.
// The GPU runs the same code in tests/gpu/gpu_plan_ahead_test.cu.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <initializer_list>
#include <mutex>
#include <thread>

#include "test_util.hpp"

using namespace gv;
using gvtest::HostBuf;
using gvtest::Pair;

namespace {

/// A reusable barrier for n threads (sense-reversing; mutex and condition variable, so every
/// member's writes before it are visible to every member after it).
class Barrier {
public:
    explicit Barrier(uint32_t n) : n_(n) {}
    void wait() {
        std::unique_lock<std::mutex> l(m_);
        const uint64_t gen = gen_;
        if (++count_ == n_) {
            count_ = 0;
            ++gen_;
            cv_.notify_all();
        } else {
            cv_.wait(l, [&] { return gen_ != gen; });
        }
    }

private:
    std::mutex m_;
    std::condition_variable cv_;
    uint32_t n_, count_ = 0;
    uint64_t gen_ = 0;
};

/// Runs f(n) for every group size n in sizes, each named in what fails under it.
template <class F>
void for_sizes(std::initializer_list<uint32_t> sizes, F f) {
    for (uint32_t n : sizes) {
        SCOPED_TRACE(testing::Message() << n << " threads");
        f(n);
    }
}

/// What drain() needs of a group, for CPU threads.
struct CpuGroup {
    uint32_t r, n;
    Barrier* bar;
    uint64_t* slot;
    uint32_t rank() const { return r; }
    uint32_t size() const { return n; }
    bool leader() const { return r == 0; }
    void sync() const { bar->wait(); }
    uint64_t bcast(uint64_t v) const {
        bar->wait();
        if (leader()) *slot = v;
        bar->wait();
        return *slot;
    }
};

/// Rings QP a's doorbell and executes its published work with a group of n CPU threads.
void commit_with_group(const dev::QpHandle& a, uint32_t n) {
    dev::sq_dbrec_to_published(a);
    Barrier bar(n);
    uint64_t slot = 0;
    std::vector<std::thread> th;
    for (uint32_t r = 0; r < n; ++r)
        th.emplace_back([&, r] { detail::soft::progress(a.soft.ctx, CpuGroup{r, n, &bar, &slot}); });
    for (auto& t : th) t.join();
}

// The traffic suite's gather/scatter round, many rounds in one drain: a WRITE gathers up to 8
// pieces into the peer's memory, then a READ scatters the same range back over up to 8
// entries (some empty). Sizes put WQEs on both sides of the leader-alone limit (128 bytes).
void gather_scatter(uint32_t threads, uint64_t seed) {
    QpOptions o;
    o.sq_depth = 4096;
    o.max_send_sge = 8;
    Pair p(gvtest::cpu_context(), o);
    constexpr size_t kPiece = 1024, kSlot = 8 * kPiece;
    constexpr uint32_t kRounds = 48;
    HostBuf src(p.pd, kRounds * kSlot, kLocalWrite), dst(p.pd, kRounds * kSlot, kAllAccess),
        back(p.pd, kRounds * kSlot, kLocalWrite);
    gvtest::fill_random(src.data(), src.size(), seed);
    std::vector<uint8_t> want_dst(dst.size(), gvtest::kGuard), want_back(back.size(), gvtest::kGuard);
    std::mt19937_64 rng(seed);
    auto a = p.h(0);
    uint32_t posted = 0;
    for (uint32_t r = 0; r < kRounds; ++r) {
        const size_t base = r * kSlot;
        const uint32_t ns = 1 + uint32_t(rng() % 8);
        std::vector<Sge> gs;
        std::vector<uint8_t> bytes;
        const bool tiny = r % 5 == 3;  // now and then a WQE the leader runs alone
        for (uint32_t i = 0; i < ns; ++i) {
            uint32_t len = tiny ? uint32_t(rng() % 12) : i == 0 ? 1 + uint32_t(rng() % 600) : uint32_t(rng() % 600);
            if (rng() % 4 == 0 && i) len = 0;
            const size_t off = base + i * kPiece + rng() % 100;
            gs.push_back({src.addr(off), len, src.lkey()});
            bytes.insert(bytes.end(), src.at(off), src.at(off) + len);
        }
        const size_t total = bytes.size();
        const size_t doff = base + rng() % (kSlot - total + 1);
        std::copy(bytes.begin(), bytes.end(), want_dst.begin() + doff);
        ASSERT_EQ(dev::post_sge(a, MLX5_OPCODE_RDMA_WRITE, gs.data(), ns, dst.addr(doff), dst.rkey(), 0, 0), Status::Ok);
        const uint32_t nr = 1 + uint32_t(rng() % 8);
        std::vector<size_t> cuts = {0, total};
        for (uint32_t i = 1; i < nr; ++i) cuts.push_back(rng() % (total + 1));
        std::sort(cuts.begin(), cuts.end());
        std::vector<Sge> rs;
        for (uint32_t i = 0; i < nr; ++i) {
            const uint32_t len = uint32_t(cuts[i + 1] - cuts[i]);
            const size_t off = base + i * kPiece + rng() % (kPiece - std::min<size_t>(len, kPiece - 1));
            rs.push_back({back.addr(off), len, back.lkey()});
            std::copy(bytes.begin() + cuts[i], bytes.begin() + cuts[i + 1], want_back.begin() + off);
        }
        const uint32_t fl = r + 1 == kRounds ? kSignaled : 0;
        ASSERT_EQ(dev::post_sge(a, MLX5_OPCODE_RDMA_READ, rs.data(), nr, dst.addr(doff), dst.rkey(), 0, fl), Status::Ok);
        posted += 2;
    }
    commit_with_group(a, threads);
    Completion c{};
    ASSERT_EQ(dev::wait_send(a, 1, &c, 2'000'000'000ull), Status::Ok) << gvtest::qp_debug(a);
    EXPECT_EQ(c.status, 0);
    long d = gvtest::first_diff(want_dst.data(), dst.data(), dst.size());
    EXPECT_EQ(d, -1) << "WRITE targets: byte " << d << " (round " << d / long(kSlot) << ")";
    d = gvtest::first_diff(want_back.data(), back.data(), back.size());
    long e = d;
    while (e >= 0 && e < long(back.size()) && want_back[e] != back.data()[e]) ++e;
    EXPECT_EQ(d, -1) << "READ scatter entries: bytes " << d << ".." << e << " (round " << d / long(kSlot) << ")";
    EXPECT_EQ(p.qp[0]->state(), QpState::Rts);
    (void)posted;
}

}  // namespace

// Seed 31 puts overlapping scatter entries in round 0 (a cut longer than its 1 KiB piece runs
// into the next entry's bytes): they must land in list order whatever the group's size.
TEST(SoftGroupExec, GatherScatterGroupOf256PlansAhead) {
    gather_scatter(256, 31);
    gather_scatter(256, 34);
}
TEST(SoftGroupExec, GatherScatterGroupOf512PlansAhead) { gather_scatter(512, 33); }
TEST(SoftGroupExec, GatherScatterGroupsThatTakeTurns) {
    for_sizes({1u, 2u, 64u}, [](uint32_t n) {
        gather_scatter(n, 31);
        gather_scatter(n, 32);
    });
}

// Two scatter entries over the same 2 KiB, then a third over part of both: every byte holds
// what the last entry covering it received, as a NIC's in-order DMA leaves it.
TEST(SoftGroupExec, OverlappingScatterEntriesLandInListOrder) {
    for (uint32_t n : {1u, 64u, 256u}) {
        SCOPED_TRACE(testing::Message() << n << " threads");
        QpOptions o;
        o.max_send_sge = 8;
        Pair p(gvtest::cpu_context(), o);
        HostBuf src(p.pd, 8192, kAllAccess), back(p.pd, 4096, kLocalWrite);
        gvtest::fill_random(src.data(), src.size(), 40 + n);
        auto a = p.h(0);
        const Sge rs[3] = {{back.addr(0), 2048, back.lkey()}, {back.addr(0), 2048, back.lkey()},
                           {back.addr(1000), 1500, back.lkey()}};
        ASSERT_EQ(dev::post_sge(a, MLX5_OPCODE_RDMA_READ, rs, 3, src.addr(0), src.rkey(), 0, kSignaled), Status::Ok);
        commit_with_group(a, n);
        Completion c{};
        ASSERT_EQ(dev::wait_send(a, 1, &c, 2'000'000'000ull), Status::Ok);
        std::vector<uint8_t> want(4096, gvtest::kGuard);
        std::copy(src.at(0), src.at(2048), want.begin());
        std::copy(src.at(2048), src.at(4096), want.begin());
        std::copy(src.at(4096), src.at(5596), want.begin() + 1000);
        EXPECT_EQ(gvtest::first_diff(want.data(), back.data(), 4096), -1);
    }
}

namespace {

// Chained WQEs (groups of 256 or more): an unsignaled WRITE or READ completes while the group
// copies the next one, so sq_ci and the CQEs must come out as if each had completed in its
// turn. Rounds of 1 KiB WRITEs, every 7th and each round's last signaled, through a ring of 64
// WQEs that a round fills, so that every round reuses the slots the one before retired.
void chained_rounds(uint32_t threads) {
    QpOptions o;
    o.sq_depth = 64;
    Pair p(gvtest::cpu_context(), o);
    constexpr uint32_t kLen = 1024, kPerRound = 64, kRounds = 4;
    HostBuf src(p.pd, size_t(kRounds) * kPerRound * kLen, kLocalWrite),
        dst(p.pd, size_t(kRounds) * kPerRound * kLen, kAllAccess);
    gvtest::fill_random(src.data(), src.size(), 50 + threads);
    auto a = p.h(0);
    uint32_t wqe = 0;
    for (uint32_t r = 0; r < kRounds; ++r) {
        std::vector<uint16_t> want;
        for (uint32_t i = 0; i < kPerRound; ++i, ++wqe) {
            const size_t off = size_t(wqe) * kLen;
            const bool sig = i % 7 == 6 || i + 1 == kPerRound;
            if (sig) want.push_back(uint16_t(wqe));
            ASSERT_EQ(dev::write(a, src.at(off), kLen, src.lkey(), dst.addr(off), dst.rkey(), sig ? kSignaled : 0u),
                      Status::Ok)
                << "round " << r << ", WQE " << i << ": " << gvtest::qp_debug(a);
        }
        commit_with_group(a, threads);
        std::vector<Completion> c(want.size());
        uint32_t got = 0;
        ASSERT_EQ(dev::wait_send(a, uint32_t(want.size()), c.data(), 2'000'000'000ull, &got), Status::Ok)
            << "round " << r << ": " << got << " of " << want.size() << " completions";
        for (size_t i = 0; i < want.size(); ++i) {
            EXPECT_EQ(c[i].status, 0) << "round " << r << ", completion " << i;
            EXPECT_EQ(c[i].wqe_counter, want[i]) << "round " << r << ", completion " << i;
        }
        EXPECT_EQ(dev::poll_cq(a.scq, c.data(), 1), 0u) << "a completion of an unsignaled WRITE";
    }
    EXPECT_EQ(gvtest::first_diff(src.data(), dst.data(), dst.size()), -1);
    EXPECT_EQ(p.qp[0]->state(), QpState::Rts);
}

// A completion lost to a full CQ in a stream of chained WQEs: the signaled WRITE whose CQE
// finds the CQ full moves the QP to ERROR. It is not chained (it is signaled), so the WRITE
// after it, planned while it was copied, is dropped and flushes: the WRITEs whose bytes land
// are exactly those up to the lost completion's, chained ones included.
void lost_completion_mid_chain(uint32_t threads) {
    QpOptions o;
    o.sq_depth = 256;
    Pair p(gvtest::cpu_context(), o, MemoryKind::Default, 4);
    const uint32_t depth = p.scq[0]->depth();
    constexpr uint32_t kLen = 512, kEvery = 8;
    const uint32_t n = kEvery * (depth + 3);
    ASSERT_LE(n, 256u);
    HostBuf src(p.pd, size_t(n) * kLen, kLocalWrite), dst(p.pd, size_t(n) * kLen, kAllAccess);
    gvtest::fill_random(src.data(), src.size(), 60 + threads);
    std::memset(dst.data(), gvtest::kGuard, dst.size());
    auto a = p.h(0);
    for (uint32_t w = 0; w < n; ++w) {
        const size_t off = size_t(w) * kLen;
        ASSERT_EQ(dev::write(a, src.at(off), kLen, src.lkey(), dst.addr(off), dst.rkey(),
                             w % kEvery == kEvery - 1 ? kSignaled : 0u),
                  Status::Ok);
    }
    commit_with_group(a, threads);
    EXPECT_EQ(p.qp[0]->state(), QpState::Error);
    // depth CQEs fit; the next signaled WRITE's is lost.
    const uint32_t last = kEvery * (depth + 1) - 1;
    uint32_t landed = 0;
    while (landed < n && std::memcmp(dst.at(size_t(landed) * kLen), src.at(size_t(landed) * kLen), kLen) == 0)
        ++landed;
    EXPECT_EQ(landed, last + 1) << "WRITEs whose data landed, of " << n << " (CQ depth " << depth << ")";
    for (uint32_t w = landed; w < n; ++w)
        for (size_t i = 0; i < kLen; ++i)
            ASSERT_EQ(dst.data()[size_t(w) * kLen + i], gvtest::kGuard) << "flushed WRITE " << w << " wrote byte " << i;
}

}  // namespace

TEST(SoftGroupExec, ChainedWqesCompleteInTurn) { for_sizes({512u, 256u, 64u}, chained_rounds); }

TEST(SoftGroupExec, LostCompletionEndsTheChain) { for_sizes({512u, 256u, 1u}, lost_completion_mid_chain); }

namespace {

// SENDs planned ahead (the leader looks at the peer's next receive while the group copies the
// WQE before, and claims it when it hands the plan out): SENDs of 100 to 1600 bytes, some
// under the leader-alone limit, with 1 KiB WRITEs between them (a WRITE that completes quietly
// hands the SEND after it out before its own barrier), into receives of two scatter entries
// each. first_receives are posted before the commit; the rest after it, when the SEND that
// found no receive waits under the RNR rules and the receives' doorbell retries it.
void sends_ahead(uint32_t threads, uint32_t first_receives) {
    QpOptions o;
    o.sq_depth = 512;
    o.rq_depth = 256;
    o.max_recv_sge = 2;
    Pair p(gvtest::cpu_context(), o);
    constexpr uint32_t kSends = 96, kPiece = 1024;
    HostBuf src(p.pd, size_t(kSends) * 2 * kPiece, kLocalWrite), rbuf(p.pd, size_t(kSends) * 2 * kPiece, kLocalWrite),
        wdst(p.pd, size_t(kSends) * kPiece, kAllAccess);
    gvtest::fill_random(src.data(), src.size(), 70 + threads);
    std::mt19937_64 rng(threads * 7 + first_receives);
    auto a = p.h(0), b = p.h(1);
    std::vector<uint32_t> len(kSends);
    auto post_receive = [&](uint32_t i) {
        const Sge rs[2] = {{rbuf.addr(size_t(i) * 2 * kPiece), 600, rbuf.lkey()},
                           {rbuf.addr(size_t(i) * 2 * kPiece + kPiece), kPiece, rbuf.lkey()}};
        ASSERT_EQ(dev::post_recv(b, rs, 2), Status::Ok);
    };
    for (uint32_t i = 0; i < first_receives; ++i) post_receive(i);
    for (uint32_t i = 0; i < kSends; ++i) {
        len[i] = i % 9 == 4 ? 100 : 129 + uint32_t(rng() % 1472);
        const uint32_t fl = i + 1 == kSends ? kSignaled : 0u;
        ASSERT_EQ(dev::send(a, src.at(size_t(i) * 2 * kPiece), len[i], src.lkey(), fl), Status::Ok);
        if (i % 3 == 1)
            ASSERT_EQ(dev::write(a, src.at(size_t(i) * 2 * kPiece + kPiece), kPiece, src.lkey(),
                                 wdst.addr(size_t(i) * kPiece), wdst.rkey(), 0u),
                      Status::Ok);
    }
    commit_with_group(a, threads);
    for (uint32_t i = first_receives; i < kSends; ++i) post_receive(i);
    Completion c{};
    ASSERT_EQ(dev::wait_send(a, 1, &c, 5'000'000'000ull), Status::Ok) << gvtest::qp_debug(a);
    EXPECT_EQ(c.status, 0);
    std::vector<Completion> rc(kSends);
    uint32_t got = 0;
    ASSERT_EQ(dev::wait_recv(b, kSends, rc.data(), 5'000'000'000ull, &got), Status::Ok) << got << " receive completions";
    for (uint32_t i = 0; i < kSends; ++i) {
        EXPECT_EQ(rc[i].status, 0) << "receive " << i;
        EXPECT_EQ(rc[i].wqe_counter, uint16_t(i)) << "receive " << i;
        EXPECT_EQ(rc[i].byte_len, len[i]) << "receive " << i;
        // SEND i's bytes: 600 into the first entry, the rest into the second.
        const uint8_t* s = src.at(size_t(i) * 2 * kPiece);
        const uint32_t first = std::min(len[i], 600u);
        EXPECT_EQ(std::memcmp(rbuf.at(size_t(i) * 2 * kPiece), s, first), 0) << "receive " << i << ", entry 0";
        EXPECT_EQ(std::memcmp(rbuf.at(size_t(i) * 2 * kPiece + kPiece), s + first, len[i] - first), 0)
            << "receive " << i << ", entry 1";
        if (i % 3 == 1)
            EXPECT_EQ(std::memcmp(wdst.at(size_t(i) * kPiece), s + kPiece, kPiece), 0) << "WRITE after SEND " << i;
    }
    EXPECT_EQ(p.qp[0]->state(), QpState::Rts);
    EXPECT_EQ(p.qp[1]->state(), QpState::Rts);
}

// A receive completion lost to the peer's full CQ while the SEND after it was planned ahead on
// the next receive: the peer goes to ERROR, the plan (and its unclaimed receive) is dropped,
// and no byte of the later SENDs lands.
void send_ahead_lost_receive_completion(uint32_t threads) {
    QpOptions o;
    o.sq_depth = 64;
    o.rq_depth = 64;
    Pair p(gvtest::cpu_context(), o, MemoryKind::Default, 4);
    const uint32_t depth = p.rcq[1]->depth();
    const uint32_t n = depth + 4;
    constexpr uint32_t kLen = 512;
    HostBuf src(p.pd, size_t(n) * kLen, kLocalWrite), rbuf(p.pd, size_t(n) * kLen, kLocalWrite);
    gvtest::fill_random(src.data(), src.size(), 80 + threads);
    std::memset(rbuf.data(), gvtest::kGuard, rbuf.size());
    auto a = p.h(0), b = p.h(1);
    for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(dev::recv(b, rbuf.at(size_t(i) * kLen), kLen, rbuf.lkey()), Status::Ok);
    for (uint32_t i = 0; i < n; ++i)
        ASSERT_EQ(dev::send(a, src.at(size_t(i) * kLen), kLen, src.lkey(), 0u), Status::Ok);
    commit_with_group(a, threads);
    EXPECT_EQ(p.qp[1]->state(), QpState::Error);
    uint32_t landed = 0;
    while (landed < n && std::memcmp(rbuf.at(size_t(landed) * kLen), src.at(size_t(landed) * kLen), kLen) == 0)
        ++landed;
    EXPECT_EQ(landed, depth + 1) << "SENDs whose data landed, of " << n << " (receive CQ depth " << depth << ")";
    for (uint32_t w = landed; w < n; ++w)
        for (size_t i = 0; i < kLen; ++i)
            ASSERT_EQ(rbuf.data()[size_t(w) * kLen + i], gvtest::kGuard) << "SEND " << w << " wrote byte " << i;
}

// SENDs in runs (send_run.cuh): a group's drain takes up to 16 SENDs of more than 128 bytes
// at once, each into a receive whose first entry takes it whole. A stream of 4 KiB SENDs (alike:
// one pass over all of a run's words) with SENDs of odd sizes and offsets, small SENDs (the
// leader's fast path and prepare()), 1 KiB WRITEs and signaled SENDs (which end a run) between
// them; every receive completion in order with its length, every byte in place and the guard
// after it untouched, every requester completion, and runs taken.
void send_runs(uint32_t threads) {
    QpOptions o;
    o.sq_depth = 1024;
    o.rq_depth = 512;
    Pair p(gvtest::cpu_context(), o);
    constexpr uint32_t kSends = 300, kSlot = 8192, kPiece = 1024;
    HostBuf src(p.pd, size_t(kSends) * kSlot, kLocalWrite), rbuf(p.pd, size_t(kSends) * kSlot, kLocalWrite),
        wdst(p.pd, size_t(kSends) * kPiece, kAllAccess);
    gvtest::fill_random(src.data(), src.size(), 90 + threads);
    std::memset(rbuf.data(), gvtest::kGuard, rbuf.size());
    std::mt19937_64 rng(threads);
    auto a = p.h(0), b = p.h(1);
    std::vector<uint32_t> len(kSends), soff(kSends);
    uint32_t signaled = 0, big = 0;
    for (uint32_t i = 0; i < kSends; ++i) {
        ASSERT_EQ(dev::recv(b, rbuf.at(size_t(i) * kSlot), kSlot, rbuf.lkey()), Status::Ok);
        const uint32_t kind = i % 10;
        len[i] = kind == 3 ? 8 : kind == 7 ? 100 : i % 11 == 5 ? 129 + uint32_t(rng() % 4000) : 4096;
        soff[i] = len[i] == 4096 ? 0 : uint32_t(rng() % 16);
        big += len[i] > 128;
        const bool sig = i % 37 == 36 || i + 1 == kSends;
        signaled += sig;
        ASSERT_EQ(dev::send(a, src.at(size_t(i) * kSlot + soff[i]), len[i], src.lkey(), sig ? kSignaled : 0u), Status::Ok);
        if (i % 17 == 9)
            ASSERT_EQ(dev::write(a, src.at(size_t(i) * kSlot + 4096 + 16), kPiece, src.lkey(),
                                 wdst.addr(size_t(i) * kPiece), wdst.rkey(), 0u),
                      Status::Ok);
    }
    commit_with_group(a, threads);
    std::vector<Completion> sc(signaled);
    uint32_t got = 0;
    ASSERT_EQ(dev::wait_send(a, signaled, sc.data(), 5'000'000'000ull, &got), Status::Ok)
        << got << " of " << signaled << " send completions; " << gvtest::qp_debug(a);
    for (uint32_t k = 0; k < signaled; ++k) EXPECT_EQ(sc[k].status, 0) << "send completion " << k;
    std::vector<Completion> rc(kSends);
    ASSERT_EQ(dev::wait_recv(b, kSends, rc.data(), 5'000'000'000ull, &got), Status::Ok) << got << " receive completions";
    for (uint32_t i = 0; i < kSends; ++i) {
        ASSERT_EQ(rc[i].status, 0) << "receive " << i;
        EXPECT_EQ(rc[i].wqe_counter, uint16_t(i)) << "receive " << i;
        EXPECT_EQ(rc[i].byte_len, len[i]) << "receive " << i;
        const uint8_t* got_bytes = rbuf.at(size_t(i) * kSlot);
        EXPECT_EQ(std::memcmp(got_bytes, src.at(size_t(i) * kSlot + soff[i]), len[i]), 0) << "SEND " << i;
        for (uint32_t k = len[i]; k < len[i] + 16; ++k)
            ASSERT_EQ(got_bytes[k], gvtest::kGuard) << "SEND " << i << " wrote past its end, byte " << k;
        if (i % 17 == 9)
            EXPECT_EQ(std::memcmp(wdst.at(size_t(i) * kPiece), src.at(size_t(i) * kSlot + 4096 + 16), kPiece), 0)
                << "WRITE after SEND " << i;
    }
    EXPECT_EQ(p.qp[0]->state(), QpState::Rts);
    EXPECT_EQ(p.qp[1]->state(), QpState::Rts);
    // Every SEND of more than 128 bytes here may go in a run (their receives take them whole);
    // only a run's first SEND after a WQE it did not take is left to prepare() now and then.
    const unsigned long long in_runs = a.soft.ctx->run_sends;
    EXPECT_GE(in_runs, big * 3 / 4) << "of " << big << " SENDs over 128 bytes";
    EXPECT_LE(in_runs, big);
}

// A SEND whose gather list reads the receive buffer an earlier SEND fills must see those bytes:
// SEND i reads SEND i-1's receive buffer from byte 16 on, so every buffer is the first SEND's
// bytes shifted along, with the guard moving in from the end. A run copies its SENDs at once, so
// such a SEND starts a run of its own (without that check a thread could read a word before the
// thread that copies it there has stored it).
void send_reads_earlier_receive(uint32_t threads) {
    QpOptions o;
    o.sq_depth = 256;
    o.rq_depth = 256;
    Pair p(gvtest::cpu_context(), o);
    constexpr uint32_t kSends = 64, kLen = 1024, kSlot = 2048, kShift = 16;
    HostBuf src(p.pd, kSlot, kLocalWrite), rbuf(p.pd, size_t(kSends) * kSlot, kLocalWrite);
    gvtest::fill_random(src.data(), src.size(), 120 + threads);
    std::memset(rbuf.data(), gvtest::kGuard, rbuf.size());
    auto a = p.h(0), b = p.h(1);
    for (uint32_t i = 0; i < kSends; ++i) {
        ASSERT_EQ(dev::recv(b, rbuf.at(size_t(i) * kSlot), kSlot, rbuf.lkey()), Status::Ok);
        const uint8_t* from = i == 0 ? src.at(0) : rbuf.at(size_t(i - 1) * kSlot + kShift);
        ASSERT_EQ(dev::send(a, from, kLen, i ? rbuf.lkey() : src.lkey(),
                            i + 1 == kSends ? kSignaled : 0u),
                  Status::Ok);
    }
    commit_with_group(a, threads);
    Completion c{};
    ASSERT_EQ(dev::wait_send(a, 1, &c, 5'000'000'000ull), Status::Ok) << gvtest::qp_debug(a);
    EXPECT_EQ(c.status, 0);
    std::vector<uint8_t> want(size_t(kSends) * kSlot, gvtest::kGuard);
    for (uint32_t i = 0; i < kSends; ++i) {
        const uint8_t* from = i == 0 ? src.data() : want.data() + size_t(i - 1) * kSlot + kShift;
        std::memmove(want.data() + size_t(i) * kSlot, from, kLen);
    }
    const long d = gvtest::first_diff(want.data(), rbuf.data(), rbuf.size());
    EXPECT_EQ(d, -1) << "byte " << d << " (SEND " << d / long(kSlot) << ")";
    std::vector<Completion> rc(kSends);
    uint32_t got = 0;
    ASSERT_EQ(dev::wait_recv(b, kSends, rc.data(), 5'000'000'000ull, &got), Status::Ok) << got;
    for (uint32_t i = 0; i < kSends; ++i) EXPECT_EQ(rc[i].status, 0) << "receive " << i;
}

// Receives posted over one buffer: the run's SENDs land in list order, the last one's bytes win
// (Plan::overlap: segment by segment, a barrier between two), every receive completes.
void send_run_same_buffer(uint32_t threads) {
    QpOptions o;
    o.sq_depth = 128;
    o.rq_depth = 128;
    Pair p(gvtest::cpu_context(), o);
    constexpr uint32_t kSends = 40, kLen = 512;
    HostBuf src(p.pd, size_t(kSends) * kLen, kLocalWrite), rbuf(p.pd, kLen + 64, kLocalWrite);
    gvtest::fill_random(src.data(), src.size(), 140 + threads);
    std::memset(rbuf.data(), gvtest::kGuard, rbuf.size());
    auto a = p.h(0), b = p.h(1);
    for (uint32_t i = 0; i < kSends; ++i) {
        ASSERT_EQ(dev::recv(b, rbuf.at(0), kLen, rbuf.lkey()), Status::Ok);
        ASSERT_EQ(dev::send(a, src.at(size_t(i) * kLen), kLen, src.lkey(), i + 1 == kSends ? kSignaled : 0u),
                  Status::Ok);
    }
    commit_with_group(a, threads);
    std::vector<Completion> rc(kSends);
    uint32_t got = 0;
    ASSERT_EQ(dev::wait_recv(b, kSends, rc.data(), 5'000'000'000ull, &got), Status::Ok) << got;
    for (uint32_t i = 0; i < kSends; ++i) EXPECT_EQ(rc[i].status, 0) << "receive " << i;
    EXPECT_EQ(std::memcmp(rbuf.at(0), src.at(size_t(kSends - 1) * kLen), kLen), 0) << "the last SEND's bytes";
    for (uint32_t k = kLen; k < kLen + 64; ++k) ASSERT_EQ(rbuf.data()[k], gvtest::kGuard) << "byte " << k;
    EXPECT_GT(a.soft.ctx->run_sends, 0u);
}

// SENDs into receives posted one by one while the group drains (a receiver slower than the
// sender: a receive every few microseconds): most SENDs find no receive at first and wait, in
// place in the group for a while (await_receive), or under the RNR rules, retried by the
// receives' doorbell. Every SEND lands once, in order, into its own receive.
void late_receivers(uint32_t threads) {
    QpOptions o;
    o.sq_depth = 128;
    o.rq_depth = 64;
    Pair p(gvtest::cpu_context(), o);
    constexpr uint32_t kRounds = 16, kPer = 64, kLen = 1024;
    constexpr uint32_t kAll = kRounds * kPer;
    HostBuf src(p.pd, size_t(kAll) * kLen, kLocalWrite), rbuf(p.pd, size_t(kAll) * kLen, kLocalWrite);
    gvtest::fill_random(src.data(), src.size(), 120 + threads);
    std::memset(rbuf.data(), gvtest::kGuard, rbuf.size());
    auto a = p.h(0), b = p.h(1);
    std::string rx_error;
    std::atomic<uint32_t> committed{0};
    const detail::soft::QpContext* sender = a.soft.ctx;
    std::thread rx([&] {
        for (uint32_t i = 0; i < kAll; ++i) {
            if (i % kPer == 0) {
                // Round i / kPer's receives once its SENDs were committed and the first of them
                // found no receive (or after 50 ms).
                const uint64_t t0 = atom::now_ns();
                while (committed.load() <= i / kPer ||
                       (!atom::load_acquire(&sender->rnr_waiting, true) && atom::now_ns() - t0 < 50'000'000))
                    atom::relax();
            }
            const Status st = dev::recv(b, rbuf.at(size_t(i) * kLen), kLen, rbuf.lkey(), 10'000'000'000ull);
            if (st != Status::Ok) {
                rx_error = "recv " + std::to_string(i) + ": " + status_name(st);
                return;
            }
            const uint64_t t0 = atom::now_ns();
            while (atom::now_ns() - t0 < 4000) atom::relax();
        }
    });
    for (uint32_t r = 0; r < kRounds; ++r) {
        for (uint32_t i = 0; i < kPer; ++i)
            ASSERT_EQ(dev::send(a, src.at((size_t(r) * kPer + i) * kLen), kLen, src.lkey(), i + 1 == kPer ? kSignaled : 0u),
                      Status::Ok);
        committed.store(r + 1);
        commit_with_group(a, threads);
        Completion c{};
        const Status st = dev::wait_send(a, 1, &c, 10'000'000'000ull);
        if (st != Status::Ok) rx.detach();  // a broken QP: the receiver's own timeout ends it
        ASSERT_EQ(st, Status::Ok) << "round " << r << "; " << gvtest::qp_debug(a);
        ASSERT_EQ(c.status, 0) << "round " << r;
        std::vector<Completion> rc(kPer);
        uint32_t got = 0;
        const Status rs = dev::wait_recv(b, kPer, rc.data(), 10'000'000'000ull, &got);
        if (rs != Status::Ok) rx.detach();
        ASSERT_EQ(rs, Status::Ok) << "round " << r << ": " << got << " of " << kPer << " receive completions";
        for (uint32_t i = 0; i < kPer; ++i) {
            ASSERT_EQ(rc[i].status, 0) << "round " << r << ", receive " << i;
            EXPECT_EQ(rc[i].wqe_counter, uint16_t(r * kPer + i)) << "round " << r << ", receive " << i;
            EXPECT_EQ(rc[i].byte_len, kLen) << "round " << r << ", receive " << i;
        }
    }
    rx.join();
    ASSERT_EQ(rx_error, "");
    EXPECT_EQ(std::memcmp(rbuf.data(), src.data(), src.size()), 0);
    EXPECT_EQ(p.qp[0]->state(), QpState::Rts);
    EXPECT_EQ(p.qp[1]->state(), QpState::Rts);
}

}  // namespace

TEST(SoftGroupExec, LateReceiversEverySendLandsOnce) {
    late_receivers(64);
    late_receivers(256);
}

TEST(SoftGroupExec, SendRunsLandWholeAndCompleteInOrder) { for_sizes({512u, 256u, 64u, 32u, 2u}, send_runs); }

TEST(SoftGroupExec, SendRunStopsAtASendReadingAnEarlierOnesReceive) {
    for_sizes({512u, 256u, 32u}, send_reads_earlier_receive);
}

TEST(SoftGroupExec, SendRunIntoOneBufferLandsInListOrder) { for_sizes({256u, 32u}, send_run_same_buffer); }

TEST(SoftGroupExec, SendsPlannedAheadTakeReceivesInOrder) {
    for_sizes({512u, 256u, 64u}, [](uint32_t n) {
        sends_ahead(n, 96);
        sends_ahead(n, 61);
    });
}

TEST(SoftGroupExec, LostReceiveCompletionDropsTheSendPlannedAhead) {
    for_sizes({512u, 256u, 1u}, send_ahead_lost_receive_completion);
}
