// Out-of-band TCP channel: threads, processes, failures, network namespaces.
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

namespace {
/// Polls ch.peer_closed() until it says true or timeout_ms passed; the time it took, or -1.
long ms_until_peer_closed(const Channel& ch, int timeout_ms = 5000) {
    auto t0 = Clock::now();
    while (!ch.peer_closed()) {
        if (ms_since(t0) > timeout_ms) return -1;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return ms_since(t0);
}
}  // namespace

// peer_closed(): false while the peer is connected, with or without data waiting for us, and
// it consumes nothing.
TEST(OobChannel, PeerClosedIsFalseWhileThePeerIsConnected) {
    Loop l;
    EXPECT_FALSE(l.server.peer_closed());
    EXPECT_FALSE(l.client.peer_closed());
    l.client.send_message(std::vector<uint8_t>{1, 2, 3}, 1000);
    l.client.send_message(std::vector<uint8_t>{4}, 1000);
    // The data is there (the peer's FIN would be too, after it: it is not).
    pollfd p{l.server.fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 2000), 1);
    for (int i = 0; i < 3; ++i) EXPECT_FALSE(l.server.peer_closed());
    EXPECT_EQ(l.server.recv_message(1000), (std::vector<uint8_t>{1, 2, 3}));
    EXPECT_FALSE(l.server.peer_closed());
    EXPECT_EQ(l.server.recv_message(1000), std::vector<uint8_t>{4});
    EXPECT_FALSE(l.server.peer_closed());
    EXPECT_FALSE(l.client.peer_closed());  // sending made no difference to our own side
}

// The peer closes after a last message: peer_closed() says so at once, and the message is
// still received (nothing was consumed), then the end of the stream.
TEST(OobChannel, PeerClosedAfterTheLastMessage) {
    Loop l;
    l.client.send_message(std::vector<uint8_t>{'F', 'x'}, 1000);
    l.client.close();
    EXPECT_GE(ms_until_peer_closed(l.server), 0) << "peer_closed() never said true";
    EXPECT_TRUE(l.server.peer_closed());  // and it stays so
    EXPECT_EQ(l.server.recv_message(1000), (std::vector<uint8_t>{'F', 'x'}));
    EXPECT_TRUE(l.server.peer_closed());
    try {
        l.server.recv_message(1000);
        FAIL() << "a message after the peer closed";
    } catch (const RemoteError& e) {
        EXPECT_MSG(std::string(e.what()), "closed the connection");
    }
}

// A peer that closes with data it never read resets the connection (RST): peer_closed() says
// true there too (POLLHUP / POLLERR), and does not take the pending error from the socket.
TEST(OobChannel, PeerClosedAfterAReset) {
    Loop l;
    l.server.send_message(std::vector<uint8_t>(1000, 7), 1000);
    pollfd p{l.client.fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 2000), 1);
    l.client.close();  // unread data: RST instead of FIN
    EXPECT_GE(ms_until_peer_closed(l.server), 0) << "peer_closed() never said true";
    EXPECT_TRUE(l.server.peer_closed());
    try {
        l.server.recv_message(1000);
        FAIL() << "a message from a peer that reset the connection";
    } catch (const RemoteError& e) {
        std::string m = e.what();
        EXPECT_TRUE(m.find("reset the connection") != std::string::npos ||
                    m.find("closed the connection") != std::string::npos)
            << m;
    }
}

// A peer process killed (SIGKILL: the kernel closes its socket) is seen within milliseconds,
// while its last message stays receivable.
TEST(OobChannel, PeerClosedWhenThePeerProcessIsKilled) {
    Listener listener = Channel::listen(0);
    const uint16_t port = listener.port();
    pid_t pid = spawn([&]() -> int {
        Channel c = Channel::connect("127.0.0.1", port, 5000);
        c.send_message(std::vector<uint8_t>{'R'}, 1000);
        for (;;) pause();
    });
    ASSERT_GT(pid, 0);
    Channel s = listener.accept(5000);
    pollfd p{s.fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 5000), 1);
    for (int i = 0; i < 50; ++i) {  // alive with data pending: 50 ms of "no"
        ASSERT_FALSE(s.peer_closed());
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    kill(pid, SIGKILL);
    const long took = ms_until_peer_closed(s);
    EXPECT_GE(took, 0) << "peer_closed() never said true after the peer was killed";
    EXPECT_LT(took, 2000);
    EXPECT_EQ(s.recv_message(1000), std::vector<uint8_t>{'R'});
    int st = wait_child(pid);
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "status " << st;
}

