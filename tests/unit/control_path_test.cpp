// The host control path on CPU threads: contexts, memory registration, the QP state machine
// and its attribute checks.
#include "control_path_util.hpp"
#include "core/backend.hpp"
#include "proc_util.hpp"

using namespace gv;
using gvtest::Pair;

static_assert(std::is_trivially_copyable_v<dev::QpHandle>, "QP handles are passed to kernels by value");
static_assert(std::is_trivially_copyable_v<dev::CqHandle>, "CQ handles are passed to kernels by value");
static_assert(std::is_same_v<QueuePair::DeviceHandle, dev::QpHandle>);
static_assert(std::is_same_v<CompletionQueue::DeviceHandle, dev::CqHandle>);

// ---- Context ----------------------------------------------------------------------------

TEST(ControlPathContext, SoftCpuOpens) {
    Context c = cpu_ctx();
    EXPECT_EQ(c.backend(), Backend::Soft);
    EXPECT_EQ(c.gpu(), -1);
    EXPECT_EQ(c.name(), "soft-cpu");
    Context copy = c;  // shared ownership
    EXPECT_EQ(copy.impl(), c.impl());
    Context other = cpu_ctx();
    EXPECT_EQ(other.name(), "soft-cpu");
    EXPECT_STREQ(backend_name(Backend::Soft), "soft");
}

TEST(ControlPathContext, AutoWithCpuThreadsIsSoft) {
    Context c(ContextOptions{Backend::Auto, -1});
    EXPECT_EQ(c.backend(), Backend::Soft);
    EXPECT_EQ(c.gpu(), -1);
    EXPECT_EQ(c.name(), "soft-cpu");
}

TEST(ControlPathContext, Mlx5WithoutConnectXIsNotSupported) {
    if (connectx_present()) GTEST_SKIP() << "a ConnectX (mlx5) device is present on this machine";
    std::string m = THROWN(NotSupported, Context(ContextOptions{Backend::Mlx5, -1}));
    EXPECT_HAS(m, "mlx5");
    EXPECT_HAS(m, "no ConnectX");
    EXPECT_HAS(m, "found");
    EXPECT_HAS(m, "Backend::Soft");  // says what to use instead
    // A named device that does not exist is named in the message.
    m = THROWN(NotSupported, Context(ContextOptions{Backend::Mlx5, -1, "mlx5_7"}));
    EXPECT_HAS(m, "'mlx5_7'");
    EXPECT_HAS(m, "found");
}

TEST(ControlPathContext, VerbsWithoutDeviceIsNotSupported) {
    std::vector<std::string> names;
    std::vector<bool> mlx5;
    gv::detail::list_rdma_devices(&names, &mlx5);
    if (!names.empty()) GTEST_SKIP() << "an RDMA device (" << names[0] << ") is present on this machine";
    // At once, saying what is missing and the fix.
    std::string m = THROWN(NotSupported, Context(ContextOptions{Backend::Verbs, -1}));
    EXPECT_HAS(m, "Backend::Verbs needs an RDMA device");
    EXPECT_HAS(m, "no RDMA device");
    EXPECT_HAS(m, "rdma_rxe");        // how to get one
    EXPECT_HAS(m, "Backend::Soft");   // or what to use instead
}

// Asks CUDA how many GPUs there are: in a child process, so that this CPU test process never
// initialises CUDA (tests/unit/no_cuda_test.cpp says why).
TEST(ControlPathContext, MissingGpuIsAClearError) {
    int pipefd[2];
    ASSERT_EQ(pipe(pipefd), 0);
    pid_t child = gvtest::spawn([&] {
        ::close(pipefd[0]);
        std::string m;
        if (Context::gpu_count() > 5) {
            m = "skip: this machine has a GPU 5";
        } else {
            try {
                Context c(ContextOptions{Backend::Soft, 5});
                m = "opened: a soft context on GPU 5 opened on a machine with " +
                    std::to_string(Context::gpu_count()) + " GPU(s)";
            } catch (const InvalidUsage& e) {
                m = std::string("error: ") + e.what();
            } catch (const NotSupported& e) {
                m = std::string("error: ") + e.what();
            } catch (const std::exception& e) {
                m = std::string("wrong exception: ") + e.what();
            }
        }
        return ::write(pipefd[1], m.data(), m.size()) == ssize_t(m.size()) ? 0 : 9;
    });
    ::close(pipefd[1]);
    std::string m;
    char buf[512];
    for (ssize_t r; (r = ::read(pipefd[0], buf, sizeof buf)) > 0;) m.append(buf, size_t(r));
    ::close(pipefd[0]);
    gvtest::expect_exit_ok(gvtest::wait_child(child, 30000));
    if (m.rfind("skip: ", 0) == 0) GTEST_SKIP() << m.substr(6);
    ASSERT_EQ(m.rfind("error: ", 0), 0u) << m;
    EXPECT_HAS(m, "GPU 5");
    EXPECT_FALSE(Context::cuda_used());
}

