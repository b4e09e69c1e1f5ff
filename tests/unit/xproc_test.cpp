// The software device across processes (docs/cross-process.md): a parent and a forked
// child each open a CPU context, exchange endpoints and buffers over an oob::Channel on
// loopback, connect, and the child's executor reads and writes the parent's shared buffers
// directly. Every wait is bounded; children carry an alarm.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gpuverbs/gpuverbs.hpp"
#include "gpuverbs/oob.hpp"
#include "peer_util.hpp"
#include "proc_util.hpp"
#include "soft/locator.hpp"
#include "test_util.hpp"

using namespace gv;
using namespace gv::oob;

namespace {
/// The software device's locator an endpoint carries (empty: pid 0).
gv::detail::soft::Locator locator(const QpEndpoint& e) { return gv::detail::soft::decode(e.extra); }
}  // namespace

namespace {

using gvtest::Clock;
using gvtest::ms_since;
constexpr uint64_t kNs = 1'000'000'000ull;  // one second in ns
constexpr int kMs = 5000;                    // channel timeouts

/// In a child: gtest assertions do not reach the parent, so failures throw (exit code 100).

using gvtest::spawn;

int wait_child(pid_t pid, int timeout_ms = 15000) { return gvtest::wait_child(pid, timeout_ms); }
using gvtest::expect_exit_ok;

/// One side: a CPU context, a protection domain, two CQs and one QP.
struct Side : gvtest::Side {
    Side() : gvtest::Side(-1) {}
};

void barrier(Channel& ch, uint8_t tag) { gvtest::barrier(ch, tag, kMs); }

uint8_t pattern(size_t i, uint8_t seed) { return uint8_t(i * 131 + seed * 7 + (i >> 8)); }
void fill(uint8_t* p, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; ++i) p[i] = pattern(i, seed);
}
long first_bad(const uint8_t* p, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; ++i)
        if (p[i] != pattern(i, seed)) return long(i);
    return -1;
}

constexpr size_t kBig = 64 * 1024;
constexpr size_t kMsg = 4096;
constexpr uint64_t kCounter0 = 1000;

}  // namespace

