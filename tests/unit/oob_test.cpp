// Out-of-band exchange: connection records (format, validation, fuzzing) and the TCP channel
// (threads, processes, failures, network namespaces).
#include "gpuverbs/oob.hpp"

#include <fcntl.h>
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

using namespace gv;
using namespace gv::oob;

namespace {

using gvtest::Clock;
using gvtest::ms_since;

// ----- random and hand-built records -----

QpEndpoint random_endpoint(std::mt19937_64& r) {
    static const Backend backends[] = {Backend::Soft, Backend::Mlx5, Backend::Verbs};
    static const uint32_t mtus[] = {256, 512, 1024, 2048, 4096};
    QpEndpoint e;
    e.backend = backends[r() % 3];
    e.qpn = uint32_t(r() & 0xFFFFFF);
    e.psn = uint32_t(r() & 0xFFFFFF);
    e.lid = uint16_t(r());
    for (auto& g : e.gid) g = uint8_t(r());
    e.mtu = mtus[r() % 5];
    size_t n = r() % (kMaxDeviceName + 1);
    for (size_t i = 0; i < n; ++i) e.device.push_back(char(0x20 + r() % 95));
    if (e.backend == Backend::Soft && r() % 3) {  // a software-device locator, often with an arena
        e.soft.pid = 1 + uint32_t(r() % 4194304);
        if (r() % 4) {
            e.soft.arena_fd = uint32_t(r() & 0x7fffffff);
            e.soft.arena_base = (r() % (1ull << 44)) << 12;
            if (!e.soft.arena_base) e.soft.arena_base = 4096;
            e.soft.arena_size = (1 + r() % (1ull << 20)) << 12;
            e.soft.qp_state = e.soft.arena_base + ((r() % e.soft.arena_size) & ~7ull);
        }
    }
    return e;
}

RemoteBuffer random_buffer(std::mt19937_64& r) {
    RemoteBuffer b;
    b.addr = r() >> 1;
    b.length = 1 + (r() >> 24);  // addr < 2^63, length < 2^40: never wraps
    b.rkey = uint32_t(r());
    b.access = uint32_t(r() & kAllAccess);
    return b;
}

std::vector<QpEndpoint> make_qps(uint64_t seed, size_t n, Backend backend) {
    std::mt19937_64 r(seed);
    std::vector<QpEndpoint> v;
    for (size_t i = 0; i < n; ++i) {
        v.push_back(random_endpoint(r));
        v.back().backend = backend;
        if (backend != Backend::Soft) v.back().soft = SoftLocator{};
    }
    return v;
}

std::vector<RemoteBuffer> make_buffers(uint64_t seed, size_t n) {
    std::mt19937_64 r(seed);
    std::vector<RemoteBuffer> v;
    for (size_t i = 0; i < n; ++i) v.push_back(random_buffer(r));
    return v;
}

bool same(const QpEndpoint& a, const QpEndpoint& b) {
    return a.backend == b.backend && a.qpn == b.qpn && a.psn == b.psn && a.lid == b.lid && a.gid == b.gid &&
           a.mtu == b.mtu && a.device == b.device && a.soft == b.soft;
}
bool same(const RemoteBuffer& a, const RemoteBuffer& b) {
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
    put32(b, fix_crc ? crc32(b.data(), b.size()) : 0xDEADBEEF);
    return b;
}

struct QpFields {
    uint8_t backend = 1, name_len = 8;
    uint16_t lid = 0x1234;
    uint32_t qpn = 0xabcdef, psn = 0x123456, mtu = 1024;
    std::string name = "soft-cpu";
    uint32_t pid = 0, arena_fd = 0;
    uint64_t arena_base = 0, arena_size = 0, qp_state = 0;
};
std::vector<uint8_t> qp_payload(const QpFields& f) {
    std::vector<uint8_t> p;
    p.push_back(f.backend);
    p.push_back(f.name_len);
    put16(p, f.lid);
    put32(p, f.qpn);
    put32(p, f.psn);
    put32(p, f.mtu);
    for (int i = 0; i < 16; ++i) p.push_back(uint8_t(i));
    put32(p, f.pid);
    put32(p, f.arena_fd);
    put64(p, f.arena_base);
    put64(p, f.arena_size);
    put64(p, f.qp_state);
    p.insert(p.end(), f.name.begin(), f.name.end());
    return p;
}
std::vector<uint8_t> raw_qp(const QpFields& f) { return raw_record(kQpRecordMagic, kRecordVersion, 1, qp_payload(f)); }

std::vector<uint8_t> raw_memory(uint64_t addr, uint64_t length, uint32_t rkey, uint32_t access) {
    std::vector<uint8_t> p;
    put64(p, addr);
    put64(p, length);
    put32(p, rkey);
    put32(p, access);
    return raw_record(kMemoryRecordMagic, kRecordVersion, 2, p);
}

std::vector<uint8_t> raw_hello(uint32_t nqp, uint32_t nmem, uint8_t backend, uint8_t r1 = 0,
                               uint16_t version = kRecordVersion) {
    std::vector<uint8_t> p;
    put32(p, nqp);
    put32(p, nmem);
    p.push_back(backend);
    p.push_back(r1), p.push_back(0), p.push_back(0);
    return raw_record(kHelloMagic, version, 3, p);
}

/// The RemoteError message f throws, or a marker saying it threw something else or nothing.
template <class F>
std::string remote_error(F&& f) {
    try {
        f();
    } catch (const RemoteError& e) {
        return e.what();
    } catch (const std::exception& e) {
        return std::string("<not a RemoteError: ") + e.what() + ">";
    }
    return "<no exception>";
}

#define EXPECT_MSG(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg)

template <class R>
std::string parse_error(const std::vector<uint8_t>& b) {
    return remote_error([&] { R::parse(b.data(), b.size()); });
}

// ----- sockets and processes -----

using gvtest::spawn;
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
    Listener l = Channel::listen(0);
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

/// A connected pair of channels on loopback.
struct Loop {
    Listener listener = Channel::listen(0);
    Channel client, server;
    Loop() {
        Background t([&] { client = Channel::connect("127.0.0.1", listener.port(), 5000); });
        server = listener.accept(5000);
        std::string err = t.join();
        if (!err.empty()) throw std::runtime_error("loopback connect failed: " + err);
    }
};

}  // namespace