TEST(ControlPathContext, NegativeGpuIsInvalid) {
    std::string m = THROWN(InvalidUsage, Context(ContextOptions{Backend::Soft, -7}));
    EXPECT_HAS(m, "-7");
    EXPECT_HAS(m, "expected");
    THROWN(InvalidUsage, Context(ContextOptions{Backend::Auto, -3}));
}

// ---- MemoryRegion -----------------------------------------------------------------------

TEST(ControlPathMr, KeysStayValidAndUniqueOverThousandsOfRegistrations) {
    Context ctx = cpu_ctx();
    ProtectionDomain pd(ctx);
    std::vector<uint8_t> buf(4096);
    std::set<uint32_t> seen;
    std::deque<MemoryRegion> live;  // a moving window of live regions
    const uint32_t access[] = {0u, kLocalWrite, kRemoteRead, uint32_t(kAllAccess),
                               kLocalWrite | kRemoteWrite};
    for (int i = 0; i < 20000; ++i) {
        live.emplace_back(pd, buf.data() + (i % 64), 1 + i % 4000, access[i % 5]);
        const MemoryRegion& mr = live.back();
        ASSERT_NE(mr.lkey(), 0u) << "registration " << i;
        ASSERT_EQ(mr.lkey(), mr.rkey()) << "registration " << i;
        ASSERT_NE(mr.lkey(), uint32_t(MLX5_INVALID_LKEY)) << "registration " << i;
        ASSERT_TRUE(seen.insert(mr.lkey()).second)
            << "key " << hexs(mr.lkey()) << " issued twice (registration " << i << ")";
        if (live.size() > size_t(1 + i % 97)) live.pop_front();
    }
}

TEST(ControlPathMr, ReusedSlotGetsNewKeyAndStaleKeyIsRejected) {
    Pair p(cpu_ctx());
    std::vector<uint8_t> src(256, 0x5a), dst(256, 0), filler(64);
    MemoryRegion ms(p.pd, src.data(), src.size(), kLocalWrite);
    auto md = std::make_unique<MemoryRegion>(p.pd, dst.data(), dst.size(), kAllAccess);
    const uint32_t stale = md->rkey();

    // Fill every slot, so the next registration must reuse the one we free.
    std::vector<MemoryRegion> all;
    std::string full;
    for (int i = 0; i < (1 << 20) && full.empty(); ++i) {
        try {
            all.emplace_back(p.pd, filler.data(), filler.size(), kLocalWrite);
        } catch (const InvalidUsage& e) {
            full = e.what();
        }
    }
    ASSERT_FALSE(full.empty()) << "registration never ran out of slots";
    EXPECT_HAS(full, "in use");
    EXPECT_GT(all.size(), 1000u);

    md.reset();
    md = std::make_unique<MemoryRegion>(p.pd, dst.data(), dst.size(), kAllAccess);
    const uint32_t fresh = md->rkey();
    EXPECT_NE(fresh, stale) << "a re-registered slot got its old key back";
    EXPECT_NE(fresh, uint32_t(MLX5_INVALID_LKEY));
    THROWN(InvalidUsage, MemoryRegion(p.pd, filler.data(), 8, 0));  // still full

    // The same slot re-registered many times: consecutive keys differ, no key equals
    // MLX5_INVALID_LKEY, and none comes back within 254 reuses (mlx5's 8-bit key variant).
    std::deque<uint32_t> recent{fresh};
    for (int i = 0; i < 2000; ++i) {
        all.pop_back();
        all.emplace_back(p.pd, filler.data(), filler.size(), kLocalWrite);
        uint32_t k = all.back().lkey();
        ASSERT_NE(k, uint32_t(MLX5_INVALID_LKEY));
        ASSERT_NE(k, 0u);
        for (uint32_t r : recent) ASSERT_NE(k, r) << "key reissued after " << i << " reuses";
        recent.push_back(k);
        if (recent.size() > 254) recent.pop_front();
    }

    // The new key works; the stale one (same slot, old tag) does not reach the memory.
    auto h = p.h(0);
    Completion c = write_and_wait(h, src.data(), 64, ms.lkey(), dst.data(), fresh);
    EXPECT_EQ(c.status, 0) << mlx5::syndrome_name(c.status);
    EXPECT_EQ(dst[0], 0x5a);
    std::fill(src.begin(), src.end(), 0x77);
    c = write_and_wait(h, src.data(), 64, ms.lkey(), dst.data(), stale);
    EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR) << mlx5::syndrome_name(c.status);
    EXPECT_EQ(dst[0], 0x5a) << "a WRITE with a stale rkey changed memory";
}

