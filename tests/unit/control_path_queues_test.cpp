// The host control path on CPU threads: QP options, CQs, teardown while a peer is connected,
// device handles.
#include "control_path_util.hpp"

using namespace gv;
using gvtest::Pair;

TEST(ControlPathQpOptions, OutOfRangeOptionsAreRefused) {
    Two t;
    struct Bad {
        const char* what;
        void (*set)(QpOptions&);
        std::vector<std::string> say;
    };
    const Bad bad[] = {
        {"max_send_sge 0", [](QpOptions& o) { o.max_send_sge = 0; }, {"max_send_sge 0", "1 .. 8"}},
        {"max_send_sge 9", [](QpOptions& o) { o.max_send_sge = 9; }, {"max_send_sge 9", "1 .. 8"}},
        {"max_recv_sge 0", [](QpOptions& o) { o.max_recv_sge = 0; }, {"max_recv_sge 0"}},
        {"max_recv_sge 9", [](QpOptions& o) { o.max_recv_sge = 9; }, {"max_recv_sge 9", "1 .. 8"}},
        {"max_inline 2000", [](QpOptions& o) { o.max_inline = 2000; }, {"max_inline 2000"}},
        {"sq_depth 0", [](QpOptions& o) { o.sq_depth = 0; }, {"sq_depth"}},
        {"rq_depth 0", [](QpOptions& o) { o.rq_depth = 0; }, {"rq_depth"}},
        {"sq_depth 100000", [](QpOptions& o) { o.sq_depth = 100000; }, {"100000"}},
        {"rq_depth 100000", [](QpOptions& o) { o.rq_depth = 100000; }, {"rq_depth 100000"}},
        {"no send_cq", [](QpOptions& o) { o.send_cq = nullptr; }, {"send_cq"}},
        {"no recv_cq", [](QpOptions& o) { o.recv_cq = nullptr; }, {"recv_cq"}},
        {"Device memory",
         [](QpOptions& o) { o.memory = MemoryKind::Device; },
         {"MemoryKind::Device", "soft-cpu"}},
    };
    for (const Bad& b : bad) {
        SCOPED_TRACE(b.what);
        QpOptions o = t.opts();
        b.set(o);
        std::string m = THROWN(InvalidUsage, QueuePair(t.pd, o));
        for (auto& s : b.say) EXPECT_HAS(m, s);
    }
    // The CQs are unharmed by the refused QPs: a fresh pair on them still works.
    QueuePair x(t.pd, t.opts()), y(t.pd, t.opts());
    x.connect(y.endpoint());
    y.connect(x.endpoint());
    std::vector<uint8_t> s(32, 1), d(32, 0);
    MemoryRegion ms(t.pd, s.data(), 32, kLocalWrite), md(t.pd, d.data(), 32, kAllAccess);
    Completion c = write_and_wait(x.device_handle(), s.data(), 32, ms.lkey(), d.data(), md.rkey());
    EXPECT_EQ(c.status, 0) << mlx5::syndrome_name(c.status);
    EXPECT_EQ(d[31], 1);
}

TEST(ControlPathQpOptions, DocumentedLimitsAreAccepted) {
    Two t;
    QpOptions o = t.opts();
    o.max_send_sge = 8;
    o.max_recv_sge = 8;
    o.max_inline = 956;  // the documented maximum
    o.sq_depth = 1;
    o.rq_depth = 1;
    QueuePair q(t.pd, o);
    EXPECT_EQ(q.options().max_inline, 956u);
    // The deepest queue of one-WQEBB WQEs an mlx5 ring holds.
    QpOptions deep = t.opts();
    deep.max_inline = 0;
    deep.sq_depth = 32768;
    deep.rq_depth = 32768;
    QueuePair d(t.pd, deep);
    EXPECT_GE(1u << d.device_handle().q.sq_log_bb, 32768u);
}