// =============================================================================================
// Records
// =============================================================================================

TEST(OobRecord, Crc32MatchesTheStandardCheckValue) {
    const char* s = "123456789";
    EXPECT_EQ(crc32(reinterpret_cast<const uint8_t*>(s), 9), 0xCBF43926u);
    EXPECT_EQ(crc32(nullptr, 0), 0u);
}

TEST(OobRecord, QpRecordBytesFollowTheDocumentedLayout) {
    QpEndpoint e;
    e.backend = Backend::Soft;
    e.lid = 0x1234;
    e.qpn = 0xabcdef;
    e.psn = 0x123456;
    e.mtu = 1024;
    for (int i = 0; i < 16; ++i) e.gid[i] = uint8_t(i);
    e.device = "soft-cpu";
    std::vector<uint8_t> b = QpRecord(e).serialize();
    EXPECT_EQ(b, raw_qp(QpFields{}));
    ASSERT_EQ(b.size(), 12u + 72u + 4u);
    // With a locator: pid, fd, arena base and size, QP state at payload offsets 32..63.
    e.soft = SoftLocator{4242, 17, 0x110000000000ull, 1ull << 30, 0x110000001040ull};
    QpFields f;
    f.pid = 4242, f.arena_fd = 17, f.arena_base = 0x110000000000ull, f.arena_size = 1ull << 30;
    f.qp_state = 0x110000001040ull;
    EXPECT_EQ(QpRecord(e).serialize(), raw_qp(f));
    EXPECT_TRUE(QpRecord::parse(raw_qp(f)).endpoint.soft == e.soft);
    EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "GVQP");
}

TEST(OobRecord, MemoryAndHelloBytesFollowTheDocumentedLayout) {
    RemoteBuffer rb{0x1122334455667788ull, 4096, 0xcafef00d, kRemoteWrite | kRemoteRead};
    std::vector<uint8_t> b = MemoryRecord(rb).serialize();
    EXPECT_EQ(b, raw_memory(rb.addr, rb.length, rb.rkey, rb.access));
    EXPECT_EQ(b.size(), 12u + 24u + 4u);
    EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "GVMR");
    HelloRecord h{Backend::Mlx5, 64, 4};
    EXPECT_EQ(h.serialize(), raw_hello(64, 4, 2));
}

