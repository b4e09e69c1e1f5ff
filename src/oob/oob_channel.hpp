// The TCP channel's internals, shared by the socket plumbing (oob_socket.cpp), the listener
// and channel (oob.cpp) and the record exchange (oob_exchange.cpp): deadlines, socket
// helpers, the greeting, the frame reader, and Channel::Impl / Listener::Impl.
#pragma once

#include <netdb.h>
#include <sys/socket.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gpuverbs/oob.hpp"

namespace gv::oob::sock {

using Clock = std::chrono::steady_clock;

class Deadline {
public:
    explicit Deadline(int timeout_ms)
        : infinite_(timeout_ms < 0),
          timeout_ms_(timeout_ms),
          end_(Clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms)) {}
    /// Milliseconds left for poll(): -1 without limit, 0 when expired, else rounded up.
    int remaining_ms() const {
        if (infinite_) return -1;
        auto left = std::chrono::duration_cast<std::chrono::microseconds>(end_ - Clock::now()).count();
        return left <= 0 ? 0 : int((left + 999) / 1000);
    }
    bool expired() const { return !infinite_ && Clock::now() >= end_; }
    int timeout_ms() const { return timeout_ms_; }

private:
    bool infinite_;
    int timeout_ms_;
    Clock::time_point end_;
};

std::string host_port(const std::string& host, uint16_t port);

std::string sockaddr_name(const sockaddr* sa, socklen_t len);

void close_fd(int& fd);

void set_nodelay(int fd);

/// Waits for `events` on fd until the deadline. Returns revents, 0 on timeout.
short wait_fd(int fd, short events, const Deadline& dl);

struct AddrInfo {
    addrinfo* list = nullptr;
    ~AddrInfo() {
        if (list) freeaddrinfo(list);
    }
};

/// Our greeting: "GVCH", the channel protocol version, two zero bytes.
std::array<uint8_t, kGreetingBytes> greeting();

// Receives one length-prefixed frame, possibly over several calls; never reads past it.
// Before the first frame, the peer's greeting (kept across frames).
struct FrameReader {
    uint8_t greet[kGreetingBytes]{};
    size_t greet_have = 0;
    bool greeted = false;
    uint8_t hdr[4]{};
    size_t hdr_have = 0;
    bool have_len = false;
    uint32_t len = 0;
    std::vector<uint8_t> body;
    size_t body_have = 0;

    size_t got() const { return hdr_have + body_have; }
    size_t want() const { return have_len ? 4 + size_t(len) : 4; }
    std::string progress() const {
        if (!greeted)
            return std::to_string(greet_have) + " of " + std::to_string(kGreetingBytes) +
                   " bytes of its gpuverbs greeting";
        return std::to_string(got()) + " of " + std::to_string(want()) + " bytes of a message";
    }
    void reset() {
        hdr_have = 0;
        have_len = false;
        len = 0;
        body.clear();
        body_have = 0;
    }
    std::vector<uint8_t> take() {
        std::vector<uint8_t> b = std::move(body);
        reset();
        return b;
    }

    /// Reads the peer's greeting. True once it is in and right, false when it would block.
    /// The magic is checked byte by byte as it comes, so a peer that sends something else
    /// fails at once, with what it sent.
    bool pump_greeting(int fd, const std::string& peer);

    /// Reads what the socket has. True when the frame is complete, false when it would block.
    bool pump(int fd, const std::string& peer, uint32_t max_message);
};

/// Sends from buf[sent..n) what the socket takes. True when all is sent, false when it would
/// block.
bool send_some(int fd, const uint8_t* buf, size_t n, size_t& sent, const std::string& peer,
               const char* what);

void append_frame(std::vector<uint8_t>& out, const uint8_t* msg, size_t size);
void append_frame(std::vector<uint8_t>& out, const std::vector<uint8_t>& msg);

bool retryable_connect_error(int e);

}  // namespace gv::oob::sock

namespace gv::oob {

struct Channel::Impl {
    int fd = -1;
    std::string peer;
    uint32_t max_message = kDefaultMaxMessage;
    bool broken = false;
    std::string broken_why;
    sock::FrameReader reader;
    std::vector<uint8_t> unsent;  // the part of our greeting the socket did not take yet

    ~Impl() { close(); }
    /// Sends our greeting on a new connection, as far as the socket takes it now (all of it on
    /// a fresh socket); what is left goes before our next message. A peer already gone is
    /// not an error here: the first receive reports it.
    void greet() {
        const auto g = sock::greeting();
        unsent.assign(g.begin(), g.end());
        size_t sent = 0;
        try {
            sock::send_some(fd, unsent.data(), unsent.size(), sent, peer, "the greeting");
        } catch (const Error&) {
            sent = unsent.size();
        }
        unsent.erase(unsent.begin(), unsent.begin() + long(sent));
    }
    /// Closes the socket. Reads the peer's greeting first when nothing did yet (without
    /// waiting): closing a socket with unread data sends a reset instead of an orderly close,
    /// and the peer would see "reset" where we simply closed.
    void close() {
        if (fd >= 0 && !reader.greeted && reader.greet_have < kGreetingBytes)
            (void)::recv(fd, reader.greet + reader.greet_have, kGreetingBytes - reader.greet_have, MSG_DONTWAIT);
        sock::close_fd(fd);
    }
    void check_usable() const {
        GV_REQUIRE(fd >= 0, "channel is not connected");
        GV_REQUIRE(!broken, "channel to " + peer + " is broken by an earlier error: " + broken_why);
    }
    void mark_broken(const char* why) {
        broken = true;
        broken_why = why;
    }
};

struct Listener::Impl {
    int fd = -1;
    std::string address;
    uint16_t port = 0;
    ~Impl() { sock::close_fd(fd); }
};

}  // namespace gv::oob