TEST(ControlPathQpOptions, MaxInlineWriteGoesThrough) {
    Context ctx = cpu_ctx();
    QpOptions o;
    o.max_inline = 956;
    Pair p(ctx, o);
    std::vector<uint8_t> src(956), dst(956, 0);
    gvtest::fill_random(src.data(), src.size(), 3);
    MemoryRegion md(p.pd, dst.data(), dst.size(), kAllAccess);
    auto h = p.h(0);
    EXPECT_EQ(dev::write_inline(h, src.data(), 957, uint64_t(dst.data()), md.rkey()),
              Status::InvalidArgument);
    ASSERT_EQ(dev::write_inline(h, src.data(), 956, uint64_t(dst.data()), md.rkey()), Status::Ok);
    ASSERT_EQ(dev::commit(h), Status::Ok);
    Completion c{};
    ASSERT_EQ(dev::wait_send(h, 1, &c, kTimeout), Status::Ok) << mlx5::syndrome_name(c.status);
    EXPECT_EQ(gvtest::first_diff(src.data(), dst.data(), dst.size()), -1);
}

TEST(ControlPathQpOptions, CqServesABoundedNumberOfQps) {
    Context ctx = cpu_ctx();
    ProtectionDomain pd(ctx);
    CompletionQueue cq(ctx, CqOptions{64});
    QpOptions o;
    o.send_cq = o.recv_cq = &cq;
    o.sq_depth = o.rq_depth = 1;
    o.max_inline = 0;
    std::vector<std::unique_ptr<QueuePair>> qps;
    std::string m;
    for (int i = 0; i < 100000 && m.empty(); ++i) {
        try {
            qps.push_back(std::make_unique<QueuePair>(pd, o));
        } catch (const InvalidUsage& e) {
            m = e.what();
        }
    }
    ASSERT_FALSE(m.empty()) << "a CQ accepted " << qps.size() << " QPs";
    EXPECT_HAS(m, "CQ " + std::to_string(cq.cqn()));
    EXPECT_GE(qps.size(), 64u);
    // The refused QP left nothing behind: freeing one slot admits exactly one more.
    qps.erase(qps.begin() + 5);
    qps.push_back(std::make_unique<QueuePair>(pd, o));
    THROWN(InvalidUsage, QueuePair(pd, o));
    // And the CQ still serves its QPs.
    QueuePair& a = *qps[0];
    QueuePair& b = *qps[1];
    a.connect(b.endpoint());
    b.connect(a.endpoint());
    uint64_t s = 42, d = 0;
    MemoryRegion ms(pd, &s, 8, kLocalWrite), md(pd, &d, 8, kAllAccess);
    ASSERT_EQ(dev::write(a.device_handle(), &s, 8, ms.lkey(), uint64_t(&d), md.rkey()), Status::Ok);
    ASSERT_EQ(dev::commit(a.device_handle()), Status::Ok);
    auto got = cq.wait(1, 5000);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].qpn, a.qpn());
    EXPECT_EQ(d, 42u);
}

// ---- CompletionQueue --------------------------------------------------------------------

TEST(ControlPathCq, DepthLimits) {
    Context ctx = cpu_ctx();
    std::string m = THROWN(InvalidUsage, CompletionQueue(ctx, CqOptions{0}));
    EXPECT_HAS(m, "depth 0");
    EXPECT_HAS(m, "expected");
    m = THROWN(InvalidUsage, CompletionQueue(ctx, CqOptions{1u << 23}));
    EXPECT_HAS(m, std::to_string(1u << 23));
    THROWN(InvalidUsage, CompletionQueue(ctx, CqOptions{(1u << 22) + 1}));
    m = THROWN(InvalidUsage, CompletionQueue(ctx, CqOptions{16, MemoryKind::Device}));
    EXPECT_HAS(m, "MemoryKind::Device");
}