TEST(OobChannel, PeerClosedOnAChannelThatIsNotOpenIsInvalidUsage) {
    Channel none;
    EXPECT_THROW(none.peer_closed(), InvalidUsage);
    Loop l;
    l.server.close();
    EXPECT_THROW(l.server.peer_closed(), InvalidUsage);
    EXPECT_GE(ms_until_peer_closed(l.client), 0);  // the other side sees our close
}

TEST(OobChannel, GarbageFromARawSocketIsARemoteError) {
    {  // HTTP instead of gpuverbs: the length prefix reads as ~542 MB
        Loop l;
        raw_send(l.client.fd(), std::vector<uint8_t>{'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P', '/',
                                                     '1', '.', '1', '\r', '\n', '\r', '\n'});
        std::string m = remote_error([&] { l.server.exchange(Backend::Soft, {}, {}, 2000); });
        EXPECT_MSG(m, "sent a frame of 542393671 bytes, more than the maximum message of 1048576 bytes");
    }
    {  // a zero-length frame
        Loop l;
        raw_send(l.client.fd(), std::vector<uint8_t>{0, 0, 0, 0});
        EXPECT_MSG(remote_error([&] { l.server.recv_message(2000); }), "sent an empty frame");
    }
    {  // a well-framed message that is not a record; the channel stays usable afterwards
        Loop l;
        std::vector<uint8_t> junk(40);
        gvtest::fill_random(junk.data(), junk.size(), 99);
        raw_send(l.client.fd(), framed(junk));
        EXPECT_MSG(remote_error([&] { l.server.recv_record<MemoryRecord>(2000); }),
                   "sent a bad record: memory record: not a gpuverbs record: magic");
        l.client.send_record(MemoryRecord(RemoteBuffer{64, 64, 1, 0}), 1000);
        EXPECT_EQ(l.server.recv_record<MemoryRecord>(1000).buffer.addr, 64u);
    }
    {  // random garbage into an exchange: always a RemoteError, never a hang
        std::mt19937_64 r(5);
        for (int i = 0; i < 20; ++i) {
            Loop l;
            std::vector<uint8_t> g(1 + r() % 200);
            for (auto& c : g) c = uint8_t(r());
            if (i % 2) g[2] = g[3] = 0;  // plausible small lengths too
            raw_send(l.client.fd(), g);
            l.client.close();
            auto t0 = Clock::now();
            std::string m = remote_error([&] { l.server.exchange(Backend::Soft, {}, {}, 3000); });
            EXPECT_EQ(m.find("<"), std::string::npos) << m;
            EXPECT_LT(ms_since(t0), 1000);
        }
    }
    {  // a receiver with a small maximum rejects a larger frame
        Loop l;
        l.server.set_max_message(16);
        l.client.send_message(std::vector<uint8_t>(17, 1), 1000);
        EXPECT_MSG(remote_error([&] { l.server.recv_message(1000); }),
                   "sent a frame of 17 bytes, more than the maximum message of 16 bytes");
        EXPECT_THROW(l.client.send_message(std::vector<uint8_t>(kDefaultMaxMessage + 1), 1000), InvalidUsage);
        EXPECT_THROW(l.client.send_message(std::vector<uint8_t>(), 1000), InvalidUsage);
    }
}