// The child WRITEs into, READs from, SENDs into and fetch_adds on the parent's SharedBuffers
// (the parent's CPU never takes part but for posting one receive and polling); every byte is
// checked on both sides. Then a WRITE into a parent region over private malloc memory
// completes with REMOTE_ACCESS_ERR, leaves that memory untouched and moves both QPs to ERROR.
TEST(CrossProcess, WriteReadSendAtomicOnPeerSharedBuffers) {
    Listener lis = Channel::listen(0);
    const uint16_t port = lis.port();
    pid_t child = spawn([port] {
        Channel ch = Channel::connect("127.0.0.1", port, kMs);
        Side s;
        std::vector<uint8_t> out(kBig), in(kBig, 0), msg(kMsg);
        fill(out.data(), kBig, 1);
        fill(msg.data(), kMsg, 3);
        uint64_t old = 0;
        // Private memory is fine for the child's own side of each operation.
        MemoryRegion mout(s.pd, out.data(), kBig, kLocalWrite), min(s.pd, in.data(), kBig, kLocalWrite),
            mmsg(s.pd, msg.data(), kMsg, kLocalWrite), mold(s.pd, &old, 8, kLocalWrite);
        Exchanged got = ch.exchange(Backend::Soft, {s.qp.endpoint()}, {}, kMs);
        XCHECK(got.qps.size() == 1 && got.buffers.size() == 4, "exchange sizes");
        XCHECK(locator(got.qps[0]).pid == uint32_t(getppid()), "the parent's locator names the parent");
        s.qp.connect(got.qps[0]);
        barrier(ch, 1);
        const RemoteBuffer &target = got.buffers[0], &source = got.buffers[1], &counter = got.buffers[2],
                           &priv = got.buffers[3];
        auto h = s.h();
        Completion c[1];
        XCHECK(dev::write(h, out.data(), kBig, mout.lkey(), target.addr, target.rkey) == Status::Ok, "post write");
        XCHECK(dev::commit(h) == Status::Ok, "commit");
        XCHECK(dev::wait_send(h, 1, c, 5 * kNs) == Status::Ok, "write completion");
        XCHECK(dev::read(h, in.data(), kBig, min.lkey(), source.addr, source.rkey) == Status::Ok, "post read");
        XCHECK(dev::commit(h) == Status::Ok, "commit");
        XCHECK(dev::wait_send(h, 1, c, 5 * kNs) == Status::Ok, "read completion");
        long bad = first_bad(in.data(), kBig, 2);
        XCHECK(bad == -1, "READ brought wrong data at offset " + std::to_string(bad));
        XCHECK(dev::send(h, msg.data(), kMsg, mmsg.lkey()) == Status::Ok, "post send");
        XCHECK(dev::commit(h) == Status::Ok, "commit");
        XCHECK(dev::wait_send(h, 1, c, 5 * kNs) == Status::Ok, "send completion");
        XCHECK(dev::fetch_add(h, &old, mold.lkey(), counter.addr, counter.rkey, 5) == Status::Ok, "post atomic");
        XCHECK(dev::commit(h) == Status::Ok, "commit");
        XCHECK(dev::wait_send(h, 1, c, 5 * kNs) == Status::Ok, "atomic completion");
        XCHECK(old == kCounter0, "fetch_add returned " + std::to_string(old));
        // A region over the parent's private memory: refused, nothing touched.
        XCHECK(dev::write(h, out.data(), 256, mout.lkey(), priv.addr, priv.rkey) == Status::Ok, "post write");
        // The commit executes the WQE right here: the QP is in ERROR when it returns.
        XCHECK(dev::commit(h) == Status::QpError, "commit into a private region");
        XCHECK(dev::wait_send(h, 1, c, 5 * kNs) == Status::CompletionError, "private write must fail");
        XCHECK(c[0].status == MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
               std::string("syndrome ") + mlx5::syndrome_name(c[0].status));
        XCHECK(s.qp.state() == QpState::Error, "QP in ERROR after the access error");
        barrier(ch, 2);
        barrier(ch, 3);  // stay alive until the parent checked its QP (our exit moves it to ERROR)
        return 0;
    });
    ASSERT_GT(child, 0);
    const auto t0 = Clock::now();
    {
        Channel ch = lis.accept(kMs);
        Side s;
        SharedBuffer target(s.ctx, kBig), source(s.ctx, kBig), rbuf(s.ctx, kMsg), counter(s.ctx, 8);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(target.data()) % 4096, 0u);
        fill(source.as<uint8_t>(), kBig, 2);
        *counter.as<uint64_t>() = kCounter0;
        std::vector<uint8_t> priv(4096, 0xAB);
        MemoryRegion mt(s.pd, target.data(), kBig, kAllAccess), ms(s.pd, source.data(), kBig, kAllAccess),
            mr(s.pd, rbuf.data(), kMsg, kLocalWrite), mc(s.pd, counter.data(), 8, kAllAccess),
            mp(s.pd, priv.data(), priv.size(), kAllAccess);
        ASSERT_EQ(dev::recv(s.h(), rbuf.data(), kMsg, mr.lkey()), Status::Ok);
        Exchanged got = ch.exchange(Backend::Soft, {s.qp.endpoint()},
                                    {mt.remote(), ms.remote(), mc.remote(), mp.remote()}, kMs);
        ASSERT_EQ(got.qps.size(), 1u);
        EXPECT_EQ(locator(got.qps[0]).pid, uint32_t(child));
        s.qp.connect(got.qps[0]);
        barrier(ch, 1);
        // The SEND lands in the posted receive: poll from the host.
        std::vector<Completion> rc = s.rcq.wait(1, 5000);
        ASSERT_EQ(rc.size(), 1u);
        EXPECT_EQ(rc[0].cqe_opcode, MLX5_CQE_RESP_SEND);
        EXPECT_EQ(rc[0].byte_len, kMsg);
        barrier(ch, 2);  // the child finished every operation
        EXPECT_EQ(first_bad(target.as<uint8_t>(), kBig, 1), -1) << "WRITE";
        EXPECT_EQ(first_bad(source.as<uint8_t>(), kBig, 2), -1) << "READ source changed";
        EXPECT_EQ(first_bad(rbuf.as<uint8_t>(), kMsg, 3), -1) << "SEND";
        EXPECT_EQ(*counter.as<uint64_t>(), kCounter0 + 5) << "fetch_add";
        EXPECT_EQ(gvtest::first_not(priv.data(), priv.size(), 0xAB), -1) << "private memory was written";
        // The responder refused the WRITE (remote access error, NAK): it goes to ERROR as well
        // (IBA vol. 1 9.9.3; the software executor's responder_refused).
        EXPECT_EQ(s.qp.state(), QpState::Error) << "the responder of a refused request";
        EXPECT_EQ(s.qp.error_syndrome(), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
        barrier(ch, 3);
    }
    expect_exit_ok(wait_child(child));
    EXPECT_LT(ms_since(t0), 10000);
}

