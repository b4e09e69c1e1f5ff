// Out-of-band TCP channel, its peers: peer_closed() on live, closed, reset and killed peers;
// peers that send garbage or are not gpuverbs; servers that survive bad clients
// (accept_client); peers that disagree (backend, QP count, record version, records against
// their hello). The channel itself: oob_channel_test.cpp.
#include "oob_util.hpp"

using namespace gv;
using namespace gv::oob;
using gvtest::Clock;
using gvtest::ms_since;
using gvtest::spawn;

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