// A client that reaches something that is not a gpuverbs server is told so at its first
// receive, with what the server sent; whatever follows the greeting is never misread as a
// frame ("a frame of 1329865020 bytes" was "<!DO").
TEST(OobChannel, APeerThatIsNotGpuverbsIsToldApart) {
    {  // an HTTP server (Python's http.server answers a request it cannot parse like this)
        RawServer http("<!DOCTYPE HTML>\n<html lang=\"en\">\n<head>\n");
        const std::string at = "the peer at 127.0.0.1:" + std::to_string(http.port());
        Channel c = Channel::connect("127.0.0.1", http.port(), 5000);
        std::string m = remote_error([&] { c.send_message(std::vector<uint8_t>{'P'}, 1000), c.recv_message(5000); });
        EXPECT_MSG(m, at + " does not speak the gpuverbs exchange protocol: it sent \"<!DOCTYPE HTML>\\n<html");
        EXPECT_EQ(m.find("frame"), std::string::npos) << m;
    }
    {  // a server that accepts and closes without a word
        RawServer mute("");
        const std::string at = "the peer at 127.0.0.1:" + std::to_string(mute.port());
        Channel c = Channel::connect("127.0.0.1", mute.port(), 5000);
        EXPECT_MSG(remote_error([&] { c.recv_message(5000); }),
                   at + " does not speak the gpuverbs exchange protocol: it closed the connection without "
                        "sending the gpuverbs greeting");
    }
    {  // the same seen by exchange()
        RawServer http("HTTP/1.0 400 Bad Request\r\n\r\n");
        Channel c = Channel::connect("127.0.0.1", http.port(), 5000);
        EXPECT_MSG(remote_error([&] { c.exchange(Backend::Soft, {}, {}, 5000); }),
                   "does not speak the gpuverbs exchange protocol: it sent \"HTTP/1.0 400 Bad Request\\r\\n");
    }
    {  // a client that sends garbage to a gpuverbs server, and one of another channel version
        Listener l = Channel::listen(0);
        int fd = raw_connect(l.port());
        ASSERT_GE(fd, 0);
        raw_send(fd, std::vector<uint8_t>{'G', 'E', 'T', ' ', '/', '\r', '\n'});
        Channel s = l.accept(5000);
        EXPECT_MSG(remote_error([&] { s.recv_message(5000); }),
                   "does not speak the gpuverbs exchange protocol: it sent \"GET /\\r\\n\"");
        ::close(fd);
        fd = raw_connect(l.port());
        ASSERT_GE(fd, 0);
        raw_send(fd, std::vector<uint8_t>{'G', 'V', 'C', 'H', 9, 0, 0, 0});
        Channel t = l.accept(5000);
        EXPECT_MSG(remote_error([&] { t.recv_message(5000); }),
                   "speaks version 9 of the gpuverbs channel protocol, this build version 1");
        ::close(fd);
    }
}

// A server waiting for its client survives bad ones: connect-and-close, garbage, a silent
// client (rejected after handshake_ms), one the handshake refuses; each is reported with its
// reason, and the next good client is served.
TEST(OobChannel, AcceptClientSurvivesBadClients) {
    Listener l = Channel::listen(0);
    const uint16_t port = l.port();
    std::vector<std::string> rejected;
    auto handshake = [](Channel& ch, int budget_ms) {
        std::vector<uint8_t> m = ch.recv_message(budget_ms);
        if (m != std::vector<uint8_t>{'o', 'k'}) throw RemoteError("wrong hello");
        ch.send_message(std::vector<uint8_t>{'y'}, budget_ms);
    };
    Background clients([&] {
        int fd = raw_connect(port);  // connects and closes
        ::close(fd);
        fd = raw_connect(port);  // garbage
        raw_send(fd, std::vector<uint8_t>(100, 0xEE));
        int idle = raw_connect(port);  // says nothing, stays
        Channel wrong = Channel::connect("127.0.0.1", port, 5000);
        wrong.send_message(std::vector<uint8_t>{'n', 'o'}, 1000);
        Channel good = Channel::connect("127.0.0.1", port, 5000);
        good.send_message(std::vector<uint8_t>{'o', 'k'}, 1000);
        if (good.recv_message(10000) != std::vector<uint8_t>{'y'}) throw std::runtime_error("no answer");
        ::close(fd);
        ::close(idle);
    });
    auto t0 = Clock::now();
    Channel ch = l.accept_client(20000, 500, handshake,
                                 [&](const std::string&, const std::string& why) { rejected.push_back(why); });
    EXPECT_EQ(clients.join(), "");
    EXPECT_TRUE(ch.is_open());
    ASSERT_EQ(rejected.size(), 4u);
    EXPECT_MSG(rejected[0], "the connection without sending the gpuverbs greeting");  // closed or reset
    EXPECT_MSG(rejected[1], "does not speak the gpuverbs exchange protocol: it sent \"\\xee\\xee");
    EXPECT_MSG(rejected[2], "timed out after 500 ms");
    EXPECT_MSG(rejected[3], "wrong hello");
    EXPECT_LT(ms_since(t0), 5000);
}