TEST(ControlPathMr, InvalidRegistrationsSayWhatIsExpected) {
    Context ctx = cpu_ctx();
    ProtectionDomain pd(ctx);
    std::vector<uint8_t> buf(64);
    std::string m = THROWN(InvalidUsage, MemoryRegion(pd, nullptr, 64, kLocalWrite));
    EXPECT_HAS(m, "expected");
    m = THROWN(InvalidUsage, MemoryRegion(pd, buf.data(), 0, kLocalWrite));
    EXPECT_HAS(m, "length");
    EXPECT_HAS(m, "expected");
    m = THROWN(InvalidUsage, MemoryRegion(pd, buf.data(), 64, 0x10));
    EXPECT_HAS(m, "0x10");
    EXPECT_HAS(m, "expected");
    EXPECT_HAS(m, "kRemoteAtomic");
    m = THROWN(InvalidUsage, MemoryRegion(pd, buf.data(), 64, kLocalWrite | 0x80000000u));
    EXPECT_HAS(m, "unknown");
    m = THROWN(InvalidUsage, MemoryRegion(pd, buf.data(), 64, kRemoteWrite));
    EXPECT_HAS(m, "kLocalWrite");
    m = THROWN(InvalidUsage, MemoryRegion(pd, buf.data(), 64, kRemoteAtomic | kRemoteRead));
    EXPECT_HAS(m, "kLocalWrite");
    // What verbs allows does register.
    MemoryRegion a(pd, buf.data(), 64, 0);
    MemoryRegion b(pd, buf.data(), 64, kRemoteRead);
    MemoryRegion c(pd, buf.data(), 1, kLocalWrite | kRemoteWrite);
    EXPECT_NE(a.lkey(), b.lkey());
    EXPECT_NE(b.lkey(), c.lkey());
}

TEST(ControlPathMr, RemoteDescribesTheRegion) {
    Context ctx = cpu_ctx();
    ProtectionDomain pd(ctx);
    std::vector<uint8_t> buf(1000);
    MemoryRegion mr(pd, buf.data() + 3, 997, kLocalWrite | kRemoteRead);
    RemoteBuffer r = mr.remote();
    EXPECT_EQ(r.addr, uint64_t(buf.data() + 3));
    EXPECT_EQ(r.length, 997u);
    EXPECT_EQ(r.rkey, mr.rkey());
    EXPECT_EQ(r.access, uint32_t(kLocalWrite | kRemoteRead));
    EXPECT_EQ(mr.addr(), buf.data() + 3);
    EXPECT_EQ(mr.length(), 997u);
    EXPECT_EQ(mr.access(), uint32_t(kLocalWrite | kRemoteRead));
    EXPECT_FALSE(mr.is_device_memory());
}

