// Shared by the out-of-band tests: random and hand-built records, sockets and processes.
#pragma once

#include "gpuverbs/oob.hpp"
#include "soft/locator.hpp"
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include "proc_util.hpp"
#include "test_util.hpp"

namespace {

// ----- random and hand-built records -----

gv::QpEndpoint random_endpoint(std::mt19937_64& r) {
    static const gv::Backend backends[] = {gv::Backend::Soft, gv::Backend::Mlx5, gv::Backend::Verbs};
    static const uint32_t mtus[] = {256, 512, 1024, 2048, 4096};
    gv::QpEndpoint e;
    e.backend = backends[r() % 3];
    e.qpn = uint32_t(r() & 0xFFFFFF);
    e.psn = uint32_t(r() & 0xFFFFFF);
    e.lid = uint16_t(r());
    for (auto& g : e.gid) g = uint8_t(r());
    e.mtu = mtus[r() % 5];
    size_t n = r() % (gv::oob::kMaxDeviceName + 1);
    for (size_t i = 0; i < n; ++i) e.device.push_back(char(0x20 + r() % 95));
    if (e.backend == gv::Backend::Soft && r() % 3) {  // a software-device locator, often with an arena
        gv::detail::soft::Locator l;
        l.pid = 1 + uint32_t(r() % 4194304);
        if (r() % 4) {
            l.arena_fd = uint32_t(r() & 0x7fffffff);
            l.arena_base = (r() % (1ull << 44)) << 12;
            if (!l.arena_base) l.arena_base = 4096;
            l.arena_size = (1 + r() % (1ull << 20)) << 12;
            l.qp_context = l.arena_base + ((r() % l.arena_size) & ~7ull);
        }
        e.extra = gv::detail::soft::encode(l);
    }
    return e;
}

gv::RemoteBuffer random_buffer(std::mt19937_64& r) {
    gv::RemoteBuffer b;
    b.addr = r() >> 1;
    b.length = 1 + (r() >> 24);  // addr < 2^63, length < 2^40: never wraps
    b.rkey = uint32_t(r());
    b.access = uint32_t(r() & gv::kAllAccess);
    return b;
}

std::vector<gv::QpEndpoint> make_qps(uint64_t seed, size_t n, gv::Backend backend) {
    std::mt19937_64 r(seed);
    std::vector<gv::QpEndpoint> v;
    for (size_t i = 0; i < n; ++i) {
        v.push_back(random_endpoint(r));
        v.back().backend = backend;
        if (backend != gv::Backend::Soft) v.back().extra = gv::EndpointExtra{};
    }
    return v;
}

std::vector<gv::RemoteBuffer> make_buffers(uint64_t seed, size_t n) {
    std::mt19937_64 r(seed);
    std::vector<gv::RemoteBuffer> v;
    for (size_t i = 0; i < n; ++i) v.push_back(random_buffer(r));
    return v;
}

bool same(const gv::QpEndpoint& a, const gv::QpEndpoint& b) {
    return a.backend == b.backend && a.qpn == b.qpn && a.psn == b.psn && a.lid == b.lid && a.gid == b.gid &&
           a.mtu == b.mtu && a.device == b.device && a.extra == b.extra;
}
bool same(const gv::RemoteBuffer& a, const gv::RemoteBuffer& b) {
    return a.addr == b.addr && a.length == b.length && a.rkey == b.rkey && a.access == b.access;
}
template <class T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (!same(a[i], b[i])) return false;
    return true;
}

void put16(std::vector<uint8_t>& b, uint16_t v) { b.push_back(uint8_t(v)), b.push_back(uint8_t(v >> 8)); }
void put32(std::vector<uint8_t>& b, uint32_t v) { put16(b, uint16_t(v)), put16(b, uint16_t(v >> 16)); }
void put64(std::vector<uint8_t>& b, uint64_t v) { put32(b, uint32_t(v)), put32(b, uint32_t(v >> 32)); }