// The whole wait is bounded, however many clients come and go.
TEST(OobChannel, AcceptClientWaitIsBoundedInAll) {
    Listener l = Channel::listen(0);
    std::atomic<bool> stop{false};
    Background pest([&] {  // a silent client after another
        while (!stop) {
            int fd = raw_connect(l.port());
            std::this_thread::sleep_for(std::chrono::milliseconds(150));
            if (fd >= 0) ::close(fd);
        }
    });
    auto t0 = Clock::now();
    try {
        l.accept_client(600, 10000, [](Channel& ch, int budget) { ch.recv_message(budget); });
        ADD_FAILURE() << "a silent client passed";
    } catch (const TimeoutError& e) {
        EXPECT_MSG(std::string(e.what()), "no client passed the handshake on 127.0.0.1:");
        EXPECT_MSG(std::string(e.what()), "within 600 ms");
    }
    EXPECT_LT(ms_since(t0), 2000);
    stop = true;
    EXPECT_EQ(pest.join(), "");
    // Nobody at all (a fresh listener: the pest's last connection may wait in l's backlog):
    // accept's own timeout.
    Listener quiet = Channel::listen(0);
    try {
        quiet.accept_client(100, 100, [](Channel&, int) {});
        ADD_FAILURE() << "accepted nobody";
    } catch (const TimeoutError& e) {
        EXPECT_MSG(std::string(e.what()), "within 100 ms");
    }
    // A local failure in the handshake is not the client's: it ends the wait.
    Background c([&] { Channel x = Channel::connect("127.0.0.1", quiet.port(), 5000); x.recv_message(2000); });
    EXPECT_THROW(quiet.accept_client(5000, 1000, [](Channel&, int) { throw InvalidUsage("local"); }), InvalidUsage);
    c.join();
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

TEST(OobChannel, MismatchedBackendsFailOnBothSides) {
    Loop l;
    std::string client_msg;
    std::thread t(
        [&] { client_msg = remote_error([&] { l.client.exchange(Backend::Mlx5, {}, {}, 5000); }); });
    auto t0 = Clock::now();
    std::string server_msg = remote_error([&] { l.server.exchange(Backend::Soft, {}, {}, 5000); });
    t.join();
    EXPECT_MSG(server_msg, "peer uses backend mlx5, we use soft");
    EXPECT_MSG(client_msg, "peer uses backend soft, we use mlx5");
    EXPECT_LT(ms_since(t0), 2000);
}

TEST(OobChannel, MismatchedQpCountsFailOnBothSides) {
    Loop l;
    std::string client_msg;
    std::thread t([&] {
        client_msg =
            remote_error([&] { l.client.exchange(Backend::Soft, make_qps(1, 32, Backend::Soft), {}, 5000); });
    });
    std::string server_msg =
        remote_error([&] { l.server.exchange(Backend::Soft, make_qps(2, 64, Backend::Soft), {}, 5000); });
    t.join();
    EXPECT_MSG(server_msg, "peer offers 32 QP endpoints, we offer 64");
    EXPECT_MSG(client_msg, "peer offers 64 QP endpoints, we offer 32");
}

TEST(OobChannel, PeerWithAnotherRecordVersionFailsEarly) {
    Loop l;
    raw_send(l.client.fd(), framed(raw_hello(0, 0, 1, 0, 1)));
    std::string m = remote_error([&] { l.server.exchange(Backend::Soft, {}, {}, 5000); });
    EXPECT_MSG(m, "bad hello: hello record: record version 1, this build reads version 3");
}

TEST(OobChannel, PeerRecordsMustMatchItsHello) {
    Loop l;
    raw_send(l.client.fd(), framed(raw_hello(1, 0, 1)));
    raw_send(l.client.fd(), framed(QpRecord(make_qps(1, 1, Backend::Mlx5)[0]).serialize()));
    EXPECT_MSG(
        remote_error([&] { l.server.exchange(Backend::Soft, make_qps(2, 1, Backend::Soft), {}, 5000); }),
        "peer's QP record 0 is of backend mlx5, its hello said soft");
    Loop k;
    raw_send(k.client.fd(), framed(raw_hello(0, 1, 1)));
    raw_send(k.client.fd(), framed(raw_hello(0, 1, 1)));
    EXPECT_MSG(remote_error([&] { k.server.exchange(Backend::Soft, {}, {}, 5000); }),
               "bad memory record 0 of 1: memory record: wrong record: got a hello record");
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