TEST(OobRecord, RandomRecordsRoundTrip) {
    std::mt19937_64 r(42);
    for (int i = 0; i < 2000; ++i) {
        QpEndpoint e = random_endpoint(r);
        std::vector<uint8_t> b = QpRecord(e).serialize();
        QpRecord back = QpRecord::parse(b);
        ASSERT_TRUE(same(back.endpoint, e)) << "iteration " << i;
        EXPECT_EQ(QpRecord(back).serialize(), b);

        RemoteBuffer rb = random_buffer(r);
        std::vector<uint8_t> m = MemoryRecord(rb).serialize();
        ASSERT_TRUE(same(MemoryRecord::parse(m).buffer, rb)) << "iteration " << i;

        HelloRecord h{e.backend, uint32_t(r() % (kMaxExchangeRecords + 1)),
                      uint32_t(r() % (kMaxExchangeRecords + 1))};
        HelloRecord hb = HelloRecord::parse(h.serialize());
        ASSERT_TRUE(hb.backend == h.backend && hb.qp_count == h.qp_count &&
                    hb.memory_count == h.memory_count);
    }
    // Extremes of every field.
    QpEndpoint e;
    e.qpn = 0xFFFFFF, e.psn = 0xFFFFFF, e.lid = 0xFFFF, e.mtu = 256;
    e.gid.fill(0xFF);
    e.device = std::string(kMaxDeviceName, '~');
    EXPECT_TRUE(same(QpRecord::parse(QpRecord(e).serialize()).endpoint, e));
    e.device.clear();
    EXPECT_TRUE(same(QpRecord::parse(QpRecord(e).serialize()).endpoint, e));
    RemoteBuffer rb{~0ull - 9, 10, ~0u, kAllAccess};  // ends exactly at 2^64
    EXPECT_TRUE(same(MemoryRecord::parse(MemoryRecord(rb).serialize()).buffer, rb));
}

TEST(OobRecord, WrongMagic) {
    std::vector<uint8_t> b = raw_qp(QpFields{});
    b[0] ^= 0x01;
    EXPECT_MSG(parse_error<QpRecord>(b), "not a gpuverbs record: magic 0x50515646 expected 0x50515647");
    std::vector<uint8_t> m = raw_memory(0x1000, 64, 1, kRemoteRead);
    EXPECT_MSG(parse_error<QpRecord>(m), "got a memory record (magic 0x524d5647) expected 0x50515647");
    EXPECT_MSG(parse_error<MemoryRecord>(raw_qp(QpFields{})), "got a QP record");
    EXPECT_MSG(parse_error<HelloRecord>(m), "got a memory record");
    std::vector<uint8_t> junk = {'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P', '/', '1', '.', '1'};
    EXPECT_MSG(parse_error<HelloRecord>(junk), "not a gpuverbs record: magic 0x20544547");
}

TEST(OobRecord, UnsupportedVersionAndWrongType) {
    std::vector<uint8_t> p = qp_payload(QpFields{});
    EXPECT_MSG(parse_error<QpRecord>(raw_record(kQpRecordMagic, 1, 1, p)),
               "record version 1, this build reads version 2");
    EXPECT_MSG(parse_error<QpRecord>(raw_record(kQpRecordMagic, 3, 1, p)),
               "record version 3, this build reads version 2");
    EXPECT_MSG(parse_error<QpRecord>(raw_record(kQpRecordMagic, 0, 1, p)),
               "record version 0, this build reads version 2");
    EXPECT_MSG(parse_error<HelloRecord>(raw_hello(1, 1, 1, 0, 7)),
               "record version 7, this build reads version 2");
    EXPECT_MSG(parse_error<QpRecord>(raw_record(kQpRecordMagic, kRecordVersion, 2, p)),
               "record type 2 disagrees with its magic (type 1)");
}