/// A record built by hand from the documented layout, with a correct CRC unless told not to.
std::vector<uint8_t> raw_record(uint32_t magic, uint16_t version, uint16_t type,
                                const std::vector<uint8_t>& payload, bool fix_crc = true,
                                long long payload_len = -1) {
    std::vector<uint8_t> b;
    put32(b, magic);
    put16(b, version);
    put16(b, type);
    put32(b, payload_len == -1 ? uint32_t(payload.size()) : uint32_t(payload_len));
    b.insert(b.end(), payload.begin(), payload.end());
    put32(b, fix_crc ? gv::oob::crc32(b.data(), b.size()) : 0xDEADBEEF);
    return b;
}

/// A QP record's payload fields (oob.hpp's layout); `loc` adds the 48-byte software-device
/// locator as the backend-specific part (32 bytes, without the GPU identity, with `legacy`).
struct QpFields {
    uint8_t backend = 1, name_len = 8, reserved = 0;
    int extra_len = -1;  ///< -1: the length of what follows (0, or 48 / 32 with loc)
    uint16_t lid = 0x1234, reserved2 = 0;
    uint32_t qpn = 0xabcdef, psn = 0x123456, mtu = 1024;
    std::string name = "soft-cpu";
    bool loc = false;
    uint32_t pid = 0, arena_fd = 0;
    uint64_t arena_base = 0, arena_size = 0, qp_context = 0;
    uint8_t gpu_uuid[16] = {};  ///< the device's GPU identity (zero: CPU threads)
    bool legacy = false;        ///< the 32-byte locator of the version before GPU identities
};
std::vector<uint8_t> qp_payload(const QpFields& f) {
    std::vector<uint8_t> p;
    p.push_back(f.backend);
    p.push_back(f.name_len);
    p.push_back(uint8_t(f.extra_len >= 0 ? f.extra_len : f.loc ? (f.legacy ? 32 : 48) : 0));
    p.push_back(f.reserved);
    put32(p, f.qpn);
    put32(p, f.psn);
    put32(p, f.mtu);
    put16(p, f.lid);
    put16(p, f.reserved2);
    for (int i = 0; i < 16; ++i) p.push_back(uint8_t(i));
    if (f.loc) {
        put32(p, f.pid);
        put32(p, f.arena_fd);
        put64(p, f.arena_base);
        put64(p, f.arena_size);
        put64(p, f.qp_context);
        if (!f.legacy) p.insert(p.end(), f.gpu_uuid, f.gpu_uuid + 16);
    }
    p.insert(p.end(), f.name.begin(), f.name.end());
    return p;
}
std::vector<uint8_t> raw_qp(const QpFields& f) { return raw_record(gv::oob::kQpRecordMagic, gv::oob::kRecordVersion, 1, qp_payload(f)); }

std::vector<uint8_t> raw_memory(uint64_t addr, uint64_t length, uint32_t rkey, uint32_t access) {
    std::vector<uint8_t> p;
    put64(p, addr);
    put64(p, length);
    put32(p, rkey);
    put32(p, access);
    return raw_record(gv::oob::kMemoryRecordMagic, gv::oob::kRecordVersion, 2, p);
}

std::vector<uint8_t> raw_hello(uint32_t nqp, uint32_t nmem, uint8_t backend, uint8_t r1 = 0,
                               uint16_t version = gv::oob::kRecordVersion) {
    std::vector<uint8_t> p;
    put32(p, nqp);
    put32(p, nmem);
    p.push_back(backend);
    p.push_back(r1), p.push_back(0), p.push_back(0);
    return raw_record(gv::oob::kHelloMagic, version, 3, p);
}

/// The gv::RemoteError message f throws, or a marker saying it threw something else or nothing.
template <class F>
std::string remote_error(F&& f) {
    try {
        f();
    } catch (const gv::RemoteError& e) {
        return e.what();
    } catch (const std::exception& e) {
        return std::string("<not a gv::RemoteError: ") + e.what() + ">";
    }
    return "<no exception>";
}