TEST(ControlPathMr, MovesKeepOneRegistration) {
    Pair p(cpu_ctx());
    std::vector<uint8_t> src(128), d1(128, 0), d2(128, 0);
    gvtest::fill_random(src.data(), src.size(), 7);
    MemoryRegion ms(p.pd, src.data(), src.size(), kLocalWrite);
    auto h = p.h(0);

    // Move construction: the moved-from object's destructor must not deregister.
    std::unique_ptr<MemoryRegion> moved;
    uint32_t k1;
    {
        MemoryRegion m1(p.pd, d1.data(), d1.size(), kAllAccess);
        k1 = m1.rkey();
        moved = std::make_unique<MemoryRegion>(std::move(m1));
    }
    EXPECT_EQ(moved->rkey(), k1);
    EXPECT_EQ(moved->addr(), d1.data());
    Completion c = write_and_wait(h, src.data(), 128, ms.lkey(), d1.data(), k1);
    ASSERT_EQ(c.status, 0) << "moved region lost its registration: " << mlx5::syndrome_name(c.status);
    EXPECT_EQ(gvtest::first_diff(src.data(), d1.data(), 128), -1);

    // Self-move leaves it registered.
    MemoryRegion& self = *moved;
    self = std::move(self);
    c = write_and_wait(h, src.data(), 8, ms.lkey(), d1.data(), k1);
    ASSERT_EQ(c.status, 0) << "self-move deregistered: " << mlx5::syndrome_name(c.status);

    // Move assignment: the target's old region is deregistered, the moved one stays.
    MemoryRegion m2(p.pd, d2.data(), d2.size(), kAllAccess);
    const uint32_t k2 = m2.rkey();
    m2 = std::move(*moved);
    moved.reset();  // destroys the moved-from object
    EXPECT_EQ(m2.rkey(), k1);
    c = write_and_wait(h, src.data(), 16, ms.lkey(), d1.data(), k1);
    ASSERT_EQ(c.status, 0) << "move-assigned region lost its registration: " << mlx5::syndrome_name(c.status);
    c = write_and_wait(h, src.data(), 16, ms.lkey(), d2.data(), k2);
    EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR)
        << "the overwritten region is still registered: " << mlx5::syndrome_name(c.status);
    EXPECT_EQ(d2[0], 0);
}

// ---- QP state machine -------------------------------------------------------------------

TEST(ControlPathQp, ResetInitRtrRts) {
    Two t;
    EXPECT_EQ(t.a.state(), QpState::Reset);
    t.a.to_init();
    EXPECT_EQ(t.a.state(), QpState::Init);
    t.a.to_init();  // INIT -> INIT is legal
    EXPECT_EQ(t.a.state(), QpState::Init);
    RtrAttr r;
    r.remote_qpn = t.b.qpn();
    t.a.to_rtr(r);
    EXPECT_EQ(t.a.state(), QpState::Rtr);
    t.a.to_rts();
    EXPECT_EQ(t.a.state(), QpState::Rts);
    t.a.to_rts();  // RTS -> RTS is legal
    EXPECT_EQ(t.a.state(), QpState::Rts);
    EXPECT_EQ(t.a.error_syndrome(), 0);
}

TEST(ControlPathQp, EveryInvalidTransitionNamesBothStates) {
    const QpState froms[] = {QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts, QpState::Error};
    const QpState tos[] = {QpState::Init, QpState::Rtr, QpState::Rts};
    int invalid = 0;
    for (QpState from : froms) {
        for (QpState to : tos) {
            bool legal = (from == QpState::Reset && to == QpState::Init) ||
                         (from == QpState::Init && (to == QpState::Init || to == QpState::Rtr)) ||
                         (from == QpState::Rtr && to == QpState::Rts) ||
                         (from == QpState::Rts && to == QpState::Rts);
            SCOPED_TRACE(std::string(qp_state_name(from)) + " -> " + qp_state_name(to));
            Two t;
            bring_to(t.a, t.b.qpn(), from);
            ASSERT_EQ(t.a.state(), from);
            RtrAttr r;
            r.remote_qpn = t.b.qpn();
            auto go = [&] {
                if (to == QpState::Init) t.a.to_init();
                if (to == QpState::Rtr) t.a.to_rtr(r);
                if (to == QpState::Rts) t.a.to_rts();
            };
            if (legal) {
                go();
                EXPECT_EQ(t.a.state(), to);
                continue;
            }
            ++invalid;
            std::string m = THROWN(InvalidUsage, go());
            EXPECT_HAS(m, std::string(qp_state_name(from)) + " -> " + qp_state_name(to));
            EXPECT_EQ(t.a.state(), from) << "a refused transition changed the state";
        }
    }
    EXPECT_EQ(invalid, 10);
}

TEST(ControlPathQp, ToErrorFromAnyState) {
    for (QpState from : {QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts, QpState::Error}) {
        SCOPED_TRACE(qp_state_name(from));
        Two t;
        bring_to(t.a, t.b.qpn(), from);
        t.a.to_error();
        EXPECT_EQ(t.a.state(), QpState::Error);
        EXPECT_EQ(t.a.error_syndrome(), 0) << "moved to ERROR by the user, not by a failure";
        t.a.reset();
        EXPECT_EQ(t.a.state(), QpState::Reset);
    }
}

