// The software device's error behaviour: RNR retries counted in the QP context, flushing on
// ERROR, the QP-state query, post-time limits, CQ overrun, bounded waits. (The RNR cases
// every backend shares, rnr_retry 0 and a late receive, are the traffic suite's.)
#include "soft_errors_util.hpp"

using namespace gv;
using gvtest::HostBuf;
using gvtest::Pair;

namespace {
/// A pair whose QP 0 sends with the given rnr_retry to QP 1, whose min_rnr_timer is given.
struct RnrPair {
    Pair p;
    HostBuf src, dst;
    RnrPair(uint32_t rnr_retry, uint32_t min_rnr_timer)
        : p(gvtest::cpu_context(), {}, MemoryKind::Default, 64, false),
          src(p.pd, 4096, kLocalWrite),
          dst(p.pd, 4096, kLocalWrite) {
        gvtest::fill_random(src.data(), src.size(), 5);
        RtsAttr rts;
        rts.rnr_retry = rnr_retry;
        RtrAttr rtr;
        rtr.min_rnr_timer = min_rnr_timer;
        p.qp[0]->connect(p.qp[1]->endpoint(), {}, {}, rts);
        p.qp[1]->connect(p.qp[0]->endpoint(), {}, rtr);
    }
};

QpOptions cq_pair(CompletionQueue* send, CompletionQueue* recv) {
    QpOptions o;
    o.send_cq = send;
    o.recv_cq = recv;
    return o;
}

/// Small SENDs from QP a to QP b on a CPU context: a's send CQ and b's receive CQ of the depths
/// given (the CQs neither test reads, 64 deep), kN receives of kSlot bytes that post() puts on
/// b, and as many SENDs of kLen bytes on a, with the flags given, not committed.
struct SmallSends {
    static constexpr uint32_t kN = 16, kLen = 8, kSlot = 64;
    Context ctx;
    ProtectionDomain pd;
    CompletionQueue scq, rcq, other;
    QueuePair qa, qb;
    HostBuf src, dst;
    dev::QpHandle a, b;
    SmallSends(uint32_t send_depth, uint32_t recv_depth, uint64_t seed)
        : ctx(gvtest::cpu_context()),
          pd(ctx),
          scq(ctx, CqOptions{send_depth}),
          rcq(ctx, CqOptions{recv_depth}),
          other(ctx, CqOptions{64}),
          qa(pd, cq_pair(&scq, &other)),
          qb(pd, cq_pair(&other, &rcq)),
          src(pd, kN * kSlot, kLocalWrite),
          dst(pd, kN * kSlot, kLocalWrite) {
        gvtest::fill_random(src.data(), src.size(), seed);
        qa.connect(qb.endpoint());
        qb.connect(qa.endpoint());
        a = qa.device_handle();
        b = qb.device_handle();
    }
    void post(uint32_t flags) {
        for (uint32_t i = 0; i < kN; ++i) ASSERT_EQ(dev::recv(b, dst.at(i * kSlot), kSlot, dst.lkey()), Status::Ok);
        for (uint32_t i = 0; i < kN; ++i) ASSERT_EQ(dev::send(a, src.at(i * kSlot), kLen, src.lkey(), flags), Status::Ok);
    }
};
}  // namespace

// rnr_retry N allows N retries, each after the responder's RNR timer (here 10 us, then
// 1.28 ms), then RNR_RETRY_EXC_ERR. wait_send drives the retries.
TEST(SoftErrors, RnrRetriesExhausted) {
    struct Case {
        uint32_t retries, timer_code;
        double min_ms;
    } cases[] = {{1, 1, 0.01}, {3, 14, 3 * 1.28}};
    for (const Case& k : cases) {
        SCOPED_TRACE(testing::Message() << "rnr_retry " << k.retries << ", timer code " << k.timer_code);
        RnrPair r(k.retries, k.timer_code);
        auto a = r.p.h(0);
        auto t0 = std::chrono::steady_clock::now();
        ASSERT_EQ(dev::send(a, r.src.data(), 100, r.src.lkey()), Status::Ok);
        EXPECT_EQ(dev::commit(a), Status::Ok);  // waits for a receive: not an error yet
        EXPECT_EQ(r.p.qp[0]->state(), QpState::Rts);
        Completion c{};
        ASSERT_EQ(dev::wait_send(a, 1, &c, kTimeout), Status::CompletionError);
        double ms = ms_since(t0);
        EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
        EXPECT_GE(ms, k.min_ms);
        EXPECT_LT(ms, 2000.0);
        EXPECT_EQ(r.p.qp[0]->state(), QpState::Error);
        // Retries spent on the failed SEND: the first attempt is not a retry.
        EXPECT_EQ(a.soft.ctx->rnr_count, k.retries);
        EXPECT_EQ(gvtest::first_not(r.dst.data(), r.dst.size(), gvtest::kGuard), -1);
    }
}

