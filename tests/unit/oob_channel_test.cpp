// Out-of-band TCP channel: exchange between threads and processes, connecting, timeouts,
// peers that close or die mid-exchange, local mistakes, and real QPs connected through it.
// Peers seen closed, peers that are not gpuverbs or disagree, and servers that survive bad
// clients: oob_channel_peers_test.cpp.
#include "oob_util.hpp"

using namespace gv;
using namespace gv::oob;
using gvtest::Clock;
using gvtest::ms_since;
using gvtest::spawn;

// =============================================================================================
// TCP channel
// =============================================================================================

TEST(OobChannel, ListenOnEphemeralPortAndExchangeMessages) {
    Loop l;
    EXPECT_NE(l.listener.port(), 0);
    EXPECT_EQ(l.client.peer(), "127.0.0.1:" + std::to_string(l.listener.port()));
    EXPECT_EQ(l.server.peer().rfind("127.0.0.1:", 0), 0u) << l.server.peer();
    std::vector<uint8_t> big(200000);
    gvtest::fill_random(big.data(), big.size(), 7);
    Background t([&] { l.client.send_message(big, 5000); });
    EXPECT_EQ(l.server.recv_message(5000), big);
    EXPECT_EQ(t.join(), "");
    l.server.send_record(QpRecord(make_qps(1, 1, Backend::Soft)[0]), 1000);
    EXPECT_TRUE(same(l.client.recv_record<QpRecord>(1000).endpoint, make_qps(1, 1, Backend::Soft)[0]));
}

TEST(OobChannel, ExchangeBetweenTwoThreads) {
    Listener listener = Channel::listen(0);
    const auto qa = make_qps(1, 64, Backend::Soft), qb = make_qps(2, 64, Backend::Soft);
    const auto ba = make_buffers(3, 4), bb = make_buffers(4, 4);
    Exchanged got_by_client;
    Background t([&] {
        Channel c = Channel::connect("127.0.0.1", listener.port(), 5000);
        got_by_client = c.exchange(Backend::Soft, qb, bb, 5000);
        c.send_message(std::vector<uint8_t>{'o', 'k'}, 1000);  // the channel stays usable
    });
    Channel s = listener.accept(5000);
    Exchanged got = s.exchange(Backend::Soft, qa, ba, 5000);
    EXPECT_EQ(s.recv_message(2000), (std::vector<uint8_t>{'o', 'k'}));
    ASSERT_EQ(t.join(), "");
    EXPECT_EQ(got.backend, Backend::Soft);
    EXPECT_TRUE(same(got.qps, qb));
    EXPECT_TRUE(same(got.buffers, bb));
    EXPECT_TRUE(same(got_by_client.qps, qa));
    EXPECT_TRUE(same(got_by_client.buffers, ba));
}

TEST(OobChannel, ExchangeWithDifferentMemoryCountsAndNoRecords) {
    Loop l;
    Exchanged a, b;
    Background t([&] { b = l.client.exchange(Backend::Verbs, {}, make_buffers(5, 3), 5000); });
    a = l.server.exchange(Backend::Verbs, {}, {}, 5000);
    ASSERT_EQ(t.join(), "");
    EXPECT_TRUE(a.qps.empty());
    EXPECT_TRUE(same(a.buffers, make_buffers(5, 3)));
    EXPECT_TRUE(b.buffers.empty());
    EXPECT_EQ(b.backend, Backend::Verbs);
}

// Many records both ways: both sides send before they receive, so this deadlocks unless
// sending and receiving interleave.
TEST(OobChannel, LargeExchangeDoesNotDeadlock) {
    Loop l;
    // Small fixed socket buffers (no autotuning): ~1.7 MB each way cannot sit in them.
    for (int fd : {l.client.fd(), l.server.fd()}) {
        int size = 64 * 1024;
        ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size), 0);
        ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size), 0);
    }
    const size_t n = 20000;
    const auto qa = make_qps(11, n, Backend::Mlx5), qb = make_qps(12, n, Backend::Mlx5);
    Exchanged a, b;
    auto t0 = Clock::now();
    Background t([&] { b = l.client.exchange(Backend::Mlx5, qb, {}, 5000); });
    a = l.server.exchange(Backend::Mlx5, qa, {}, 5000);
    ASSERT_EQ(t.join(), "");
    EXPECT_TRUE(same(a.qps, qb));
    EXPECT_TRUE(same(b.qps, qa));
    EXPECT_LT(ms_since(t0), 5000);
}

