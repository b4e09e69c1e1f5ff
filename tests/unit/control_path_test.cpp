// The host control path on CPU threads: contexts, registration, CQs, the QP state
// machine and its attribute checks, teardown while a peer is connected, device handles.
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <typeinfo>

#include "test_util.hpp"

using namespace gv;
using gvtest::Pair;

static_assert(std::is_trivially_copyable_v<dev::QpHandle>, "QP handles are passed to kernels by value");
static_assert(std::is_trivially_copyable_v<dev::CqHandle>, "CQ handles are passed to kernels by value");
static_assert(std::is_same_v<QueuePair::DeviceHandle, dev::QpHandle>);
static_assert(std::is_same_v<CompletionQueue::DeviceHandle, dev::CqHandle>);

namespace {

Context cpu_ctx() { return Context(ContextOptions{Backend::Soft, -1}); }
constexpr uint64_t kTimeout = 5'000'000'000ull;  // 5 s, in ns

/// Runs f, expects it to throw exactly E (or a subclass), returns what().
template <typename E, typename F>
std::string what_of(F&& f, const char* stmt, const char* file, int line) {
    try {
        f();
    } catch (const E& e) {
        return e.what();
    } catch (const std::exception& e) {
        ADD_FAILURE_AT(file, line) << stmt << " threw " << typeid(e).name() << " (" << e.what()
                                   << "), expected " << typeid(E).name();
        return {};
    }
    ADD_FAILURE_AT(file, line) << stmt << " did not throw, expected " << typeid(E).name();
    return {};
}
#define THROWN(E, stmt) what_of<E>([&] { stmt; }, #stmt, __FILE__, __LINE__)

#define EXPECT_HAS(msg, sub)                                 \
    EXPECT_NE(std::string(msg).find(sub), std::string::npos) \
        << "message: \"" << (msg) << "\"\nshould contain: \"" << (sub) << "\""

std::string hexs(uint64_t v) {
    char b[32];
    std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
    return b;
}

bool connectx_present() {
    int n = 0;
    ibv_device** l = ibv_get_device_list(&n);
    bool found = false;
    for (int i = 0; l && i < n; ++i) found |= mlx5dv_is_supported(l[i]);
    if (l) ibv_free_device_list(l);
    return found;
}

/// Two unconnected QPs on one send and one receive CQ, for state-machine tests.
struct Two {
    Context ctx = cpu_ctx();
    ProtectionDomain pd{ctx};
    CompletionQueue scq{ctx, CqOptions{64}}, rcq{ctx, CqOptions{64}};
    QpOptions opts() {
        QpOptions o;
        o.send_cq = &scq;
        o.recv_cq = &rcq;
        return o;
    }
    QueuePair a{pd, opts()}, b{pd, opts()};
};

/// Moves q from RESET to `to` along the legal path (ERROR: straight from RESET).
void bring_to(QueuePair& q, uint32_t peer, QpState to) {
    ASSERT_EQ(q.state(), QpState::Reset);
    if (to == QpState::Reset) return;
    if (to == QpState::Error) {
        q.to_error();
        return;
    }
    q.to_init();
    if (to == QpState::Init) return;
    RtrAttr r;
    r.remote_qpn = peer;
    q.to_rtr(r);
    if (to == QpState::Rtr) return;
    q.to_rts();
}

/// One signaled WRITE from a's handle, waited for; returns its completion.
Completion write_and_wait(const dev::QpHandle& h, const void* src, uint32_t n, uint32_t lkey, void* dst,
                          uint32_t rkey) {
    Completion c{};
    EXPECT_EQ(dev::write(h, src, n, lkey, uint64_t(dst), rkey), Status::Ok);
    dev::commit(h);  // QpError when the WQE failed: the completion says why
    Status st = dev::wait_send(h, 1, &c, kTimeout);
    EXPECT_TRUE(st == Status::Ok || st == Status::CompletionError) << status_name(st);
    return c;
}

}  // namespace

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

TEST(ControlPathContext, VerbsIsNotSupported) {
    std::string m = THROWN(NotSupported, Context(ContextOptions{Backend::Verbs, -1}));
    EXPECT_HAS(m, "verbs");
    EXPECT_HAS(m, "not implemented");
}

TEST(ControlPathContext, MissingGpuIsAClearError) {
    if (Context::gpu_count() > 5) GTEST_SKIP() << "this machine has a GPU 5";
    std::string m;
    try {
        Context c(ContextOptions{Backend::Soft, 5});
        ADD_FAILURE() << "a soft context on GPU 5 opened on a machine with " << Context::gpu_count()
                      << " GPU(s)";
    } catch (const InvalidUsage& e) {
        m = e.what();
    } catch (const NotSupported& e) {
        m = e.what();
    } catch (const std::exception& e) {
        ADD_FAILURE() << "expected InvalidUsage or NotSupported, got " << typeid(e).name() << ": "
                      << e.what();
    }
    EXPECT_HAS(m, "GPU 5");
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
    EXPECT_GE(1u << d.device_handle().sq_log_bb, 32768u);
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
    EXPECT_EQ(h.qpn, q.qpn());
    EXPECT_EQ(h.max_inline, 200u);
    EXPECT_EQ(h.max_send_sge, 3u);
    EXPECT_EQ(h.max_recv_sge, 5u);
    EXPECT_EQ(h.backend, BackendKind::Soft);
    EXPECT_EQ(h.sys, 1u);  // host-memory queues on a CPU context
    EXPECT_EQ(h.soft_on_host, 1u);
    EXPECT_NE(h.soft, nullptr);
    EXPECT_NE(h.sq, nullptr);
    EXPECT_NE(h.rq, nullptr);
    EXPECT_NE(h.dbrec, nullptr);
    EXPECT_NE(h.ctr, nullptr);
    EXPECT_EQ(h.scq.cqn, scq.cqn());
    EXPECT_EQ(h.rcq.cqn, rcq.cqn());
    EXPECT_EQ(1u << h.scq.log_cnt, scq.depth());
    EXPECT_EQ(1u << h.rcq.log_cnt, rcq.depth());
    // The rings hold the asked depths: inline 200 B needs 2 + 13 ds = 4 WQEBBs per WQE.
    EXPECT_GE(1u << h.sq_log_bb, 100u * 4u);
    EXPECT_GE(1u << h.rq_log_cnt, 50u);
    EXPECT_GE(1u << h.rq_log_stride, 5u * 16u);
    EXPECT_EQ(q.options().max_inline, 200u);
    EXPECT_EQ(q.options().send_cq, &scq);
    // Handles are stable values: two calls agree byte for byte.
    dev::QpHandle h2 = q.device_handle();
    EXPECT_EQ(std::memcmp(&h, &h2, sizeof h), 0);
    dev::CqHandle ch = scq.device_handle();
    EXPECT_EQ(ch.cqn, scq.cqn());
    EXPECT_EQ(ch.sys, 1u);
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