TEST(ControlPathQp, ResetFromErrorThenReconnectAndWrite) {
    Pair p(cpu_ctx());
    const size_t n = 4096;
    std::vector<uint8_t> src(n), dst(n, 0);
    gvtest::fill_random(src.data(), n, 11);
    MemoryRegion ms(p.pd, src.data(), n, kLocalWrite);
    MemoryRegion md(p.pd, dst.data(), n, kAllAccess);
    auto h = p.h(0);

    // A failure (bad rkey) moves qp0 to ERROR with a syndrome; later work is flushed.
    Completion c = write_and_wait(h, src.data(), 64, ms.lkey(), dst.data(), md.rkey() ^ 0x80);
    EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR) << mlx5::syndrome_name(c.status);
    EXPECT_EQ(p.qp[0]->state(), QpState::Error);
    EXPECT_EQ(p.qp[0]->error_syndrome(), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
    ASSERT_EQ(dev::write(h, src.data(), 64, ms.lkey(), uint64_t(dst.data()), md.rkey()), Status::Ok);
    EXPECT_EQ(dev::commit(h), Status::QpError);
    ASSERT_EQ(dev::wait_send(h, 1, &c, kTimeout), Status::CompletionError);
    EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR) << mlx5::syndrome_name(c.status);
    EXPECT_EQ(dst[0], 0);
    EXPECT_TRUE(p.scq[0]->poll().empty());

    // Both sides back to RESET, reconnected.
    p.qp[1]->to_error();
    p.qp[0]->reset();
    p.qp[1]->reset();
    EXPECT_EQ(p.qp[0]->state(), QpState::Reset);
    EXPECT_EQ(p.qp[0]->error_syndrome(), 0);
    p.qp[0]->connect(p.qp[1]->endpoint());
    p.qp[1]->connect(p.qp[0]->endpoint());
    EXPECT_EQ(p.qp[0]->state(), QpState::Rts);
    EXPECT_EQ(p.qp[1]->state(), QpState::Rts);

    // The queues start over: the first WQE after the reset has index 0.
    h = p.h(0);
    c = write_and_wait(h, src.data(), uint32_t(n), ms.lkey(), dst.data(), md.rkey());
    EXPECT_EQ(c.status, 0) << mlx5::syndrome_name(c.status);
    EXPECT_EQ(c.wqe_opcode, MLX5_OPCODE_RDMA_WRITE);
    EXPECT_EQ(c.wqe_counter, 0);
    EXPECT_EQ(gvtest::first_diff(src.data(), dst.data(), n), -1);
    // And the other direction.
    std::vector<uint8_t> back(n, 0);
    MemoryRegion mb(p.pd, back.data(), n, kAllAccess);
    c = write_and_wait(p.h(1), dst.data(), uint32_t(n), md.lkey(), back.data(), mb.rkey());
    EXPECT_EQ(c.status, 0) << mlx5::syndrome_name(c.status);
    EXPECT_EQ(gvtest::first_diff(src.data(), back.data(), n), -1);
}