TEST(OobRecord, TruncatedAtEveryLength) {
    for (const std::vector<uint8_t>& full :
         {raw_qp(QpFields{}), raw_memory(0x1000, 64, 1, kRemoteRead), raw_hello(3, 4, 1)}) {
        for (size_t n = 0; n < full.size(); ++n) {
            std::string qp = parse_error<QpRecord>(std::vector<uint8_t>(full.begin(), full.begin() + n));
            std::string mem = parse_error<MemoryRecord>(std::vector<uint8_t>(full.begin(), full.begin() + n));
            std::string hello =
                parse_error<HelloRecord>(std::vector<uint8_t>(full.begin(), full.begin() + n));
            // The parser of the right type says truncated; all three reject.
            for (const std::string* m : {&qp, &mem, &hello}) EXPECT_EQ(m->find("<"), std::string::npos) << *m;
            const std::string& right = full[2] == 'Q' ? qp : full[2] == 'M' ? mem : hello;
            EXPECT_MSG(right, "record truncated: " + std::to_string(n) + " bytes");
        }
    }
    std::vector<uint8_t> b = raw_qp(QpFields{});
    b.pop_back();
    EXPECT_MSG(parse_error<QpRecord>(b), "record truncated: 87 bytes, header says 88");
    EXPECT_MSG(remote_error([] { QpRecord::parse(nullptr, 0); }),
               "record truncated: 0 bytes, shorter than the 12-byte header");
}

TEST(OobRecord, OversizedAndTrailingBytes) {
    std::vector<uint8_t> b = raw_qp(QpFields{});
    b.push_back(0);
    EXPECT_MSG(parse_error<QpRecord>(b), "record oversized: 89 bytes, header says 88 (1 trailing bytes)");
    std::vector<uint8_t> two = raw_memory(0x1000, 64, 1, kRemoteRead);
    std::vector<uint8_t> second = two;
    two.insert(two.end(), second.begin(), second.end());
    EXPECT_MSG(parse_error<MemoryRecord>(two), "record oversized: 80 bytes, header says 40");
    // Payload lengths outside what the type allows.
    EXPECT_MSG(parse_error<MemoryRecord>(raw_record(kMemoryRecordMagic, kRecordVersion, 2, std::vector<uint8_t>(25))),
               "payload length 25 out of range (24 bytes)");
    EXPECT_MSG(parse_error<QpRecord>(raw_record(kQpRecordMagic, kRecordVersion, 1, std::vector<uint8_t>(129))),
               "payload length 129 out of range (64..128 bytes)");
    EXPECT_MSG(parse_error<QpRecord>(raw_record(kQpRecordMagic, kRecordVersion, 1, {}, true, -1)),
               "payload length 0 out of range");
    // A header claiming 4 GiB on a short buffer.
    EXPECT_MSG(
        parse_error<HelloRecord>(
            raw_record(kHelloMagic, kRecordVersion, 3, std::vector<uint8_t>(12), true, 0xFFFFFFFEll)),
        "payload length 4294967294 out of range");
}

TEST(OobRecord, BadChecksum) {
    std::vector<uint8_t> b = raw_qp(QpFields{});
    b[20] ^= 0x40;  // qpn byte
    EXPECT_MSG(parse_error<QpRecord>(b), "record checksum mismatch: stored 0x");
    std::vector<uint8_t> c = raw_memory(0x1000, 64, 1, kRemoteRead);
    c.back() ^= 1;
    EXPECT_MSG(parse_error<MemoryRecord>(c), "checksum mismatch");
    std::vector<uint8_t> p = qp_payload(QpFields{});
    EXPECT_MSG(parse_error<QpRecord>(raw_record(kQpRecordMagic, kRecordVersion, 1, p, false)),
               "stored 0xdeadbeef, computed 0x");
}