TEST(ControlPathCq, DepthRoundsUpToAPowerOfTwo) {
    Context ctx = cpu_ctx();
    const std::pair<uint32_t, uint32_t> cases[] = {{1, 2},       {2, 2},       {3, 4},       {5, 8},
                                                   {1000, 1024}, {1024, 1024}, {1025, 2048}, {65537, 131072}};
    std::set<uint32_t> cqns;
    for (auto [asked, got] : cases) {
        CompletionQueue cq(ctx, CqOptions{asked});
        EXPECT_EQ(cq.depth(), got) << "asked " << asked;
        EXPECT_EQ(1u << cq.device_handle().log_cnt, got) << "asked " << asked;
        EXPECT_EQ(cq.memory(), MemoryKind::Host);
        EXPECT_EQ(cq.device_handle().cqn, cq.cqn());
        EXPECT_TRUE(cqns.insert(cq.cqn()).second) << "CQ number reused: " << cq.cqn();
    }
}

TEST(ControlPathCq, EmptyPollAndTimeout) {
    Context ctx = cpu_ctx();
    CompletionQueue cq(ctx, CqOptions{8});
    EXPECT_TRUE(cq.poll().empty());
    EXPECT_TRUE(cq.poll(1).empty());
    EXPECT_TRUE(cq.wait(0, 0).empty());
    auto t0 = std::chrono::steady_clock::now();
    std::string m = THROWN(TimeoutError, cq.wait(1, 20));
    auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GE(ms, 20);
    EXPECT_LT(ms, 2000);
    EXPECT_HAS(m, "0 of 1");
    EXPECT_HAS(m, "20 ms");
}

TEST(ControlPathCq, HugeTimeoutsWaitWithoutDeadline) {
    // kWaitForever (the device API's "no timeout") and timeouts past the clock's range must
    // not overflow into an immediate TimeoutError.
    for (uint64_t timeout_ms : {kWaitForever, uint64_t(1e13)}) {
        SCOPED_TRACE(timeout_ms);
        Pair p(cpu_ctx());
        uint64_t s = 9, d = 0;
        MemoryRegion ms(p.pd, &s, 8, kLocalWrite), md(p.pd, &d, 8, kAllAccess);
        auto h = p.h(0);
        std::thread poster([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(30));
            dev::write(h, &s, 8, ms.lkey(), uint64_t(&d), md.rkey());
            dev::commit(h);
        });
        std::vector<Completion> got;
        try {
            got = p.scq[0]->wait(1, timeout_ms);
        } catch (const std::exception& e) {
            ADD_FAILURE() << "wait(1, " << timeout_ms << ") threw: " << e.what();
        }
        poster.join();
        ASSERT_EQ(got.size(), 1u);
        EXPECT_TRUE(got[0].ok());
        EXPECT_EQ(d, 9u);
    }
}