#define EXPECT_MSG(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg)

template <class R>
std::string parse_error(const std::vector<uint8_t>& b) {
    return remote_error([&] { R::parse(b.data(), b.size()); });
}

// ----- sockets and processes -----

int wait_child(pid_t pid, int timeout_ms = 15000) { return gvtest::wait_child(pid, timeout_ms); }

void expect_exit_ok(int st, const char* who) {
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
        << who << ": status " << st << " (exited " << (WIFEXITED(st) ? WEXITSTATUS(st) : -1) << ", signal "
        << (WIFSIGNALED(st) ? WTERMSIG(st) : 0) << ")";
}

void raw_send(int fd, const std::vector<uint8_t>& b) {
    ASSERT_EQ(::send(fd, b.data(), b.size(), MSG_NOSIGNAL), ssize_t(b.size()));
}

std::vector<uint8_t> framed(const std::vector<uint8_t>& m) {
    std::vector<uint8_t> b;
    put32(b, uint32_t(m.size()));
    b.insert(b.end(), m.begin(), m.end());
    return b;
}

/// A port nobody listens on (bound and released; the kernel does not hand it out right away).
uint16_t closed_port() {
    gv::oob::Listener l = gv::oob::Channel::listen(0);
    return l.port();
}

/// Runs f on a thread; join() returns what it threw ("" when nothing). The destructor joins,
/// so a failing test never destroys a running std::thread.
class Background {
public:
    template <class F>
    explicit Background(F f)
        : thread_([this, f] {
              try {
                  f();
              } catch (const std::exception& e) {
                  error_ = e.what();
              }
          }) {}
    ~Background() {
        if (thread_.joinable()) thread_.join();
    }
    std::string join() {
        if (thread_.joinable()) thread_.join();
        return error_;
    }

private:
    std::string error_;
    std::thread thread_;
};

/// A TCP socket that is not a gpuverbs channel, connected to 127.0.0.1:port (-1 on failure).
int raw_connect(uint16_t port) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    if (fd >= 0) ::close(fd);
    return -1;
}

/// A TCP server that is not gpuverbs: listens on a free loopback port and, on a thread,
/// answers its first connection with `reply` (nothing when empty), then closes it. For the
/// client's side of "the peer does not speak the gpuverbs exchange protocol".
class RawServer {
public:
    explicit RawServer(std::string reply) : reply_(std::move(reply)) {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 4) != 0 ||
            getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
            throw std::runtime_error("RawServer: cannot listen");
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 10000) != 1) return;
            int c = ::accept(fd_, nullptr, nullptr);
            if (c < 0) return;
            // Read what the client sent (its greeting), as a server reading a request would.
            char buf[256];
            pollfd q{c, POLLIN, 0};
            if (::poll(&q, 1, 2000) == 1) (void)::recv(c, buf, sizeof buf, 0);
            if (!reply_.empty()) (void)::send(c, reply_.data(), reply_.size(), MSG_NOSIGNAL);
            ::close(c);
        });
    }
    ~RawServer() {
        thread_.join();
        ::close(fd_);
    }
    uint16_t port() const { return port_; }

private:
    std::string reply_;
    int fd_ = -1;
    uint16_t port_ = 0;
    std::thread thread_;
};

/// A connected pair of channels on loopback.
struct Loop {
    gv::oob::Listener listener = gv::oob::Channel::listen(0);
    gv::oob::Channel client, server;
    Loop() {
        Background t([&] { client = gv::oob::Channel::connect("127.0.0.1", listener.port(), 5000); });
        server = listener.accept(5000);
        std::string err = t.join();
        if (!err.empty()) throw std::runtime_error("loopback connect failed: " + err);
    }
};

}  // namespace