TEST(OobRecord, QpFieldsOutOfRange) {
    auto with = [](auto change) {
        QpFields f;
        change(f);
        return parse_error<QpRecord>(raw_qp(f));
    };
    EXPECT_MSG(with([](QpFields& f) { f.qpn = 1u << 24; }), "qpn 0x1000000 out of range (24 bits)");
    EXPECT_MSG(with([](QpFields& f) { f.qpn = ~0u; }), "qpn 0xffffffff out of range");
    EXPECT_MSG(with([](QpFields& f) { f.psn = 1u << 24; }), "psn 0x1000000 out of range (24 bits)");
    for (uint32_t mtu : {0u, 128u, 300u, 768u, 8192u, 4097u})
        EXPECT_MSG(with([&](QpFields& f) { f.mtu = mtu; }),
                   "path MTU " + std::to_string(mtu) + " is not 256, 512, 1024, 2048 or 4096");
    EXPECT_MSG(with([](QpFields& f) { f.backend = 0; }), "unknown backend code 0");
    EXPECT_MSG(with([](QpFields& f) { f.backend = 9; }), "unknown backend code 9");
    EXPECT_MSG(with([](QpFields& f) { f.name = "soft\ncpu"; }), "non-printable byte 0xa at offset 4");
    EXPECT_MSG(with([](QpFields& f) { f.name = std::string("soft") + char(0x7f) + "cpu"; }),
               "non-printable byte 0x7f");
    EXPECT_MSG(with([](QpFields& f) { f.name[0] = '\0'; }), "non-printable byte 0x0 at offset 0");
    EXPECT_MSG(with([](QpFields& f) { f.name_len = 7; }),
               "payload length 72 disagrees with the device name length 7 (expected 71)");
    EXPECT_MSG(with([](QpFields& f) { f.name_len = 65, f.name = std::string(64, 'x'); }),
               "device name length 65 exceeds 64");
    EXPECT_MSG(with([](QpFields& f) { f.name_len = 65, f.name = std::string(65, 'x'); }),
               "payload length 129 out of range");
    // The software-device locator.
    auto loc = [](QpFields& f) {
        f.pid = 77, f.arena_fd = 5, f.arena_base = 0x110000000000ull, f.arena_size = 1ull << 30;
        f.qp_state = 0x110000002000ull;
    };
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.backend = 2; }), "a mlx5 endpoint carries a software-device locator");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.pid = 0; }), "software-device locator without a pid");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.pid = 4194305; }), "pid 4194305 out of range");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.arena_size = 0; }),
               "software-device locator without an arena names an arena descriptor or address");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.arena_fd = 0x80000000u; }), "arena descriptor 2147483648 out of range");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.arena_base += 8; }), "is not page-aligned");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.arena_size = 4097; }), "is not page-aligned");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.arena_base = 1ull << 57; }), "is not a user address range");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.arena_size = ~0ull << 12; }), "is not a user address range");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.qp_state = f.arena_base + f.arena_size; }),
               "QP state address 0x110040000000 is not an aligned address inside the arena");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.qp_state = f.arena_base - 8; }), "inside the arena");
    EXPECT_MSG(with([&](QpFields& f) { loc(f), f.qp_state += 4; }), "inside the arena");
    // Every field at its limit is accepted.
    QpFields ok;
    ok.qpn = ok.psn = 0xFFFFFF;
    ok.name_len = 64, ok.name = std::string(64, ' ');
    EXPECT_NO_THROW(QpRecord::parse(raw_qp(ok)));
    loc(ok);
    ok.pid = 4194304, ok.qp_state = ok.arena_base + ok.arena_size - 8;
    EXPECT_NO_THROW(QpRecord::parse(raw_qp(ok)));
    QpFields gpu;  // a GPU software device: a pid, no arena
    gpu.pid = 1;
    EXPECT_NO_THROW(QpRecord::parse(raw_qp(gpu)));
}

TEST(OobRecord, MemoryAndHelloFieldsOutOfRange) {
    EXPECT_MSG(parse_error<MemoryRecord>(raw_memory(0x1000, 0, 1, kRemoteRead)),
               "buffer length 0 (an exported buffer cannot be empty)");
    EXPECT_MSG(parse_error<MemoryRecord>(raw_memory(~0ull - 9, 11, 1, kRemoteRead)),
               "wraps around the address space");
    EXPECT_MSG(parse_error<MemoryRecord>(raw_memory(0x1000, 8, 1, 0x10)),
               "access 0x10 has bits outside gv::Access (0xf)");
    EXPECT_MSG(parse_error<HelloRecord>(raw_hello(kMaxExchangeRecords + 1, 0, 1)),
               "QP record count 65537 exceeds 65536");
    EXPECT_MSG(parse_error<HelloRecord>(raw_hello(0, ~0u, 1)),
               "memory record count 4294967295 exceeds 65536");
    EXPECT_MSG(parse_error<HelloRecord>(raw_hello(0, 0, 4)), "unknown backend code 4");
    EXPECT_MSG(parse_error<HelloRecord>(raw_hello(0, 0, 1, 5)), "reserved byte 9 is 0x5, must be 0");
}