TEST(OobChannel, ExchangeBetweenTwoProcesses) {
    Listener listener = Channel::listen(0);
    const uint16_t port = listener.port();
    const auto qa = make_qps(21, 64, Backend::Soft), qb = make_qps(22, 64, Backend::Soft);
    const auto ba = make_buffers(23, 4), bb = make_buffers(24, 4);
    pid_t pid = spawn([&] {
        Channel c = Channel::connect("127.0.0.1", port, 5000);
        Exchanged got = c.exchange(Backend::Soft, qb, bb, 5000);
        if (!same(got.qps, qa)) return 2;
        if (!same(got.buffers, ba)) return 3;
        return 0;
    });
    ASSERT_GT(pid, 0);
    Channel s = listener.accept(5000);
    Exchanged got = s.exchange(Backend::Soft, qa, ba, 5000);
    EXPECT_TRUE(same(got.qps, qb));
    EXPECT_TRUE(same(got.buffers, bb));
    expect_exit_ok(wait_child(pid), "client process");
}

TEST(OobChannel, ConnectToClosedPortFailsWithinTheTimeout) {
    uint16_t port = closed_port();
    auto t0 = Clock::now();
    try {
        Channel::connect("127.0.0.1", port, 300);
        FAIL() << "connected to a closed port";
    } catch (const TimeoutError& e) {
        std::string m = e.what();
        EXPECT_MSG(m, "could not connect to 127.0.0.1:" + std::to_string(port) + " within 300 ms");
        EXPECT_MSG(m, "Connection refused");
    }
    long ms = ms_since(t0);
    EXPECT_GE(ms, 290);   // it retried until the timeout ...
    EXPECT_LT(ms, 1500);  // ... and not much longer
}

