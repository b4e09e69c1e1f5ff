// Out-of-band TCP channel: listen, connect, framed messages, the record exchange (oob.hpp).
#include "gpuverbs/oob.hpp"
#include "oob/oob_wire.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace gv::oob {

using detail::hex;
using wire::backend_code;
using wire::get16;
using wire::get32;
using wire::get64;

// ---------------------------------------------------------------------------------------------
// Sockets
// ---------------------------------------------------------------------------------------------

namespace {

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

std::string host_port(const std::string& host, uint16_t port) {
    bool v6 = host.find(':') != std::string::npos;
    return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string sockaddr_name(const sockaddr* sa, socklen_t len) {
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo(sa, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return "?";
    return host_port(host, uint16_t(std::atoi(serv)));
}

void close_fd(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
}

void set_nodelay(int fd) {
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0)
        throw SystemError("setsockopt(TCP_NODELAY) failed", errno);
}

/// Waits for `events` on fd until the deadline. Returns revents, 0 on timeout.
short wait_fd(int fd, short events, const Deadline& dl) {
    for (;;) {
        pollfd p{fd, events, 0};
        int r = ::poll(&p, 1, dl.remaining_ms());
        if (r < 0) {
            if (errno == EINTR) continue;
            throw SystemError("poll failed", errno);
        }
        if (r == 0) return 0;
        if (p.revents & POLLNVAL) throw SystemError("poll on a closed socket", EBADF);
        return p.revents;
    }
}

struct AddrInfo {
    addrinfo* list = nullptr;
    ~AddrInfo() {
        if (list) freeaddrinfo(list);
    }
};

/// Our greeting: "GVCH", the channel protocol version, two zero bytes.
std::array<uint8_t, kGreetingBytes> greeting() {
    return {uint8_t(kGreetingMagic), uint8_t(kGreetingMagic >> 8), uint8_t(kGreetingMagic >> 16),
            uint8_t(kGreetingMagic >> 24), uint8_t(kChannelVersion), uint8_t(kChannelVersion >> 8), 0, 0};
}

/// Up to `max` bytes as a C-like string literal, for messages about what a peer sent.
std::string quoted(const uint8_t* p, size_t n, size_t max = 32) {
    static const char* const hexd = "0123456789abcdef";
    std::string s = "\"";
    for (size_t i = 0; i < n && i < max; ++i) {
        const uint8_t c = p[i];
        if (c == '\n') s += "\\n";
        else if (c == '\r') s += "\\r";
        else if (c == '\t') s += "\\t";
        else if (c == '"' || c == '\\') s += '\\', s += char(c);
        else if (c >= 0x20 && c < 0x7f) s += char(c);
        else s += "\\x", s += hexd[c >> 4], s += hexd[c & 15];
    }
    s += '"';
    if (n > max) s += "...";
    return s;
}

std::string no_gpuverbs(const std::string& peer) {
    return "the peer at " + peer + " does not speak the gpuverbs exchange protocol";
}

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
    bool pump_greeting(int fd, const std::string& peer) {
        const auto want = greeting();
        while (greet_have < kGreetingBytes) {
            ssize_t r = ::recv(fd, greet + greet_have, kGreetingBytes - greet_have, 0);
            if (r > 0) {
                greet_have += size_t(r);
                if (std::memcmp(greet, want.data(), std::min<size_t>(greet_have, 4)) != 0) {
                    // Show more of what it sent, when it is there.
                    std::vector<uint8_t> seen(greet, greet + greet_have);
                    uint8_t more[40];
                    ssize_t m = ::recv(fd, more, sizeof more, MSG_DONTWAIT);
                    if (m > 0) seen.insert(seen.end(), more, more + m);
                    throw RemoteError(no_gpuverbs(peer) + ": it sent " + quoted(seen.data(), seen.size()) +
                                      " where the gpuverbs greeting (\"GVCH\", channel protocol version " +
                                      std::to_string(kChannelVersion) + ") belongs");
                }
                continue;
            }
            if (r == 0 || (r < 0 && errno == ECONNRESET)) {
                const char* how = r == 0 ? "closed" : "reset";
                if (greet_have == 0)
                    throw RemoteError(no_gpuverbs(peer) + ": it " + how +
                                      " the connection without sending the gpuverbs greeting");
                throw RemoteError("peer " + peer + " " + how + " the connection after " +
                                  std::to_string(greet_have) + " of " + std::to_string(kGreetingBytes) +
                                  " bytes of its greeting");
            }
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
            throw SystemError("recv from " + peer + " failed", errno);
        }
        const uint16_t version = get16(greet + 4);
        if (version != kChannelVersion)
            throw RemoteError("the peer at " + peer + " speaks version " + std::to_string(version) +
                              " of the gpuverbs channel protocol, this build version " +
                              std::to_string(kChannelVersion) + ": use the same gpuverbs on both sides");
        if (get16(greet + 6) != 0)
            throw RemoteError(no_gpuverbs(peer) + ": its greeting has nonzero reserved bytes " +
                              quoted(greet, kGreetingBytes));
        greeted = true;
        return true;
    }

    /// Reads what the socket has. True when the frame is complete, false when it would block.
    bool pump(int fd, const std::string& peer, uint32_t max_message) {
        if (!greeted && !pump_greeting(fd, peer)) return false;
        for (;;) {
            uint8_t* dst = have_len ? body.data() + body_have : hdr + hdr_have;
            size_t room = have_len ? len - body_have : 4 - hdr_have;
            ssize_t r = ::recv(fd, dst, room, 0);
            if (r > 0) {
                if (have_len) {
                    body_have += size_t(r);
                    if (body_have == len) return true;
                    continue;
                }
                hdr_have += size_t(r);
                if (hdr_have < 4) continue;
                len = get32(hdr);
                if (len == 0) throw RemoteError("peer " + peer + " sent an empty frame (length 0)");
                if (len > max_message)
                    throw RemoteError("peer " + peer + " sent a frame of " + std::to_string(len) +
                                      " bytes, more than the maximum message of " +
                                      std::to_string(max_message) + " bytes");
                have_len = true;
                body.resize(len);
                continue;
            }
            if (r == 0) throw RemoteError("peer " + peer + " closed the connection after " + progress());
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
            if (errno == ECONNRESET)
                throw RemoteError("peer " + peer + " reset the connection after " + progress());
            throw SystemError("recv from " + peer + " failed", errno);
        }
    }
};

/// Sends from buf[sent..n) what the socket takes. True when all is sent, false when it would
/// block.
bool send_some(int fd, const uint8_t* buf, size_t n, size_t& sent, const std::string& peer,
               const char* what) {
    while (sent < n) {
        ssize_t w = ::send(fd, buf + sent, n - sent, MSG_NOSIGNAL);
        if (w > 0) {
            sent += size_t(w);
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
        if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
            throw RemoteError("peer " + peer + " closed the connection after we sent " +
                              std::to_string(sent) + " of " + std::to_string(n) + " bytes of " + what);
        throw SystemError("send to " + peer + " failed", w < 0 ? errno : EIO);
    }
    return true;
}

void append_frame(std::vector<uint8_t>& out, const uint8_t* msg, size_t size) {
    auto n = uint32_t(size);
    uint8_t h[4] = {uint8_t(n), uint8_t(n >> 8), uint8_t(n >> 16), uint8_t(n >> 24)};
    out.insert(out.end(), h, h + 4);
    out.insert(out.end(), msg, msg + size);
}
void append_frame(std::vector<uint8_t>& out, const std::vector<uint8_t>& msg) {
    append_frame(out, msg.data(), msg.size());
}

bool retryable_connect_error(int e) {
    switch (e) {
        case ECONNREFUSED:
        case ETIMEDOUT:
        case EHOSTUNREACH:
        case ENETUNREACH:
        case ENETDOWN:
        case ECONNRESET:
        case ECONNABORTED:
        case EAGAIN:
        case EADDRNOTAVAIL: return true;
    }
    return false;
}

}  // namespace

struct Channel::Impl {
    int fd = -1;
    std::string peer;
    uint32_t max_message = kDefaultMaxMessage;
    bool broken = false;
    std::string broken_why;
    FrameReader reader;
    std::vector<uint8_t> unsent;  // the part of our greeting the socket did not take yet