// The child is killed (SIGKILL) while it streams WRITEs into the parent. The library notices
// the peer process is gone and moves the parent's QP to ERROR on its own: every receive it had
// posted and a send stuck waiting for the dead peer's receive complete with flush errors.
TEST(CrossProcess, PeerKilledMidStreamFlushesTheSurvivor) {
    Listener lis = Channel::listen(0);
    const uint16_t port = lis.port();
    constexpr int kSends = 8, kRecvs = 64;
    pid_t child = spawn([port] {
        Channel ch = Channel::connect("127.0.0.1", port, kMs);
        Side s;
        std::vector<uint8_t> msg(kMsg), out(kBig);
        fill(msg.data(), kMsg, 5);
        fill(out.data(), kBig, 6);
        MemoryRegion mm(s.pd, msg.data(), kMsg, kLocalWrite), mo(s.pd, out.data(), kBig, kLocalWrite);
        Exchanged got = ch.exchange(Backend::Soft, {s.qp.endpoint()}, {}, kMs);
        XCHECK(got.buffers.size() == 1, "exchange");
        s.qp.connect(got.qps[0]);
        barrier(ch, 1);
        auto h = s.h();
        Completion c[kSends];
        for (int i = 0; i < kSends; ++i) XCHECK(dev::send(h, msg.data(), kMsg, mm.lkey()) == Status::Ok, "send");
        XCHECK(dev::commit(h) == Status::Ok, "commit");
        XCHECK(dev::wait_send(h, kSends, c, 5 * kNs) == Status::Ok, "send completions");
        ch.send_message(std::vector<uint8_t>{7}, kMs);
        const RemoteBuffer& stream = got.buffers[0];
        for (;;) {  // until killed (the alarm ends it otherwise)
            XCHECK(dev::write(h, out.data(), kBig, mo.lkey(), stream.addr, stream.rkey) == Status::Ok, "write");
            XCHECK(dev::commit(h) == Status::Ok, "commit");
            XCHECK(dev::wait_send(h, 1, c, 5 * kNs) == Status::Ok, "write completion");
        }
        return 0;
    });
    ASSERT_GT(child, 0);
    Channel ch = lis.accept(kMs);
    Side s;
    SharedBuffer rbuf(s.ctx, kMsg * kRecvs), stream(s.ctx, kBig), sbuf(s.ctx, 64);
    MemoryRegion mr(s.pd, rbuf.data(), rbuf.size(), kLocalWrite), ms(s.pd, stream.data(), kBig, kAllAccess),
        mb(s.pd, sbuf.data(), 64, kLocalWrite);
    auto h = s.h();
    for (int i = 0; i < kRecvs; ++i)
        ASSERT_EQ(dev::recv(h, rbuf.as<uint8_t>() + i * kMsg, kMsg, mr.lkey()), Status::Ok);
    Exchanged got = ch.exchange(Backend::Soft, {s.qp.endpoint()}, {ms.remote()}, kMs);
    s.qp.connect(got.qps.at(0));
    barrier(ch, 1);
    std::vector<Completion> rc = s.rcq.wait(kSends, 5000);
    for (int i = 0; i < kSends; ++i) {
        EXPECT_EQ(rc[i].byte_len, kMsg);
        EXPECT_EQ(first_bad(rbuf.as<uint8_t>() + i * kMsg, kMsg, 5), -1) << "receive " << i;
    }
    ASSERT_EQ(ch.recv_message(kMs), std::vector<uint8_t>{7});
    // Let it stream a while, then kill it mid-transfer.
    const volatile uint8_t* sp = stream.as<uint8_t>();
    auto t_stream = Clock::now();
    while (sp[kBig - 1] != pattern(kBig - 1, 6) && ms_since(t_stream) < 5000) std::this_thread::yield();
    EXPECT_EQ(sp[kBig - 1], pattern(kBig - 1, 6)) << "the child's WRITEs never arrived";
    // A send the peer can never take: it posts no receives, so the send waits under the RNR
    // rules (rnr_retry 7: forever) while the peer lives.
    ASSERT_EQ(dev::send(h, sbuf.data(), 64, mb.lkey()), Status::Ok);
    ASSERT_EQ(dev::commit(h), Status::Ok);
    EXPECT_TRUE(s.scq.poll().empty());
    ASSERT_EQ(kill(child, SIGKILL), 0);
    const auto t0 = Clock::now();
    // The library watches the peer process: without any call from the application, the QP
    // goes to ERROR once the peer is gone (before it is even reaped) ...
    while (s.qp.state() != QpState::Error && ms_since(t0) < 3000)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(s.qp.state(), QpState::Error);
    // ... and everything outstanding completes with a flush error: the waiting send and
    // every receive still posted.
    std::vector<Completion> sc = s.scq.wait(1, 2000, true);
    EXPECT_EQ(sc.at(0).status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
    std::vector<Completion> fl = s.rcq.wait(kRecvs - kSends, 2000, true);
    for (const Completion& c : fl) EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
    EXPECT_TRUE(s.rcq.poll().empty());
    EXPECT_LT(ms_since(t0), 3000);
    int st = wait_child(child);
    EXPECT_TRUE(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "status " << st;
    // The channel says the peer is gone too.
    EXPECT_THROW(ch.recv_message(1000), RemoteError);
}

// A SEND from another process into a receive posted over private memory: the responder
// (parent) completes it with LOCAL_PROT_ERR, the requester with REMOTE_OP_ERR, and the
// private bytes are untouched.
TEST(CrossProcess, SendIntoPrivateReceiveIsRefused) {
    Listener lis = Channel::listen(0);
    const uint16_t port = lis.port();
    pid_t child = spawn([port] {
        Channel ch = Channel::connect("127.0.0.1", port, kMs);
        Side s;
        std::vector<uint8_t> msg(64, 0x11);
        MemoryRegion mm(s.pd, msg.data(), msg.size(), kLocalWrite);
        Exchanged got = ch.exchange(Backend::Soft, {s.qp.endpoint()}, {}, kMs);
        s.qp.connect(got.qps.at(0));
        barrier(ch, 1);
        auto h = s.h();
        Completion c[1];
        XCHECK(dev::send(h, msg.data(), 64, mm.lkey()) == Status::Ok, "post send");
        XCHECK(dev::commit(h) == Status::QpError, "commit");
        XCHECK(dev::wait_send(h, 1, c, 5 * kNs) == Status::CompletionError, "send must fail");
        XCHECK(c[0].status == MLX5_CQE_SYNDROME_REMOTE_OP_ERR,
               std::string("syndrome ") + mlx5::syndrome_name(c[0].status));
        barrier(ch, 2);
        return 0;
    });
    ASSERT_GT(child, 0);
    {
        Channel ch = lis.accept(kMs);
        Side s;
        std::vector<uint8_t> priv(4096, 0xCD);
        MemoryRegion mp(s.pd, priv.data(), priv.size(), kLocalWrite);
        ASSERT_EQ(dev::recv(s.h(), priv.data(), 4096, mp.lkey()), Status::Ok);
        Exchanged got = ch.exchange(Backend::Soft, {s.qp.endpoint()}, {}, kMs);
        s.qp.connect(got.qps.at(0));
        barrier(ch, 1);
        std::vector<Completion> rc = s.rcq.wait(1, 5000, true);
        EXPECT_EQ(rc.at(0).status, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR) << mlx5::syndrome_name(rc.at(0).status);
        barrier(ch, 2);
        EXPECT_EQ(gvtest::first_not(priv.data(), priv.size(), 0xCD), -1) << "private memory was written";
        EXPECT_EQ(s.qp.state(), QpState::Error);
    }
    expect_exit_ok(wait_child(child));
}

// Clear errors instead of crashes: a peer arena that cannot be opened (its process is gone),
// one whose address range is taken here, a peer on a GPU device, and mismatched devices.
TEST(CrossProcess, ConnectErrorsAreClear) {
    Side s;
    s.qp.to_init();
    // A process that exited: /proc/<pid>/fd/<fd> does not exist.
    pid_t gone = spawn([] { return 0; });
    expect_exit_ok(wait_child(gone));
    QpEndpoint e = s.qp.endpoint();
    gv::detail::soft::Locator l = locator(e);
    ASSERT_EQ(l.pid, uint32_t(getpid()));
    l.pid = uint32_t(gone);
    l.arena_base += 4ull << 40;  // not our own arena's range
    l.qp_context += 4ull << 40;
    e.extra = gv::detail::soft::encode(l);
    try {
        s.qp.connect(e);
        ADD_FAILURE() << "connected to a process that exited";
    } catch (const SystemError& x) {
        EXPECT_NE(std::string(x.what()).find("the peer exited"), std::string::npos) << x.what();
    }
    // A peer QP that cannot be reached from another process (a pid, no arena: e.g. host-memory
    // queues on a GPU device).
    QpEndpoint g = s.qp.endpoint();
    gv::detail::soft::Locator gl;
    gl.pid = uint32_t(gone);
    RtrAttr a;
    a.remote_qpn = g.qpn;
    a.remote_extra = gv::detail::soft::encode(gl);
    try {
        s.qp.to_rtr(a);
        ADD_FAILURE() << "connected to a peer without an arena";
    } catch (const NotSupported& x) {
        EXPECT_NE(std::string(x.what()).find("cannot be reached from another process"), std::string::npos)
            << x.what();
    }
    // Mismatched devices.
    QpEndpoint m = s.qp.endpoint();
    m.device = "soft-gpu0";
    EXPECT_THROW(s.qp.connect(m), InvalidUsage);
    EXPECT_EQ(s.qp.state(), QpState::Init);

    // A live peer whose arena range is already taken in this process.
    Listener lis = Channel::listen(0);
    const uint16_t port = lis.port();
    pid_t child = spawn([port] {
        Channel ch = Channel::connect("127.0.0.1", port, kMs);
        Side p;
        ch.send_record(QpRecord(p.qp.endpoint()), kMs);
        ch.recv_message(kMs);  // wait until the parent is done
        return 0;
    });
    ASSERT_GT(child, 0);
    {
        Channel ch = lis.accept(kMs);
        QpEndpoint peer = ch.recv_record<QpRecord>(kMs).endpoint;
        const gv::detail::soft::Locator pl = locator(peer);
        EXPECT_EQ(pl.pid, uint32_t(child));
        EXPECT_EQ(pl.arena_base % (1ull << 30), 0u);
        void* blocker = mmap(reinterpret_cast<void*>(pl.arena_base), 4096, PROT_READ,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        ASSERT_EQ(blocker, reinterpret_cast<void*>(pl.arena_base));
        try {
            s.qp.connect(peer);
            ADD_FAILURE() << "imported over a taken range";
        } catch (const SystemError& x) {
            EXPECT_NE(std::string(x.what()).find("already in use in this process"), std::string::npos) << x.what();
        }
        munmap(blocker, 4096);
        EXPECT_EQ(s.qp.state(), QpState::Init);
        ch.send_message(std::vector<uint8_t>{1}, kMs);
    }
    expect_exit_ok(wait_child(child));
}

// SharedBuffer is for CPU software devices; in-process use of its regions is unchanged.
TEST(CrossProcess, SharedBufferBasics) {
    Context ctx(ContextOptions{Backend::Soft, -1});
    SharedBuffer a(ctx, 1), b(ctx, 3 * 4096 + 1);
    EXPECT_EQ(a.size(), 1u);
    EXPECT_NE(a.data(), b.data());
    EXPECT_EQ(gvtest::first_not(b.as<uint8_t>(), b.size(), 0), -1) << "not zeroed";
    std::memset(b.data(), 0x5A, b.size());
    void* old = b.data();
    b = SharedBuffer(ctx, 4096);  // the old one is freed; its pages come back zeroed
    SharedBuffer c(ctx, 3 * 4096);  // first fit: the freed range, or an earlier free one
    (void)old;
    EXPECT_EQ(gvtest::first_not(c.as<uint8_t>(), c.size(), 0), -1) << "reused pages not zeroed";
    EXPECT_THROW(SharedBuffer(ctx, 0), InvalidUsage);
    void* cp = c.data();
    SharedBuffer moved(std::move(c));
    EXPECT_EQ(moved.data(), cp);
    EXPECT_EQ(c.data(), nullptr);
}

// ContextOptions::shared_arena_bytes sizes the device's arena: a full arena is a clear error,
// and a later Context cannot ask for more than the device (shared by the process) has.
TEST(CrossProcess, ArenaSizeFromContextOptions) {
    ContextOptions o{Backend::Soft, -1};
    o.shared_arena_bytes = 8u << 20;
    Context ctx(o);
    SharedBuffer a(ctx, 4u << 20);
    try {
        SharedBuffer b(ctx, 8u << 20);
        ADD_FAILURE() << "an 8 MiB buffer fit in what is left of an 8 MiB arena";
    } catch (const SystemError& e) {
        EXPECT_NE(std::string(e.what()).find("is full"), std::string::npos) << e.what();
    }
    ContextOptions big = o;
    big.shared_arena_bytes = 16u << 20;
    try {
        Context c2(big);
        ADD_FAILURE() << "a second Context asked for a larger arena than the device has";
    } catch (const InvalidUsage& e) {
        EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
    }
    ContextOptions dflt{Backend::Soft, -1};
    Context c3(dflt);  // 0: whatever the device has
    SharedBuffer c(c3, 1u << 20);
    EXPECT_NE(c.data(), nullptr);
}