TEST(OobRecord, SerializeRefusesInvalidLocalValues) {
    QpEndpoint e;
    e.qpn = 1u << 24;
    EXPECT_THROW(QpRecord(e).serialize(), InvalidUsage);
    e.qpn = 1, e.backend = Backend::Auto;
    EXPECT_THROW(QpRecord(e).serialize(), InvalidUsage);
    e.backend = Backend::Soft, e.mtu = 1500;
    EXPECT_THROW(QpRecord(e).serialize(), InvalidUsage);
    e.mtu = 4096, e.device = std::string(65, 'x');
    EXPECT_THROW(QpRecord(e).serialize(), InvalidUsage);
    e.device = "ok";
    EXPECT_NO_THROW(QpRecord(e).serialize());
    e.soft.arena_size = 4096;  // an arena without a pid
    EXPECT_THROW(QpRecord(e).serialize(), InvalidUsage);
    e.soft = SoftLocator{};
    EXPECT_THROW(MemoryRecord(RemoteBuffer{0x1000, 0, 1, 0}).serialize(), InvalidUsage);
    EXPECT_THROW(MemoryRecord(RemoteBuffer{0x1000, 8, 1, 1u << 4}).serialize(), InvalidUsage);
    EXPECT_THROW((HelloRecord{Backend::Soft, kMaxExchangeRecords + 1, 0}.serialize()), InvalidUsage);
}

// Thousands of random and mutated buffers: each parser either accepts (and then the record
// re-serializes to the very same bytes) or throws RemoteError. Nothing else, ever.
TEST(OobRecord, FuzzParsersWithRandomAndMutatedBuffers) {
    std::mt19937_64 r(20240611);
    auto valid = [&](int kind) {
        switch (kind) {
            case 0: return QpRecord(random_endpoint(r)).serialize();
            case 1: return MemoryRecord(random_buffer(r)).serialize();
            default: return HelloRecord{Backend::Verbs, uint32_t(r() % 100), uint32_t(r() % 100)}.serialize();
        }
    };
    auto refix_crc = [](std::vector<uint8_t>& b) {
        if (b.size() < 16) return;
        uint32_t c = crc32(b.data(), b.size() - 4);
        for (int i = 0; i < 4; ++i) b[b.size() - 4 + i] = uint8_t(c >> (8 * i));
    };
    size_t accepted[3] = {}, rejected[3] = {};
    for (int it = 0; it < 30000; ++it) {
        std::vector<uint8_t> b;
        int mutation = int(r() % 7);
        if (mutation == 0) {  // pure noise, sometimes behind a valid magic
            b.resize(r() % 128);
            for (auto& c : b) c = uint8_t(r());
            if (b.size() >= 4 && r() % 2) {
                static const uint32_t magics[] = {kQpRecordMagic, kMemoryRecordMagic, kHelloMagic};
                uint32_t m = magics[r() % 3];
                for (int i = 0; i < 4; ++i) b[i] = uint8_t(m >> (8 * i));
            }
        } else {
            b = valid(int(r() % 3));
            switch (mutation) {
                case 1:  // bit flips
                    for (int k = 1 + int(r() % 4); k > 0; --k) b[r() % b.size()] ^= uint8_t(1u << (r() % 8));
                    break;
                case 2:  // truncation
                    b.resize(r() % b.size());
                    break;
                case 3:  // extension
                    for (int k = 1 + int(r() % 40); k > 0; --k) b.push_back(uint8_t(r()));
                    break;
                case 4:  // payload bytes changed, checksum made right again: reaches field checks
                    for (int k = 1 + int(r() % 3); k > 0 && b.size() > 16; --k)
                        b[12 + r() % (b.size() - 16)] = uint8_t(r() % 4 ? r() : 0xFF);
                    refix_crc(b);
                    break;
                case 5:  // header bytes changed, checksum made right again
                    b[4 + r() % 8] = uint8_t(r());
                    refix_crc(b);
                    break;
                case 6:  // length field and size changed together, checksum made right again
                {
                    size_t n = r() % 120;
                    b.resize(12 + n + 4, uint8_t(r()));
                    for (int i = 0; i < 4; ++i) b[8 + i] = uint8_t(n >> (8 * i));
                    refix_crc(b);
                    break;
                }
            }
        }
        for (int kind = 0; kind < 3; ++kind) {
            try {
                std::vector<uint8_t> again;
                if (kind == 0) again = QpRecord(QpRecord::parse(b.data(), b.size())).serialize();
                if (kind == 1) again = MemoryRecord(MemoryRecord::parse(b.data(), b.size())).serialize();
                if (kind == 2) again = HelloRecord::parse(b.data(), b.size()).serialize();
                ++accepted[kind];
                ASSERT_EQ(again, b) << "iteration " << it << ": accepted a record that is not canonical";
            } catch (const RemoteError&) {
                ++rejected[kind];
            } catch (const std::exception& e) {
                FAIL() << "iteration " << it << " parser " << kind << " threw something else: " << e.what();
            }
        }
    }
    // The mutations reached both outcomes for every parser (the test is not vacuous).
    for (int kind = 0; kind < 3; ++kind) {
        EXPECT_GT(accepted[kind], 100u) << "parser " << kind;
        EXPECT_GT(rejected[kind], 10000u) << "parser " << kind;
    }
}

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
    EXPECT_MSG(m, "bad hello: hello record: record version 1, this build reads version 2");
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