TEST(OobChannel, ConnectRetriesUntilTheServerStarts) {
    uint16_t port = closed_port();
    Channel c;
    Background t([&] { c = Channel::connect("127.0.0.1", port, 5000); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    Listener l = Channel::listen(port);
    Channel s = l.accept(5000);
    ASSERT_EQ(t.join(), "");
    s.send_message(std::vector<uint8_t>{1, 2, 3}, 1000);
    EXPECT_EQ(c.recv_message(1000), (std::vector<uint8_t>{1, 2, 3}));
}

TEST(OobChannel, UnresolvableHostIsAnErrorNotAHang) {
    auto t0 = Clock::now();
    EXPECT_THROW(Channel::connect("no-such-host.invalid", 1, 500), Error);
    EXPECT_LT(ms_since(t0), 3000);
}

TEST(OobChannel, PortInUse) {
    Listener a = Channel::listen(0);
    try {
        Channel::listen(a.port());
        FAIL() << "listened twice on one port";
    } catch (const SystemError& e) {
        EXPECT_MSG(std::string(e.what()),
                   "port " + std::to_string(a.port()) + " already in use on 127.0.0.1");
        EXPECT_EQ(e.error_code(), EADDRINUSE);
    }
    a.close();
    EXPECT_NO_THROW(Channel::listen(a.port()));  // free again once closed (RAII closes it too)
}

TEST(OobChannel, AcceptAndReceiveTimeOut) {
    Listener l = Channel::listen(0);
    auto t0 = Clock::now();
    EXPECT_THROW(l.accept(200), TimeoutError);
    EXPECT_LT(ms_since(t0), 1500);
    EXPECT_GE(ms_since(t0), 190);

    Loop p;
    t0 = Clock::now();
    try {
        p.server.recv_message(200);
        FAIL();
    } catch (const TimeoutError& e) {
        EXPECT_MSG(std::string(e.what()), "timed out after 200 ms waiting for a message from 127.0.0.1:");
    }
    EXPECT_LT(ms_since(t0), 1500);
    // A receive that timed out part-way resumes the same message.
    std::vector<uint8_t> msg = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    std::vector<uint8_t> f = framed(msg);
    raw_send(p.client.fd(), std::vector<uint8_t>(f.begin(), f.begin() + 7));
    try {
        p.server.recv_message(100);
        FAIL();
    } catch (const TimeoutError& e) {
        EXPECT_MSG(std::string(e.what()), "received 7 of 14 bytes");
    }
    raw_send(p.client.fd(), std::vector<uint8_t>(f.begin() + 7, f.end()));
    EXPECT_EQ(p.server.recv_message(1000), msg);
}

TEST(OobChannel, ExchangeTimesOutWhenThePeerIsSilent) {
    Loop l;
    auto t0 = Clock::now();
    try {
        l.server.exchange(Backend::Soft, make_qps(1, 4, Backend::Soft), {}, 300);
        FAIL();
    } catch (const TimeoutError& e) {
        EXPECT_MSG(std::string(e.what()), "timed out after 300 ms");
        EXPECT_MSG(std::string(e.what()), "received no hello yet");
    }
    EXPECT_LT(ms_since(t0), 1500);
    EXPECT_THROW(l.server.recv_message(10), InvalidUsage);  // broken after a failed exchange
}

TEST(OobChannel, PeerClosesMidMessage) {
    Loop l;
    std::vector<uint8_t> b;
    put32(b, 100);
    b.resize(14, 0xAB);
    raw_send(l.client.fd(), b);
    l.client.close();
    auto t0 = Clock::now();
    try {
        l.server.recv_message(5000);
        FAIL();
    } catch (const RemoteError& e) {
        EXPECT_MSG(std::string(e.what()), "closed the connection after 14 of 104 bytes of a message");
    }
    EXPECT_LT(ms_since(t0), 1000);
    try {
        l.server.recv_message(100);
        FAIL();
    } catch (const InvalidUsage& e) {
        EXPECT_MSG(std::string(e.what()), "is broken by an earlier error");
    }
}

TEST(OobChannel, PeerClosesBeforeTheExchange) {
    Loop l;
    l.client.close();
    try {
        l.server.exchange(Backend::Soft, {}, make_buffers(1, 2), 5000);
        FAIL();
    } catch (const RemoteError& e) {
        std::string m = e.what();
        EXPECT_MSG(m, "exchange with 127.0.0.1:");
        EXPECT_TRUE(m.find("closed the connection") != std::string::npos ||
                    m.find("reset the connection") != std::string::npos)
            << m;
    }
}

TEST(OobChannel, PeerKilledMidExchange) {
    Listener listener = Channel::listen(0);
    const uint16_t port = listener.port();
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    // The child announces 64 QP and 4 memory records, sends 10 and half of the 11th, then
    // stops until it is killed.
    pid_t pid = spawn([&] {
        ::close(ready[0]);
        Channel c = Channel::connect("127.0.0.1", port, 5000);
        c.send_record(HelloRecord{Backend::Soft, 64, 4}, 1000);
        auto qps = make_qps(31, 64, Backend::Soft);
        for (int i = 0; i < 10; ++i) c.send_record(QpRecord(qps[i]), 1000);
        std::vector<uint8_t> f = framed(QpRecord(qps[10]).serialize());
        f.resize(f.size() / 2);
        if (::send(c.fd(), f.data(), f.size(), MSG_NOSIGNAL) != ssize_t(f.size())) return 5;
        if (::write(ready[1], "r", 1) != 1) return 6;
        for (;;) pause();
    });
    ASSERT_GT(pid, 0);
    ::close(ready[1]);
    Channel s = listener.accept(5000);
    Background killer([&] {
        pollfd p{ready[0], POLLIN, 0};
        ::poll(&p, 1, 5000);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let the exchange block
        kill(pid, SIGKILL);
    });
    auto t0 = Clock::now();
    try {
        s.exchange(Backend::Soft, make_qps(32, 64, Backend::Soft), make_buffers(33, 4), 10000);
        FAIL() << "exchange with a killed peer succeeded";
    } catch (const RemoteError& e) {
        std::string m = e.what();
        EXPECT_MSG(m, "received 10 of 68 records");
        EXPECT_TRUE(m.find("closed the connection") != std::string::npos ||
                    m.find("reset the connection") != std::string::npos)
            << m;
    }
    EXPECT_LT(ms_since(t0), 3000);
    killer.join();
    ::close(ready[0]);
    int st = wait_child(pid);
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "status " << st;
}

// Writing to a peer that is gone must give RemoteError, not kill the process with SIGPIPE.
// Runs in a child with SIGPIPE at its default action, so a missing MSG_NOSIGNAL shows as the
// child dying of SIGPIPE.
TEST(OobChannel, WritingToAClosedPeerRaisesNoSigpipe) {
    Listener listener = Channel::listen(0);
    const uint16_t port = listener.port();
    pid_t pid = spawn([&] {
        signal(SIGPIPE, SIG_DFL);
        Channel c = Channel::connect("127.0.0.1", port, 5000);
        std::vector<uint8_t> chunk(64 * 1024, 0x5A);
        c.send_message(chunk, 1000);  // before the server closes
        for (int i = 0; i < 1000; ++i) {
            try {
                c.send_message(chunk, 2000);
            } catch (const RemoteError& e) {
                return std::string(e.what()).find("closed the connection") != std::string::npos ? 0 : 7;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return 8;  // never noticed
    });
    ASSERT_GT(pid, 0);
    {
        Channel s = listener.accept(5000);
        s.recv_message(5000);
    }  // closed with unread data: the client gets RST, then EPIPE
    int st = wait_child(pid);
    EXPECT_FALSE(WIFSIGNALED(st) && WTERMSIG(st) == SIGPIPE) << "the client died of SIGPIPE";
    expect_exit_ok(st, "writer");
}

// A long connect says once what it waits for (through on_retry), not at every attempt.
TEST(OobChannel, ConnectTellsOnceThatItWaits) {
    const uint16_t port = closed_port();
    int told = 0;
    EXPECT_THROW(Channel::connect("127.0.0.1", port, 300, [&] { ++told; }), TimeoutError);
    EXPECT_EQ(told, 1);
    Listener l = Channel::listen(0);
    told = 0;
    Channel c = Channel::connect("127.0.0.1", l.port(), 1000, [&] { ++told; });
    EXPECT_EQ(told, 0);  // the first attempt worked
}

TEST(OobChannel, LocalMistakesAreInvalidUsage) {
    Loop l;
    EXPECT_THROW(l.server.exchange(Backend::Auto, {}, {}, 100), InvalidUsage);
    EXPECT_THROW(l.server.exchange(Backend::Soft, make_qps(1, 1, Backend::Mlx5), {}, 100), InvalidUsage);
    EXPECT_THROW(l.server.exchange(Backend::Soft, {}, {RemoteBuffer{1, 0, 0, 0}}, 100), InvalidUsage);
    // None of that touched the stream: the channel still works.
    l.client.send_message(std::vector<uint8_t>{9}, 1000);
    EXPECT_EQ(l.server.recv_message(1000), std::vector<uint8_t>{9});
    Channel none;
    EXPECT_FALSE(none.is_open());
    EXPECT_THROW(none.recv_message(10), InvalidUsage);
}

// Step 2 for real: two soft-device QPs and their buffers meet only through the channel, then
// an RDMA WRITE lands where the exchanged record says.
TEST(OobChannel, ExchangedRecordsConnectRealQueuePairs) {
    gvtest::Pair p(Context(ContextOptions{Backend::Soft, -1}), {}, MemoryKind::Default, 256, false);
    const size_t n = 4096;
    std::vector<uint8_t> src(n), dst[2] = {std::vector<uint8_t>(n, 0), std::vector<uint8_t>(n, 0)};
    gvtest::fill_random(src.data(), n, 77);
    MemoryRegion ms(p.pd, src.data(), n, kLocalWrite);
    MemoryRegion md0(p.pd, dst[0].data(), n, kAllAccess), md1(p.pd, dst[1].data(), n, kAllAccess);
    const MemoryRegion* mine[2] = {&md0, &md1};
    Loop l;
    Exchanged got[2];
    auto side = [&](int i, Channel& ch) {
        got[i] = ch.exchange(Backend::Soft, {p.qp[i]->endpoint()}, {mine[i]->remote()}, 5000);
    };
    Background t([&] { side(1, l.client); });
    side(0, l.server);
    ASSERT_EQ(t.join(), "");
    for (int i = 0; i < 2; ++i) p.qp[i]->connect(got[i].qps.at(0));
    ASSERT_EQ(p.qp[0]->state(), QpState::Rts);
    ASSERT_EQ(p.qp[1]->state(), QpState::Rts);
    const RemoteBuffer& target = got[0].buffers.at(0);
    EXPECT_EQ(target.addr, uint64_t(dst[1].data()));
    auto h = p.h(0);
    ASSERT_EQ(dev::write(h, src.data(), n, ms.lkey(), target.addr, target.rkey), Status::Ok);
    ASSERT_EQ(dev::commit(h), Status::Ok);
    Completion c[1];
    ASSERT_EQ(dev::wait_send(h, 1, c, 5'000'000'000ull), Status::Ok);
    EXPECT_EQ(gvtest::first_diff(src.data(), dst[1].data(), n), -1);
}
