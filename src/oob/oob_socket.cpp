// Out-of-band TCP channel plumbing (oob_channel.hpp): socket helpers, the greeting, the frame
// reader, sending.
#include "oob/oob_channel.hpp"
#include "oob/oob_wire.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace gv::oob::sock {

using wire::get16;
using wire::get32;

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

std::array<uint8_t, kGreetingBytes> greeting() {
    return {uint8_t(kGreetingMagic), uint8_t(kGreetingMagic >> 8), uint8_t(kGreetingMagic >> 16),
            uint8_t(kGreetingMagic >> 24), uint8_t(kChannelVersion), uint8_t(kChannelVersion >> 8), 0, 0};
}

namespace {

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

}  // namespace

bool FrameReader::pump_greeting(int fd, const std::string& peer) {
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

bool FrameReader::pump(int fd, const std::string& peer, uint32_t max_message) {
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

}  // namespace gv::oob::sock