// =============================================================================================
// Network namespaces: server and client in two namespaces joined by a veth pair.
// =============================================================================================

namespace {

bool run_quiet(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

struct NetnsPair {
    std::string ns[2], veth[2];
    bool created[2] = {false, false};
    ~NetnsPair() {
        for (int i = 0; i < 2; ++i)
            if (created[i]) run_quiet("ip netns del " + ns[i]);  // takes the veth end with it
        run_quiet("ip link del " + veth[0]);                     // in case it never moved
    }
};

int enter_netns(const std::string& name) {
    int fd = ::open(("/var/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int r = setns(fd, CLONE_NEWNET);
    ::close(fd);
    return r;
}

}  // namespace

TEST(OobNetns, ExchangeAcrossAVethPair) {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
    if (!run_quiet("ip -V")) GTEST_SKIP() << "the ip tool (iproute2) is not installed";
    NetnsPair n;
    const std::string id = std::to_string(getpid());
    n.ns[0] = "gvoob" + id + "s", n.ns[1] = "gvoob" + id + "c";
    n.veth[0] = "gv" + id + "s", n.veth[1] = "gv" + id + "c";  // <= 15 characters
    if (!run_quiet("ip netns add " + n.ns[0]))
        GTEST_SKIP() << "cannot create network namespaces here (ip netns add failed)";
    n.created[0] = true;
    ASSERT_TRUE(run_quiet("ip netns add " + n.ns[1]));
    n.created[1] = true;
    if (!run_quiet("ip link add " + n.veth[0] + " type veth peer name " + n.veth[1]))
        GTEST_SKIP() << "cannot create a veth pair here (ip link add ... type veth failed)";
    const char* addr[2] = {"10.200.0.1/24", "10.200.0.2/24"};
    for (int i = 0; i < 2; ++i) {
        ASSERT_TRUE(run_quiet("ip link set " + n.veth[i] + " netns " + n.ns[i]));
        ASSERT_TRUE(run_quiet("ip -n " + n.ns[i] + " addr add " + addr[i] + " dev " + n.veth[i]));
        ASSERT_TRUE(run_quiet("ip -n " + n.ns[i] + " link set " + n.veth[i] + " up"));
        ASSERT_TRUE(run_quiet("ip -n " + n.ns[i] + " link set lo up"));
    }
    const auto qa = make_qps(41, 64, Backend::Soft), qb = make_qps(42, 64, Backend::Soft);
    const auto ba = make_buffers(43, 4), bb = make_buffers(44, 4);
    pid_t server = spawn([&] {
        if (enter_netns(n.ns[0]) != 0) return 20;
        Listener l = Channel::listen(kDefaultPort, "10.200.0.1");
        Channel c = l.accept(8000);
        if (c.peer().rfind("10.200.0.2:", 0) != 0) return 21;
        Exchanged got = c.exchange(Backend::Soft, qa, ba, 8000);
        return same(got.qps, qb) && same(got.buffers, bb) ? 0 : 22;
    });
    pid_t client = spawn([&] {
        if (enter_netns(n.ns[1]) != 0) return 30;
        // The server is not in this namespace's loopback.
        try {
            Channel::connect("127.0.0.1", kDefaultPort, 100);
            return 31;
        } catch (const TimeoutError&) {
        }
        Channel c = Channel::connect("10.200.0.1", kDefaultPort, 8000);  // retries until it listens
        Exchanged got = c.exchange(Backend::Soft, qb, bb, 8000);
        return same(got.qps, qa) && same(got.buffers, ba) ? 0 : 32;
    });
    ASSERT_GT(server, 0);
    ASSERT_GT(client, 0);
    expect_exit_ok(wait_child(server), "server in its namespace");
    expect_exit_ok(wait_child(client), "client in its namespace");
}