// to_error() flushes every posted receive (in order, on the receive CQ) and the send
// queue's work, a SEND waiting for a receive (RNR) included; receives posted in ERROR are
// flushed at once, and so is send work committed in ERROR.
TEST(SoftErrors, ToErrorFlushesReceivesAndSends) {
    Env e;
    auto a = e.a(), b = e.b();
    for (int i = 0; i < 5; ++i) ASSERT_EQ(dev::recv(b, e.back.at(i * 100), 100, e.back.lkey()), Status::Ok);
    // QP 0 posted no receive: the SEND waits (rnr_retry 7), the NOP behind it too.
    ASSERT_EQ(dev::send(b, e.back.at(0), 64, e.back.lkey()), Status::Ok);
    ASSERT_EQ(dev::nop(b, 0), Status::Ok);
    ASSERT_EQ(dev::commit(b), Status::Ok);
    Completion c[6];
    EXPECT_EQ(dev::wait_send(b, 1, c, 5 * kMs), Status::Timeout);
    // Published, not committed: the software device's executor reads how far the ring is
    // published (not the doorbell record, which its committers do not move), so the WRITE is
    // the device's from here on, and moving to ERROR flushes it with the others, in order.
    ASSERT_EQ(dev::write(b, e.back.at(0), 64, e.back.lkey(), e.dst.addr(0), e.dst.rkey()), Status::Ok);
    e.p.qp[1]->to_error();
    EXPECT_EQ(e.p.qp[1]->state(), QpState::Error);
    EXPECT_EQ(e.p.qp[1]->error_syndrome(), 0u);  // moved there by the user
    ASSERT_EQ(dev::wait_recv(b, 5, c, kTimeout), Status::CompletionError);
    for (int i = 0; i < 5; ++i) {
        EXPECT_EQ(c[i].cqe_opcode, MLX5_CQE_RESP_ERR);
        EXPECT_EQ(c[i].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
        EXPECT_EQ(c[i].wqe_counter, uint16_t(i));
        EXPECT_EQ(c[i].qpn, e.p.qp[1]->qpn());
    }
    ASSERT_EQ(dev::wait_send(b, 3, c, kTimeout), Status::CompletionError);
    EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
    EXPECT_EQ(c[0].wqe_opcode, MLX5_OPCODE_SEND);
    EXPECT_EQ(c[0].wqe_counter, 0u);
    EXPECT_EQ(c[1].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
    EXPECT_EQ(c[1].wqe_opcode, MLX5_OPCODE_NOP);
    EXPECT_EQ(c[2].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
    EXPECT_EQ(c[2].wqe_opcode, MLX5_OPCODE_RDMA_WRITE);
    // Nothing is left: a commit now reports the state and completes nothing twice.
    EXPECT_EQ(dev::commit(b), Status::QpError);
    EXPECT_EQ(dev::poll_cq(b.scq, c, 1), 0u);
    ASSERT_EQ(dev::recv(b, e.back.at(600), 100, e.back.lkey()), Status::Ok);
    ASSERT_EQ(dev::wait_recv(b, 1, c, kTimeout), Status::CompletionError);
    EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
    EXPECT_EQ(c[0].wqe_counter, 5u);
    EXPECT_EQ(gvtest::first_not(e.dst.data(), e.dst.size(), gvtest::kGuard), -1);
    EXPECT_EQ(gvtest::first_not(e.back.data(), e.back.size(), gvtest::kGuard), -1);
    // A SEND to the QP in ERROR finds no responder: the transport retries run out.
    ASSERT_EQ(dev::send(a, e.src.at(0), 10, e.src.lkey()), Status::Ok);
    EXPECT_EQ(dev::commit(a), Status::QpError);
    ASSERT_EQ(dev::wait_send(a, 1, c, kTimeout), Status::CompletionError);
    EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
}

// dev::qp_in_error(): false before and in RTS, true once the user (to_error) or the device
// (a failed WQE) moved the QP to ERROR, false again after reset(); false for a default handle.
TEST(SoftErrors, QpInErrorFollowsTheState) {
    EXPECT_FALSE(dev::qp_in_error(dev::QpHandle{}));
    Pair p(gvtest::cpu_context(), {}, MemoryKind::Default, 64, false);
    HostBuf src(p.pd, 256, kLocalWrite), dst(p.pd, 256, kAllAccess);
    auto a = p.h(0), b = p.h(1);
    EXPECT_FALSE(dev::qp_in_error(a));  // RESET
    p.qp[0]->connect(p.qp[1]->endpoint());
    p.qp[1]->connect(p.qp[0]->endpoint());
    EXPECT_FALSE(dev::qp_in_error(a));  // RTS
    EXPECT_FALSE(dev::qp_in_error(b));
    // Good work leaves it in RTS.
    Completion c{};
    ASSERT_EQ(dev::write(a, src.data(), 100, src.lkey(), dst.addr(), dst.rkey()), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    ASSERT_EQ(dev::wait_send(a, 1, &c, kTimeout), Status::Ok);
    EXPECT_FALSE(dev::qp_in_error(a));
    // The user moves b there.
    p.qp[1]->to_error();
    EXPECT_TRUE(dev::qp_in_error(b));
    EXPECT_FALSE(dev::qp_in_error(a));  // the peer learns nothing by itself...
    // ... until its next WQE finds no responder: the device moves a to ERROR.
    ASSERT_EQ(dev::write(a, src.data(), 100, src.lkey(), dst.addr(), dst.rkey()), Status::Ok);
    EXPECT_EQ(dev::commit(a), Status::QpError);
    ASSERT_EQ(dev::wait_send(a, 1, &c, kTimeout), Status::CompletionError);
    EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
    EXPECT_TRUE(dev::qp_in_error(a));
    EXPECT_EQ(p.qp[0]->state(), QpState::Error);
    // Back to RESET and reconnected: no longer in ERROR.
    for (int i = 0; i < 2; ++i) p.qp[i]->reset();
    EXPECT_FALSE(dev::qp_in_error(a));
    EXPECT_FALSE(dev::qp_in_error(b));
    p.qp[0]->connect(p.qp[1]->endpoint());
    p.qp[1]->connect(p.qp[0]->endpoint());
    EXPECT_FALSE(dev::qp_in_error(a));
}

// The case it is for: a thread spinning on a memory flag that will never be written learns
// from qp_in_error() that its QP went to ERROR (here by to_error() from another thread, as
// the peer-death watcher does), and stops at once instead of at its timeout.
TEST(SoftErrors, FlagWaiterSeesTheQpGoToError) {
    Pair p(gvtest::cpu_context(), {}, MemoryKind::Default, 64);
    auto b = p.h(1);
    unsigned long long flag = 0;  // the peer would WRITE it; it never does
    std::atomic<int> outcome{0};  // 1: saw ERROR, 2: saw the flag, 3: timed out
    std::atomic<bool> spinning{false};
    std::thread waiter([&] {
        const uint64_t start = atom::now_ns();
        uint32_t spins = 0;
        spinning = true;
        for (;;) {
            if (atom::load_acquire(&flag) != 0) return outcome.store(2);
            if (dev::qp_in_error(b)) return outcome.store(1);
            if (atom::now_ns() - start > kTimeout) return outcome.store(3);
            dev::spin_pause(spins, 1024);
        }
    });
    while (!spinning) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(outcome.load(), 0) << "the waiter stopped before the QP left RTS";
    auto t0 = std::chrono::steady_clock::now();
    p.qp[1]->to_error();
    waiter.join();
    EXPECT_EQ(outcome.load(), 1);
    EXPECT_LT(ms_since(t0), 1000.0);
}

// Work posted before RTS waits: commit says QpNotReady and nothing executes; the move to
// RTS runs it.
TEST(SoftErrors, PostedBeforeRtsRunsAtRts) {
    Pair p(gvtest::cpu_context(), {}, MemoryKind::Default, 64, false);
    HostBuf src(p.pd, 256, kLocalWrite), dst(p.pd, 256, kAllAccess);
    gvtest::fill_random(src.data(), src.size(), 3);
    p.qp[1]->connect(p.qp[0]->endpoint());
    p.qp[0]->to_init();
    RtrAttr rtr;
    rtr.remote_qpn = p.qp[1]->qpn();
    p.qp[0]->to_rtr(rtr);
    auto a = p.h(0);
    ASSERT_EQ(dev::write(a, src.data(), 200, src.lkey(), dst.addr(), dst.rkey()), Status::Ok);
    EXPECT_EQ(dev::commit(a), Status::QpNotReady);
    Completion c{};
    EXPECT_EQ(dev::wait_send(a, 1, &c, 20 * kMs), Status::Timeout);
    EXPECT_EQ(gvtest::first_not(dst.data(), dst.size(), gvtest::kGuard), -1);
    p.qp[0]->to_rts();
    ASSERT_EQ(dev::wait_send(a, 1, &c, kTimeout), Status::Ok);
    EXPECT_EQ(c.wqe_counter, 0u);
    EXPECT_EQ(gvtest::first_diff(src.data(), dst.data(), 200), -1);
    EXPECT_EQ(gvtest::first_not(dst.at(200), 56, gvtest::kGuard), -1);
}

// ---- posting-time limits ---------------------------------------------------------------

TEST(SoftErrors, PostTimeLimits) {
    QpOptions o;
    o.max_send_sge = 3;
    o.max_recv_sge = 2;
    o.max_inline = 100;
    Env e(o);
    auto a = e.a(), b = e.b();
    Sge s[4];
    for (int i = 0; i < 4; ++i) s[i] = {e.src.addr(i * 16), 16, e.src.lkey()};
    EXPECT_EQ(dev::post_sge(a, MLX5_OPCODE_RDMA_WRITE, s, 4, e.dst.addr(0), e.dst.rkey(), 0, kSignaled),
              Status::InvalidArgument);
    EXPECT_EQ(dev::post_sge(a, MLX5_OPCODE_SEND, s, 4, 0, 0, 0, kSignaled), Status::InvalidArgument);
    EXPECT_EQ(dev::write_inline(a, e.src.data(), 101, e.dst.addr(0), e.dst.rkey()), Status::InvalidArgument);
    EXPECT_EQ(dev::send_inline(a, e.src.data(), 101), Status::InvalidArgument);
    EXPECT_EQ(dev::post_recv(b, s, 3), Status::InvalidArgument);
    EXPECT_EQ(gvtest::sq_pos(a), 0u) << "a refused WQE took queue space";
    EXPECT_EQ(__atomic_load_n(&b.q.ctr->rq_reserved, __ATOMIC_ACQUIRE), 0u);
    // The limits themselves are fine, and the QP is unharmed.
    ASSERT_EQ(dev::post_recv(b, s, 2), Status::Ok);
    ASSERT_EQ(dev::post_sge(a, MLX5_OPCODE_RDMA_WRITE, s, 3, e.dst.addr(0), e.dst.rkey(), 0, kSignaled),
              Status::Ok);
    ASSERT_EQ(dev::write_inline(a, e.src.data(), 100, e.dst.addr(100), e.dst.rkey()), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    Completion c[2];
    ASSERT_EQ(dev::wait_send(a, 2, c, kTimeout), Status::Ok);
    EXPECT_EQ(c[0].wqe_counter, 0u);
    EXPECT_EQ(gvtest::first_diff(e.src.data(), e.dst.data(), 48), -1);
    EXPECT_EQ(gvtest::first_diff(e.src.data(), e.dst.at(100), 100), -1);
    EXPECT_EQ(e.p.qp[0]->state(), QpState::Rts);
}

// ---- completion queue overrun ------------------------------------------------------------

TEST(SoftErrors, CqOverrun) {
    Pair p(gvtest::cpu_context(), {}, MemoryKind::Default, 2);
    ASSERT_EQ(p.scq[0]->depth(), 2u);
    HostBuf src(p.pd, 4096, kLocalWrite), dst(p.pd, 4096, kAllAccess);
    auto a = p.h(0);
    for (int i = 0; i < 8; ++i)
        ASSERT_EQ(dev::write(a, src.at(i * 64), 64, src.lkey(), dst.addr(i * 64), dst.rkey()), Status::Ok);
    dev::commit(a);
    Completion c[8];
    uint32_t got = 99;
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(dev::wait_send(a, 8, c, kTimeout, &got), Status::CqOverrun);
    EXPECT_LT(ms_since(t0), 1000.0);
    EXPECT_LE(got, 2u);
    EXPECT_TRUE(dev::cq_overrun(a.scq));
    EXPECT_EQ(p.qp[0]->state(), QpState::Error);
}

// Small SENDs (the executor's fast_send_run: a run of them checked, their receives claimed with
// one CAS and their receive CQ slots taken with one RMW) into a receive CQ that fills: the SENDs
// up to the first one without a slot land and complete, that one lands and its completion is
// lost (the receiver goes to ERROR), nothing after it lands, and the sender's next SEND finds no
// receiver (transport retries exceeded) with every later one flushed.
TEST(SoftErrors, SmallSendsIntoAFullReceiveCq) {
    SmallSends t(64, 4, 11);
    constexpr uint32_t kN = SmallSends::kN, kLen = SmallSends::kLen, kSlot = SmallSends::kSlot;
    const uint32_t depth = t.rcq.depth();
    ASSERT_LE(depth, 8u);
    auto &qa = t.qa, &qb = t.qb;
    auto &src = t.src, &dst = t.dst;
    const auto a = t.a, b = t.b;
    t.post(0u);
    if (HasFatalFailure()) return;
    EXPECT_EQ(dev::commit(a), Status::QpError);
    Completion rc[8];
    uint32_t got = 0;
    EXPECT_EQ(dev::wait_recv(b, depth, rc, kTimeout, &got), Status::Ok) << got << " receive completions";
    for (uint32_t i = 0; i < depth; ++i) {
        EXPECT_TRUE(rc[i].ok()) << "receive " << i << ": status " << int(rc[i].status);
        EXPECT_EQ(rc[i].wqe_counter, i);
        EXPECT_EQ(rc[i].byte_len, kLen);
    }
    EXPECT_EQ(dev::wait_recv(b, 1, nullptr, kTimeout), Status::CqOverrun);
    Completion sc[kN];
    EXPECT_EQ(dev::wait_send(a, kN - depth - 1, sc, kTimeout, &got), Status::CompletionError) << got;
    ASSERT_EQ(got, kN - depth - 1);
    EXPECT_EQ(sc[0].wqe_counter, depth + 1);
    EXPECT_EQ(sc[0].status, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR) << "the SEND after the lost completion";
    for (uint32_t i = 1; i < got; ++i) EXPECT_EQ(sc[i].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR) << "SEND " << depth + 1 + i;
    EXPECT_EQ(qa.state(), QpState::Error);
    EXPECT_EQ(qb.state(), QpState::Error);
    for (uint32_t i = 0; i <= depth; ++i)
        EXPECT_EQ(std::memcmp(dst.at(i * kSlot), src.at(i * kSlot), kLen), 0) << "SEND " << i << " did not land";
    for (uint32_t i = depth + 1; i < kN; ++i)
        for (uint32_t k = 0; k < kSlot; ++k)
            ASSERT_EQ(dst.at(i * kSlot)[k], gvtest::kGuard) << "SEND " << i << " (not executed) wrote byte " << k;
}

// A signaled small SEND whose own completion finds the send CQ full: the sender goes to ERROR and
// no receive of the receiver, which stays up, is taken behind it (a signaled SEND ends
// fast_send_run's run before the receives of the next are claimed). Moved to ERROR, the receiver
// then flushes every receive no SEND took: none is lost.
TEST(SoftErrors, LostSendCompletionTakesNoReceiveBehindIt) {
    SmallSends t(2, 64, 12);
    constexpr uint32_t kN = SmallSends::kN, kLen = SmallSends::kLen, kSlot = SmallSends::kSlot;
    const uint32_t depth = t.scq.depth();
    ASSERT_LE(depth, 4u);
    auto &qa = t.qa, &qb = t.qb;
    auto &src = t.src, &dst = t.dst;
    const auto a = t.a, b = t.b;
    t.post(kSignaled);
    if (HasFatalFailure()) return;
    EXPECT_EQ(dev::commit(a), Status::QpError);
    Completion sc[kN];
    uint32_t got = 99;
    EXPECT_EQ(dev::wait_send(a, kN, sc, kTimeout, &got), Status::CqOverrun);
    EXPECT_LE(got, depth);
    EXPECT_EQ(qa.state(), QpState::Error);
    EXPECT_EQ(qb.state(), QpState::Rts) << "the receiver stays up";
    // SENDs 0 .. depth - 1 completed, SEND `depth` landed and lost its completion.
    const uint32_t taken = depth + 1;
    Completion rc[kN];
    EXPECT_EQ(dev::wait_recv(b, taken, rc, kTimeout, &got), Status::Ok) << got;
    for (uint32_t i = 0; i < taken; ++i) EXPECT_TRUE(rc[i].ok() && rc[i].wqe_counter == i) << "receive " << i;
    qb.to_error();
    EXPECT_EQ(dev::wait_recv(b, kN - taken, rc, kTimeout, &got), Status::CompletionError);
    EXPECT_EQ(got, kN - taken) << "receives flushed: every one no SEND took";
    for (uint32_t i = 0; i < got; ++i) {
        EXPECT_EQ(rc[i].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
        EXPECT_EQ(rc[i].wqe_counter, taken + i);
    }
    EXPECT_EQ(dev::wait_recv(b, 1, nullptr, 50'000'000ull), Status::Timeout) << "a completion more than posted";
    for (uint32_t i = 0; i < taken; ++i)
        EXPECT_EQ(std::memcmp(dst.at(i * kSlot), src.at(i * kSlot), kLen), 0) << "SEND " << i << " did not land";
    for (uint32_t i = taken; i < kN; ++i) EXPECT_EQ(dst.at(i * kSlot)[0], gvtest::kGuard) << "SEND " << i << " landed";
}

// ---- bounded waits ---------------------------------------------------------------------

TEST(SoftErrors, BoundedWaitsTimeOut) {
    QpOptions o;
    o.sq_depth = 4;
    o.rq_depth = 4;
    Pair p(gvtest::cpu_context(), o);
    auto a = p.h(0), b = p.h(1);
    Completion c{};
    uint32_t got = 7;
    {
        SCOPED_TRACE("wait for a completion that never comes");
        auto t0 = std::chrono::steady_clock::now();
        EXPECT_EQ(dev::wait_send(a, 1, &c, 50 * kMs, &got), Status::Timeout);
        double ms = ms_since(t0);
        EXPECT_GE(ms, 50.0);
        EXPECT_LT(ms, 1000.0);
        EXPECT_EQ(got, 0u);
        t0 = std::chrono::steady_clock::now();
        EXPECT_EQ(dev::wait_recv(b, 1, &c, 50 * kMs), Status::Timeout);
        EXPECT_LT(ms_since(t0), 1000.0);
    }
    {
        SCOPED_TRACE("post to a full send queue (its completions never polled)");
        unsigned long long ring = 1ull << a.q.sq_log_bb;
        for (unsigned long long i = 0; i < ring; ++i) ASSERT_EQ(dev::nop(a, kSignaled, 50 * kMs), Status::Ok);
        ASSERT_EQ(dev::commit(a), Status::Ok);
        auto t0 = std::chrono::steady_clock::now();
        EXPECT_EQ(dev::nop(a, kSignaled, 50 * kMs), Status::Timeout);
        double ms = ms_since(t0);
        EXPECT_GE(ms, 50.0);
        EXPECT_LT(ms, 1000.0);
        EXPECT_EQ(gvtest::sq_pos(a), ring) << "a timed-out post reserved space";
        // Polling frees the ring.
        std::vector<Completion> all(ring);
        ASSERT_EQ(dev::wait_send(a, uint32_t(ring), all.data(), kTimeout), Status::Ok);
        EXPECT_EQ(dev::nop(a, kSignaled, 50 * kMs), Status::Ok);
    }
    {
        SCOPED_TRACE("post to a full receive queue");
        for (int i = 0; i < 4; ++i) ASSERT_EQ(dev::recv(b, nullptr, 0, 0, 50 * kMs), Status::Ok);
        auto t0 = std::chrono::steady_clock::now();
        EXPECT_EQ(dev::recv(b, nullptr, 0, 0, 50 * kMs), Status::Timeout);
        double ms = ms_since(t0);
        EXPECT_GE(ms, 50.0);
        EXPECT_LT(ms, 1000.0);
    }
}