TEST(ControlPathQp, AttributeValidation) {
    Two t;
    struct Bad {
        const char* what;
        std::function<void()> call;
        std::vector<std::string> say;
    };
    auto init = [&](auto f) {
        InitAttr a;
        f(a);
        t.a.to_init(a);
    };
    auto rtr = [&](auto f) {
        RtrAttr a;
        a.remote_qpn = t.b.qpn();
        f(a);
        t.a.to_rtr(a);
    };
    auto rts = [&](auto f) {
        RtsAttr a;
        f(a);
        t.a.to_rts(a);
    };

    // RESET -> INIT
    std::vector<Bad> at_reset = {
        {"port 2", [&] { init([](InitAttr& a) { a.port = 2; }); }, {"port 2"}},
        {"port 0", [&] { init([](InitAttr& a) { a.port = 0; }); }, {"port 0"}},
        {"access 0x100",
         [&] { init([](InitAttr& a) { a.access = 0x100; }); },
         {"0x100", "unknown", "expected"}},
    };
    for (auto& b : at_reset) {
        SCOPED_TRACE(b.what);
        std::string m = THROWN(InvalidUsage, b.call());
        for (auto& s : b.say) EXPECT_HAS(m, s);
        EXPECT_EQ(t.a.state(), QpState::Reset);
    }
    t.a.to_init(InitAttr{kAllAccess, 1});
    ASSERT_EQ(t.a.state(), QpState::Init);

    // INIT -> RTR
    std::vector<Bad> at_init = {
        {"path_mtu 300",
         [&] { rtr([](RtrAttr& a) { a.path_mtu = 300; }); },
         {"path_mtu 300", "expected 256, 512, 1024, 2048 or 4096"}},
        {"path_mtu 8192", [&] { rtr([](RtrAttr& a) { a.path_mtu = 8192; }); }, {"path_mtu 8192"}},
        {"rq_psn 2^24",
         [&] { rtr([](RtrAttr& a) { a.rq_psn = 1u << 24; }); },
         {"rq_psn", "0x1000000", "24 bits"}},
        {"min_rnr_timer 32",
         [&] { rtr([](RtrAttr& a) { a.min_rnr_timer = 32; }); },
         {"min_rnr_timer 32", "0 .. 31"}},
        {"max_dest_rd_atomic 17",
         [&] { rtr([](RtrAttr& a) { a.max_dest_rd_atomic = 17; }); },
         {"max_dest_rd_atomic 17", "0 .. 16"}},
    };
    for (auto& b : at_init) {
        SCOPED_TRACE(b.what);
        std::string m = THROWN(InvalidUsage, b.call());
        for (auto& s : b.say) EXPECT_HAS(m, s);
        EXPECT_EQ(t.a.state(), QpState::Init);
    }
    // The edges of each range are accepted.
    rtr([](RtrAttr& a) {
        a.path_mtu = 256;
        a.rq_psn = (1u << 24) - 1;
        a.min_rnr_timer = 31;
        a.max_dest_rd_atomic = 16;
    });
    ASSERT_EQ(t.a.state(), QpState::Rtr);

    // RTR -> RTS
    std::vector<Bad> at_rtr = {
        {"sq_psn 2^24",
         [&] { rts([](RtsAttr& a) { a.sq_psn = 1u << 24; }); },
         {"sq_psn", "0x1000000", "24 bits"}},
        {"timeout 32", [&] { rts([](RtsAttr& a) { a.timeout = 32; }); }, {"timeout 32", "0 .. 31"}},
        {"retry_cnt 8", [&] { rts([](RtsAttr& a) { a.retry_cnt = 8; }); }, {"retry_cnt 8", "0 .. 7"}},
        {"rnr_retry 8", [&] { rts([](RtsAttr& a) { a.rnr_retry = 8; }); }, {"rnr_retry 8", "0 .. 7"}},
        {"max_rd_atomic 17",
         [&] { rts([](RtsAttr& a) { a.max_rd_atomic = 17; }); },
         {"max_rd_atomic 17", "0 .. 16"}},
    };
    for (auto& b : at_rtr) {
        SCOPED_TRACE(b.what);
        std::string m = THROWN(InvalidUsage, b.call());
        for (auto& s : b.say) EXPECT_HAS(m, s);
        EXPECT_EQ(t.a.state(), QpState::Rtr);
    }
    rts([](RtsAttr& a) {
        a.sq_psn = (1u << 24) - 1;
        a.timeout = 31;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 16;
    });
    EXPECT_EQ(t.a.state(), QpState::Rts);
}

TEST(ControlPathQp, RtrToMissingRemoteQpNamesIt) {
    Two t;
    uint32_t gone;
    {
        QueuePair tmp(t.pd, t.opts());
        gone = tmp.qpn();
    }
    t.a.to_init();
    for (uint32_t q : {gone, 0xabcdefu, 0u}) {
        RtrAttr r;
        r.remote_qpn = q;
        std::string m = THROWN(InvalidUsage, t.a.to_rtr(r));
        EXPECT_HAS(m, hexs(q));
        EXPECT_HAS(m, "does not exist");
        EXPECT_EQ(t.a.state(), QpState::Init);
    }
}

TEST(ControlPathQp, EndpointDescribesTheQp) {
    Two t;
    QpEndpoint e = t.a.endpoint();
    EXPECT_EQ(e.backend, Backend::Soft);
    EXPECT_EQ(e.qpn, t.a.qpn());
    EXPECT_LT(e.psn, 1u << 24);
    EXPECT_EQ(e.device, "soft-cpu");
    EXPECT_NE(t.a.qpn(), t.b.qpn());
    EXPECT_LT(t.a.qpn(), 1u << 24);
}

// ---- QP options -------------------------------------------------------------------------