    ~Impl() { close(); }
    /// Sends our greeting on a new connection, as far as the socket takes it now (all of it on
    /// a fresh socket); what is left goes before our next message. A peer already gone is
    /// not an error here: the first receive reports it.
    void greet() {
        const auto g = greeting();
        unsent.assign(g.begin(), g.end());
        size_t sent = 0;
        try {
            send_some(fd, unsent.data(), unsent.size(), sent, peer, "the greeting");
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
        close_fd(fd);
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
    ~Impl() { close_fd(fd); }
};

// ----- Listener -----

Listener::Listener() = default;
Listener::Listener(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Listener::~Listener() = default;
Listener::Listener(Listener&&) noexcept = default;
Listener& Listener::operator=(Listener&&) noexcept = default;

uint16_t Listener::port() const { return impl_ ? impl_->port : 0; }
const std::string& Listener::address() const {
    static const std::string none;
    return impl_ ? impl_->address : none;
}
int Listener::fd() const { return impl_ ? impl_->fd : -1; }
void Listener::close() {
    if (impl_) close_fd(impl_->fd);
}

Channel Listener::accept(int timeout_ms) {
    GV_REQUIRE(impl_ && impl_->fd >= 0, "accept on a closed listener");
    Deadline dl(timeout_ms);
    for (;;) {
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        int fd = ::accept4(impl_->fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            auto c = std::make_unique<Channel::Impl>();
            c->fd = fd;
            c->peer = sockaddr_name(reinterpret_cast<sockaddr*>(&ss), len);
            set_nodelay(fd);
            c->greet();
            return Channel(std::move(c));
        }
        // A client that gave up between poll and accept is not our failure: wait for another.
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
            throw SystemError("accept on " + host_port(impl_->address, impl_->port) + " failed", errno);
        if (!wait_fd(impl_->fd, POLLIN, dl))
            throw TimeoutError("no client connected to " + host_port(impl_->address, impl_->port) +
                               " within " + std::to_string(timeout_ms) + " ms");
    }
}

Channel Listener::accept_client(int timeout_ms, int handshake_ms, const Handshake& handshake,
                                const OnReject& on_reject) {
    GV_REQUIRE(impl_ && impl_->fd >= 0, "accept_client on a closed listener");
    GV_REQUIRE(handshake, "accept_client needs a handshake");
    const std::string where = host_port(impl_->address, impl_->port);
    Deadline dl(timeout_ms);
    int rejected = 0;
    std::string last;
    auto timed_out = [&] {
        std::string m = "no client ";
        m += rejected ? "passed the handshake" : "connected";
        m += " on " + where + " within " + std::to_string(timeout_ms) + " ms";
        if (rejected) m += " (" + std::to_string(rejected) + " rejected; the last: " + last + ")";
        return TimeoutError(m);
    };
    for (;;) {
        if (dl.expired()) throw timed_out();
        Channel ch;
        try {
            ch = accept(dl.remaining_ms());
        } catch (const TimeoutError&) {
            throw timed_out();
        }
        int left = dl.remaining_ms();
        int budget = handshake_ms < 0 ? left : left < 0 ? handshake_ms : std::min(handshake_ms, std::max(left, 1));
        std::string why;
        try {
            handshake(ch, budget);
            return ch;
        } catch (const RemoteError& e) {
            why = e.what();
        } catch (const TimeoutError& e) {
            why = e.what();
        }
        ++rejected;
        last = why;
        if (on_reject) on_reject(ch.peer(), why);
    }
}

// ----- Channel -----

Channel::Channel() = default;
Channel::Channel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Channel::~Channel() = default;
Channel::Channel(Channel&&) noexcept = default;
Channel& Channel::operator=(Channel&&) noexcept = default;

bool Channel::is_open() const { return impl_ && impl_->fd >= 0; }
std::string Channel::peer() const { return impl_ ? impl_->peer : std::string(); }
int Channel::fd() const { return impl_ ? impl_->fd : -1; }
bool Channel::peer_closed() const {
    GV_REQUIRE(is_open(), "peer_closed on a channel that is not open");
    for (;;) {
        // POLLRDHUP: the peer's FIN (close, exit, kill), even with unread data before it;
        // POLLHUP and POLLERR (always reported): a reset or another socket error. poll reads
        // neither the data nor the pending error (SO_ERROR), so receives see both later.
        pollfd p{impl_->fd, POLLRDHUP, 0};
        int r = ::poll(&p, 1, 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            throw SystemError("poll failed", errno);
        }
        if (p.revents & POLLNVAL) throw SystemError("poll on a closed socket", EBADF);
        return r > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
    }
}
void Channel::close() {
    if (impl_) impl_->close();
}
void Channel::set_max_message(uint32_t bytes) {
    GV_REQUIRE(impl_, "channel is not connected");
    GV_REQUIRE(bytes > 0, "max_message must be at least 1 byte");
    impl_->max_message = bytes;
}
uint32_t Channel::max_message() const { return impl_ ? impl_->max_message : kDefaultMaxMessage; }

void Channel::bad_record(const std::string& what) const {
    throw RemoteError("peer " + peer() + " sent a bad record: " + what);
}

Listener Channel::listen(uint16_t port, const std::string& address) {
    const std::string where = host_port(address.empty() ? "*" : address, port);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    AddrInfo ai;
    std::string serv = std::to_string(port);
    int g = getaddrinfo(address.empty() ? nullptr : address.c_str(), serv.c_str(), &hints, &ai.list);
    if (g != 0) throw InvalidUsage("cannot listen on " + where + ": " + gai_strerror(g));

    auto impl = std::make_unique<Listener::Impl>();
    impl->address = address;
    for (addrinfo* a = ai.list; a; a = a->ai_next) {
        int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            if (a->ai_next) continue;
            throw SystemError("socket for " + where + " failed", errno);
        }
        impl->fd = fd;  // closed by impl on any throw below
        int one = 1;
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
            throw SystemError("setsockopt(SO_REUSEADDR) failed", errno);
        if (::bind(fd, a->ai_addr, a->ai_addrlen) < 0) {
            int e = errno;
            if (e == EADDRINUSE)
                throw SystemError("port " + std::to_string(port) + " already in use on " +
                                      (address.empty() ? std::string("any address") : address),
                                  e);
            if (e == EADDRNOTAVAIL)
                throw SystemError("cannot listen on " + where + ": not an address of this host", e);
            throw SystemError("bind to " + where + " failed", e);
        }
        if (::listen(fd, 128) < 0) throw SystemError("listen on " + where + " failed", errno);
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) < 0)
            throw SystemError("getsockname failed", errno);
        impl->port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                    : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
        return Listener(std::move(impl));
    }
    throw InvalidUsage("cannot listen on " + where + ": no usable address");
}

Channel Channel::connect(const std::string& host, uint16_t port, int timeout_ms,
                         const std::function<void()>& on_retry) {
    const std::string where = host_port(host, port);
    GV_REQUIRE(!host.empty(), "connect needs a host name or address");
    Deadline dl(timeout_ms);
    int last_err = 0;
    int attempts = 0;
    int backoff_ms = 5;
    bool told = false;  // on_retry was called
    std::string serv = std::to_string(port);
    for (;;) {
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_NUMERICSERV;
        AddrInfo ai;
        int g = getaddrinfo(host.c_str(), serv.c_str(), &hints, &ai.list);
        if (g != 0 && g != EAI_AGAIN)
            throw InvalidUsage("cannot connect to " + where + ": cannot resolve '" + host +
                               "': " + gai_strerror(g));
        for (addrinfo* a = g == 0 ? ai.list : nullptr; a; a = a->ai_next) {
            ++attempts;
            auto impl = std::make_unique<Impl>();
            impl->fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
            if (impl->fd < 0) {
                last_err = errno;
                continue;
            }
            int err = 0;
            if (::connect(impl->fd, a->ai_addr, a->ai_addrlen) < 0) {
                err = errno;
                if (err == EINPROGRESS || err == EINTR) {
                    if (!wait_fd(impl->fd, POLLOUT, dl)) {
                        last_err = ETIMEDOUT;
                        break;  // the deadline passed while the handshake was pending
                    }
                    socklen_t l = sizeof err;
                    if (getsockopt(impl->fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0) err = errno;
                }
            }
            if (err == 0) {
                sockaddr_storage me{}, them{};
                socklen_t lm = sizeof me, lt = sizeof them;
                getsockname(impl->fd, reinterpret_cast<sockaddr*>(&me), &lm);
                getpeername(impl->fd, reinterpret_cast<sockaddr*>(&them), &lt);
                impl->peer = sockaddr_name(reinterpret_cast<sockaddr*>(&them), lt);
                // Retrying against a closed local port can connect a socket to itself (TCP
                // simultaneous open when the kernel picks the target port as source port).
                if (impl->peer == sockaddr_name(reinterpret_cast<sockaddr*>(&me), lm)) {
                    last_err = ECONNREFUSED;
                    continue;
                }
                set_nodelay(impl->fd);
                impl->greet();
                return Channel(std::move(impl));
            }
            last_err = err;
            if (!retryable_connect_error(err)) throw SystemError("connect to " + where + " failed", err);
        }
        if (g == EAI_AGAIN) last_err = EAGAIN;
        int left = dl.remaining_ms();
        if (left == 0)
            throw TimeoutError("could not connect to " + where + " within " + std::to_string(timeout_ms) +
                               " ms (" + std::to_string(attempts) + " attempts, last error: " +
                               (last_err ? std::strerror(last_err) : "none") + ")");
        if (on_retry && !told) {
            told = true;
            on_retry();
        }
        int nap = left < 0 ? backoff_ms : std::min(backoff_ms, left);
        std::this_thread::sleep_for(std::chrono::milliseconds(nap));
        backoff_ms = std::min(backoff_ms * 2, 100);
    }
}

void Channel::send_message(const uint8_t* data, size_t size, int timeout_ms) {
    GV_REQUIRE(impl_, "channel is not connected");
    impl_->check_usable();
    GV_REQUIRE(size > 0, "cannot send an empty message");
    GV_REQUIRE(size <= impl_->max_message, "message of " + std::to_string(size) +
                                               " bytes exceeds the channel's maximum of " +
                                               std::to_string(impl_->max_message));
    std::vector<uint8_t> out = impl_->unsent;  // the rest of our greeting, if any
    out.reserve(out.size() + size + 4);
    append_frame(out, data, size);
    Deadline dl(timeout_ms);
    size_t sent = 0;
    try {
        while (!send_some(impl_->fd, out.data(), out.size(), sent, impl_->peer, "a message"))
            if (!wait_fd(impl_->fd, POLLOUT, dl))
                throw TimeoutError("timed out after " + std::to_string(timeout_ms) +
                                   " ms sending a message to " + impl_->peer + " (" + std::to_string(sent) +
                                   " of " + std::to_string(out.size()) + " bytes sent)");
    } catch (const TimeoutError&) {
        if (sent > 0) impl_->mark_broken("a send timed out part-way");
        throw;
    } catch (const RemoteError&) {
        impl_->mark_broken("a send failed");
        // A peer that closed before we heard its greeting: say whether it ever sent one.
        if (!impl_->reader.greeted) impl_->reader.pump_greeting(impl_->fd, impl_->peer);
        throw;
    } catch (const Error&) {
        impl_->mark_broken("a send failed");
        throw;
    }
    impl_->unsent.clear();
}

std::vector<uint8_t> Channel::recv_message(int timeout_ms) {
    GV_REQUIRE(impl_, "channel is not connected");
    impl_->check_usable();
    Deadline dl(timeout_ms);
    FrameReader& rd = impl_->reader;
    try {
        while (!rd.pump(impl_->fd, impl_->peer, impl_->max_message))
            if (!wait_fd(impl_->fd, POLLIN, dl))
                throw TimeoutError("timed out after " + std::to_string(timeout_ms) +
                                   " ms waiting for a message from " + impl_->peer + " (received " +
                                   rd.progress() + ")");
    } catch (const TimeoutError&) {
        throw;
    } catch (const Error&) {
        impl_->mark_broken("a receive failed");
        throw;
    }
    return rd.take();
}

Exchanged Channel::exchange(Backend backend, const std::vector<QpEndpoint>& qps,
                            const std::vector<RemoteBuffer>& buffers, int timeout_ms) {
    GV_REQUIRE(impl_, "channel is not connected");
    impl_->check_usable();
    GV_REQUIRE(backend_code(backend) != 0,
               std::string("exchange needs a concrete backend, not ") + backend_name(backend));
    GV_REQUIRE(qps.size() <= kMaxExchangeRecords && buffers.size() <= kMaxExchangeRecords,
               "exchange carries at most " + std::to_string(kMaxExchangeRecords) + " QP and memory records");
    for (size_t i = 0; i < qps.size(); ++i)
        GV_REQUIRE(qps[i].backend == backend, "QP endpoint " + std::to_string(i) + " is of backend " +
                                                  backend_name(qps[i].backend) + ", the exchange of " +
                                                  backend_name(backend));
    const std::string& peer = impl_->peer;
    std::vector<uint8_t> out = impl_->unsent;  // the rest of our greeting, if any
    HelloRecord hello{backend, uint32_t(qps.size()), uint32_t(buffers.size())};
    append_frame(out, hello.serialize());
    for (const QpEndpoint& e : qps) append_frame(out, QpRecord(e).serialize());
    for (const RemoteBuffer& b : buffers) append_frame(out, MemoryRecord(b).serialize());

    Exchanged res;
    bool have_hello = false;
    HelloRecord theirs;
    size_t received = 0;  // records after the hello
    auto expected = [&] { return size_t(theirs.qp_count) + theirs.memory_count; };
    auto recv_done = [&] { return have_hello && received == expected(); };
    size_t sent = 0;
    auto state = [&] {
        std::string s =
            "sent " + std::to_string(sent) + " of " + std::to_string(out.size()) + " bytes, received ";
        if (!have_hello) return s + "no hello yet";
        return s + std::to_string(received) + " of " + std::to_string(expected()) + " records";
    };
    auto take_frame = [&](std::vector<uint8_t> m) {
        const std::string pre = "exchange with " + peer + ": ";
        try {
            if (!have_hello) {
                theirs = HelloRecord::parse(m.data(), m.size());
                have_hello = true;
                if (theirs.backend != backend)
                    throw RemoteError(pre + "peer uses backend " + backend_name(theirs.backend) +
                                      ", we use " + backend_name(backend));
                if (theirs.qp_count != qps.size())
                    throw RemoteError(pre + "peer offers " + std::to_string(theirs.qp_count) +
                                      " QP endpoints, we offer " + std::to_string(qps.size()) +
                                      " (QPs connect pairwise: both sides need the same number)");
                res.backend = theirs.backend;
                res.qps.reserve(theirs.qp_count);
                res.buffers.reserve(theirs.memory_count);
                return;
            }
            if (res.qps.size() < theirs.qp_count) {
                QpRecord r = QpRecord::parse(m.data(), m.size());
                if (r.endpoint.backend != theirs.backend)
                    throw RemoteError(pre + "peer's QP record " + std::to_string(res.qps.size()) +
                                      " is of backend " + backend_name(r.endpoint.backend) +
                                      ", its hello said " + backend_name(theirs.backend));
                res.qps.push_back(std::move(r.endpoint));
            } else {
                res.buffers.push_back(MemoryRecord::parse(m.data(), m.size()).buffer);
            }
            ++received;
        } catch (const RemoteError& e) {
            if (std::strncmp(e.what(), pre.c_str(), pre.size()) == 0) throw;
            std::string which =
                !have_hello ? std::string("hello")
                : res.qps.size() < theirs.qp_count
                    ? "QP record " + std::to_string(res.qps.size()) + " of " + std::to_string(theirs.qp_count)
                    : "memory record " + std::to_string(res.buffers.size()) + " of " +
                          std::to_string(theirs.memory_count);
            throw RemoteError(pre + "bad " + which + ": " + e.what());
        }
    };

    Deadline dl(timeout_ms);
    FrameReader& rd = impl_->reader;
    try {
        while (sent < out.size() || !recv_done()) {
            short ev = 0;
            if (!recv_done()) ev |= POLLIN;
            if (sent < out.size()) ev |= POLLOUT;
            short rev = wait_fd(impl_->fd, ev, dl);
            if (rev == 0)
                throw TimeoutError("exchange with " + peer + " timed out after " +
                                   std::to_string(timeout_ms) + " ms: " + state());
            try {
                if (sent < out.size() && (rev & (POLLOUT | POLLERR | POLLHUP)))
                    send_some(impl_->fd, out.data(), out.size(), sent, peer, "the exchange");
                if (!recv_done() && (rev & (POLLIN | POLLERR | POLLHUP)))
                    while (!recv_done() && rd.pump(impl_->fd, peer, impl_->max_message))
                        take_frame(rd.take());
            } catch (const RemoteError& e) {
                if (std::strncmp(e.what(), "exchange with ", 14) == 0) throw;
                throw RemoteError("exchange with " + peer + " failed (" + state() + "): " + e.what());
            }
        }
    } catch (const Error&) {
        impl_->mark_broken("an exchange failed");
        throw;
    }
    impl_->unsent.clear();
    return res;
}

}  // namespace gv::oob