TEST(ControlPathCq, ErrorCompletionThrowsUnlessAllowed) {
    Pair p(cpu_ctx());
    std::vector<uint8_t> src(64, 9), dst(64, 0);
    MemoryRegion ms(p.pd, src.data(), 64, kLocalWrite);
    MemoryRegion md(p.pd, dst.data(), 64, kLocalWrite | kRemoteRead);  // no remote write
    auto h = p.h(0);
    CompletionQueue& cq = *p.scq[0];

    // First failure, taken with allow_errors.
    ASSERT_EQ(dev::write(h, src.data(), 64, ms.lkey(), uint64_t(dst.data()), md.rkey()), Status::Ok);
    dev::commit(h);
    auto got = cq.wait(1, 5000, true);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_FALSE(got[0].ok());
    EXPECT_EQ(got[0].status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR) << mlx5::syndrome_name(got[0].status);
    EXPECT_EQ(got[0].qpn, p.qp[0]->qpn());
    EXPECT_EQ(dst[0], 0);

    // Second one (flushed) through wait() without allow_errors: CompletionError.
    ASSERT_EQ(dev::write(h, src.data(), 64, ms.lkey(), uint64_t(dst.data()), md.rkey()), Status::Ok);
    dev::commit(h);
    try {
        cq.wait(1, 5000);
        ADD_FAILURE() << "wait() returned an error completion";
    } catch (const CompletionError& e) {
        EXPECT_EQ(e.syndrome(), MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
        EXPECT_HAS(e.what(), "WR_FLUSH_ERR");
        EXPECT_HAS(e.what(), hexs(p.qp[0]->qpn()));
    }

    // A fresh pair: a REMOTE_ACCESS_ERR through wait() names that syndrome.
    Pair q(cpu_ctx());
    MemoryRegion qs(q.pd, src.data(), 64, kLocalWrite);
    MemoryRegion qd(q.pd, dst.data(), 64, kLocalWrite | kRemoteRead);
    ASSERT_EQ(dev::write(q.h(0), src.data(), 64, qs.lkey(), uint64_t(dst.data()), qd.rkey()), Status::Ok);
    dev::commit(q.h(0));
    try {
        q.scq[0]->wait(1, 5000);
        ADD_FAILURE() << "wait() returned an error completion";
    } catch (const CompletionError& e) {
        EXPECT_EQ(e.syndrome(), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
        EXPECT_HAS(e.what(), "REMOTE_ACCESS_ERR");
    }
    EXPECT_EQ(dst[0], 0);
}

TEST(ControlPathCq, OverrunIsReported) {
    Context ctx = cpu_ctx();
    QpOptions o;
    Pair p(ctx, o, MemoryKind::Default, /*cq_depth=*/2);
    ASSERT_EQ(p.scq[0]->depth(), 2u);
    auto h = p.h(0);
    for (int i = 0; i < 4; ++i) ASSERT_EQ(dev::nop(h), Status::Ok);
    // As on mlx5, losing a completion to a full CQ moves the QP to ERROR.
    EXPECT_EQ(dev::commit(h), Status::QpError);
    std::string m = THROWN(CompletionError, p.scq[0]->wait(4, 5000));
    EXPECT_HAS(m, "overran");
    EXPECT_HAS(m, "depth 2");
    EXPECT_EQ(p.qp[0]->state(), QpState::Error);
}

TEST(ControlPathCq, MovingACqKeepsItsQpsWorking) {
    Context ctx = cpu_ctx();
    ProtectionDomain pd(ctx);
    auto cq = std::make_unique<CompletionQueue>(ctx, CqOptions{16});
    QpOptions o;
    o.send_cq = o.recv_cq = cq.get();
    auto a = std::make_unique<QueuePair>(pd, o);
    auto b = std::make_unique<QueuePair>(pd, o);
    a->connect(b->endpoint());
    b->connect(a->endpoint());
    // The CQ object moves after its QPs were created on it.
    CompletionQueue moved(std::move(*cq));
    cq.reset();
    uint64_t s = 5, d = 0;
    MemoryRegion ms(pd, &s, 8, kLocalWrite), md(pd, &d, 8, kAllAccess);
    ASSERT_EQ(dev::write(a->device_handle(), &s, 8, ms.lkey(), uint64_t(&d), md.rkey()), Status::Ok);
    ASSERT_EQ(dev::commit(a->device_handle()), Status::Ok);
    EXPECT_EQ(moved.wait(1, 5000).size(), 1u);
    EXPECT_EQ(d, 5u);
    a.reset();  // QPs destroyed after their CQ object moved: no crash
    b.reset();
}

// ---- teardown while connected -----------------------------------------------------------

TEST(ControlPathTeardown, PeerDestroyedThenWriteFailsWithRetryExceeded) {
    Pair p(cpu_ctx());
    std::vector<uint8_t> src(256, 3), dst(256, 0);
    MemoryRegion ms(p.pd, src.data(), 256, kLocalWrite);
    MemoryRegion md(p.pd, dst.data(), 256, kAllAccess);
    auto h = p.h(0);
    Completion c = write_and_wait(h, src.data(), 8, ms.lkey(), dst.data(), md.rkey());
    ASSERT_EQ(c.status, 0);

    p.qp[1].reset();  // the peer goes away while connected
    std::fill(src.begin(), src.end(), 4);
    ASSERT_EQ(dev::write(h, src.data(), 256, ms.lkey(), uint64_t(dst.data()), md.rkey()), Status::Ok);
    dev::commit(h);
    try {
        p.scq[0]->wait(1, 5000);
        ADD_FAILURE() << "a WRITE to a destroyed peer succeeded";
    } catch (const CompletionError& e) {
        EXPECT_EQ(e.syndrome(), MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
        EXPECT_HAS(e.what(), "TRANSPORT_RETRY_EXC_ERR");
    }
    EXPECT_EQ(p.qp[0]->state(), QpState::Error);
    EXPECT_EQ(p.qp[0]->error_syndrome(), MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
    EXPECT_EQ(dst[8], 0) << "the WRITE reached memory of a destroyed peer's domain";

    // The survivor reconnects to a new peer and works again.
    p.qp[0]->reset();
    QpOptions o;
    o.send_cq = p.scq[1].get();
    o.recv_cq = p.rcq[1].get();
    p.qp[1] = std::make_unique<QueuePair>(p.pd, o);
    p.qp[0]->connect(p.qp[1]->endpoint());
    p.qp[1]->connect(p.qp[0]->endpoint());
    c = write_and_wait(p.h(0), src.data(), 256, ms.lkey(), dst.data(), md.rkey());
    EXPECT_EQ(c.status, 0) << mlx5::syndrome_name(c.status);
    EXPECT_EQ(dst[255], 4);
}

TEST(ControlPathTeardown, ResponderInRtrDestroyedThenWriteFails) {
    Two t;
    auto b = std::make_unique<QueuePair>(t.pd, t.opts());
    RtrAttr r;
    r.remote_qpn = b->qpn();
    t.a.to_init();
    t.a.to_rtr(r);
    t.a.to_rts();
    // The responder only reaches RTR (enough to receive).
    b->to_init();
    r.remote_qpn = t.a.qpn();
    b->to_rtr(r);
    std::vector<uint8_t> s(16, 1), d(16, 0);
    MemoryRegion ms(t.pd, s.data(), 16, kLocalWrite), md(t.pd, d.data(), 16, kAllAccess);
    auto h = t.a.device_handle();
    Completion c = write_and_wait(h, s.data(), 16, ms.lkey(), d.data(), md.rkey());
    EXPECT_EQ(c.status, 0) << mlx5::syndrome_name(c.status);
    EXPECT_EQ(d[15], 1);

    b.reset();
    std::fill(s.begin(), s.end(), 2);
    c = write_and_wait(h, s.data(), 16, ms.lkey(), d.data(), md.rkey());
    EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR) << mlx5::syndrome_name(c.status);
    EXPECT_EQ(d[15], 1);
    EXPECT_EQ(t.a.state(), QpState::Error);
}

/// Two connected pairs (a-b, c-d) whose four QPs share one send CQ and one receive CQ.
struct SharedCq {
    Context ctx = cpu_ctx();
    ProtectionDomain pd{ctx};
    CompletionQueue scq, rcq;
    std::unique_ptr<QueuePair> a, b, c, d;
    std::vector<uint8_t> src = std::vector<uint8_t>(64, 1), dst = std::vector<uint8_t>(64, 0);
    MemoryRegion ms{pd, src.data(), 64, kLocalWrite}, md{pd, dst.data(), 64, kAllAccess};
    explicit SharedCq(uint32_t depth) : scq(ctx, CqOptions{depth}), rcq(ctx, CqOptions{depth}) {
        QpOptions o;
        o.send_cq = &scq;
        o.recv_cq = &rcq;
        for (auto* q : {&a, &b, &c, &d}) *q = std::make_unique<QueuePair>(pd, o);
        link(*a, *b);
        link(*c, *d);
    }
    static void link(QueuePair& x, QueuePair& y) {
        x.connect(y.endpoint());
        y.connect(x.endpoint());
    }
    /// One committed WRITE (not waited for); its completion stays in scq.
    void post(QueuePair& q) {
        auto h = q.device_handle();
        ASSERT_EQ(dev::write(h, src.data(), 64, ms.lkey(), uint64_t(dst.data()), md.rkey(), kSignaled,
                             1'000'000'000ull),
                  Status::Ok);
        ASSERT_EQ(dev::commit(h), Status::Ok);
    }
    /// n rounds of post + wait on q: with wrecked queue counters posting times out.
    void rounds(QueuePair& q, int n) {
        for (int i = 0; i < n; ++i) {
            post(q);
            auto got = scq.wait(1, 5000);
            ASSERT_EQ(got[0].qpn, q.qpn()) << "round " << i;
        }
    }
};

TEST(ControlPathTeardown, ResetRemovesItsUnpolledCompletions) {
    SharedCq t(64);
    t.post(*t.a);
    t.post(*t.c);
    t.post(*t.a);
    t.post(*t.c);
    t.post(*t.a);
    t.a->to_error();
    t.b->to_error();
    t.a->reset();
    t.b->reset();
    // As libmlx5 does on RESET: a's completions are gone, c's remain, in order.
    auto got = t.scq.poll();
    ASSERT_EQ(got.size(), 2u);
    for (uint16_t i = 0; i < 2; ++i) {
        EXPECT_EQ(got[i].qpn, t.c->qpn());
        EXPECT_EQ(got[i].wqe_counter, i);
        EXPECT_TRUE(got[i].ok());
    }
    EXPECT_TRUE(t.scq.poll().empty());
    // The reset QP's counters are intact: more WQEs than its ring holds go through.
    SharedCq::link(*t.a, *t.b);
    t.rounds(*t.a, 600);
    t.rounds(*t.c, 10);
}

TEST(ControlPathTeardown, ResetCleansAcrossTheRingsEnd) {
    SharedCq t(4);
    ASSERT_EQ(t.scq.depth(), 4u);
    t.rounds(*t.c, 3);  // consumer index 3: the next two entries straddle the ring's end
    t.post(*t.c);
    t.post(*t.a);
    t.a->to_error();
    t.a->reset();
    auto got = t.scq.poll();
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].qpn, t.c->qpn());
    EXPECT_EQ(got[0].wqe_counter, 3);
    t.rounds(*t.c, 10);
}

TEST(ControlPathTeardown, DestroyRemovesItsUnpolledCompletions) {
    SharedCq t(64);
    const uint32_t gone = t.a->qpn();
    t.post(*t.c);
    t.post(*t.a);
    t.post(*t.a);
    t.post(*t.c);
    t.a.reset();
    t.b.reset();
    auto got = t.scq.poll();
    ASSERT_EQ(got.size(), 2u);
    for (auto& c : got) EXPECT_NE(c.qpn, gone);
    EXPECT_EQ(got[0].wqe_counter, 0);
    EXPECT_EQ(got[1].wqe_counter, 1);
    t.rounds(*t.c, 600);
}

// ---- device handles ---------------------------------------------------------------------

TEST(ControlPathHandle, FieldsMatchOptions) {
    Context ctx = cpu_ctx();
    ProtectionDomain pd(ctx);
    CompletionQueue scq(ctx, CqOptions{100}), rcq(ctx, CqOptions{30});
    QpOptions o;
    o.send_cq = &scq;
    o.recv_cq = &rcq;
    o.max_inline = 200;
    o.max_send_sge = 3;
    o.max_recv_sge = 5;
    o.sq_depth = 100;
    o.rq_depth = 50;
    QueuePair q(pd, o);
    dev::QpHandle h = q.device_handle();
    EXPECT_EQ(h.q.qpn, q.qpn());
    EXPECT_EQ(h.q.max_inline, 200u);
    EXPECT_EQ(h.q.max_send_sge, 3u);
    EXPECT_EQ(h.q.max_recv_sge, 5u);
    EXPECT_EQ(h.backend, Backend::Soft);
    EXPECT_EQ(h.q.sys, 1u);  // host-memory queues on a CPU context
    EXPECT_EQ(h.q.host_reachable, 1u);
    EXPECT_NE(h.soft.ctx, nullptr);
    EXPECT_EQ(h.soft.host_doorbell, nullptr);  // CPU threads execute this device themselves
    EXPECT_EQ(h.mlx5.uar, nullptr);
    EXPECT_NE(h.q.sq, nullptr);
    EXPECT_NE(h.q.rq, nullptr);
    EXPECT_NE(h.q.dbrec, nullptr);
    EXPECT_NE(h.q.ctr, nullptr);
    EXPECT_EQ(h.scq.cqn, scq.cqn());
    EXPECT_EQ(h.rcq.cqn, rcq.cqn());
    EXPECT_EQ(1u << h.scq.log_cnt, scq.depth());
    EXPECT_EQ(1u << h.rcq.log_cnt, rcq.depth());
    // The rings hold the asked depths: inline 200 B needs 2 + 13 ds = 4 WQEBBs per WQE.
    EXPECT_GE(1u << h.q.sq_log_bb, 100u * 4u);
    EXPECT_GE(1u << h.q.rq_log_cnt, 50u);
    EXPECT_GE(1u << h.q.rq_log_stride, 5u * 16u);
    EXPECT_EQ(q.options().max_inline, 200u);
    EXPECT_EQ(q.options().send_cq, &scq);
    // Handles are stable values: two calls agree byte for byte.
    dev::QpHandle h2 = q.device_handle();
    EXPECT_EQ(std::memcmp(&h, &h2, sizeof h), 0);
    dev::CqHandle ch = scq.device_handle();
    EXPECT_EQ(ch.cqn, scq.cqn());
    EXPECT_EQ(ch.sys, 1u);
    EXPECT_EQ(ch.host_reachable, 1u);
}

TEST(ControlPathHandle, ProtectionDomainsAreDistinct) {
    Context ctx = cpu_ctx();
    ProtectionDomain a(ctx), b(ctx);
    EXPECT_NE(a.handle(), b.handle());
    EXPECT_EQ(a.context().impl(), ctx.impl());
    ProtectionDomain c(std::move(a));
    EXPECT_EQ(c.context().name(), "soft-cpu");
}

// A default-constructed (never filled) handle is refused by every device call, not
// dereferenced: kernels cannot throw, so this is their "clear error".
TEST(ControlPathDeviceHandle, DefaultConstructedHandlesAreRefused) {
    gv::dev::QpHandle qp{};
    gv::dev::CqHandle cq{};
    uint64_t word = 0;
    EXPECT_EQ(gv::dev::write(qp, &word, 8, 1, 0x1000, 1), gv::Status::InvalidArgument);
    EXPECT_EQ(gv::dev::write_inline(qp, &word, 8, 0x1000, 1), gv::Status::InvalidArgument);
    EXPECT_EQ(gv::dev::fetch_add(qp, &word, 1, 0x1000, 1, 1), gv::Status::InvalidArgument);
    EXPECT_EQ(gv::dev::nop(qp), gv::Status::InvalidArgument);
    EXPECT_EQ(gv::dev::recv(qp, &word, 8, 1), gv::Status::InvalidArgument);
    EXPECT_EQ(gv::dev::commit(qp), gv::Status::InvalidArgument);
    gv::Completion c[4];
    EXPECT_EQ(gv::dev::poll_cq(cq, c, 4), 0u);
    uint32_t polled = 99;
    EXPECT_EQ(gv::dev::wait_cq(qp, cq, 1, c, 1'000'000, &polled), gv::Status::InvalidArgument);
    EXPECT_EQ(polled, 0u);
    EXPECT_EQ(gv::dev::wait_send(qp, 1, c, 1'000'000), gv::Status::InvalidArgument);
}
