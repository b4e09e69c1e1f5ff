// Out-of-band TCP channel: listen, connect, accept, framed messages (oob.hpp). The socket
// plumbing is oob_socket.cpp, the record exchange oob_exchange.cpp.
#include "gpuverbs/oob.hpp"
#include "oob/oob_channel.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace gv::oob {

using sock::AddrInfo;
using sock::append_frame;
using sock::close_fd;
using sock::Deadline;
using sock::FrameReader;
using sock::host_port;
using sock::retryable_connect_error;
using sock::send_some;
using sock::set_nodelay;
using sock::sockaddr_name;
using sock::wait_fd;

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

}  // namespace gv::oob
