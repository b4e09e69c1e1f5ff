// Out-of-band records: framing, CRC-32, the QP, memory and hello records (oob.hpp).
#include "gpuverbs/oob.hpp"
#include "core/backend.hpp"
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
using wire::backend_from_code;
using wire::get16;
using wire::get32;
using wire::get64;

// ---------------------------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------------------------

const char* record_type_name(RecordType t) {
    switch (t) {
        case RecordType::Qp: return "QP record";
        case RecordType::Memory: return "memory record";
        case RecordType::Hello: return "hello record";
    }
    return "unknown record";
}

uint32_t crc32(const uint8_t* data, size_t size) {
    static const auto table = [] {
        std::array<uint32_t, 256> t{};
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[i] = c;
        }
        return t;
    }();
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < size; ++i) c = table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

namespace {

struct Kind {
    uint32_t magic;
    RecordType type;
    size_t min_payload, max_payload;
};
constexpr size_t kQpFixedPayload = 36;
constexpr Kind kQpKind{kQpRecordMagic, RecordType::Qp, kQpFixedPayload,
                       kQpFixedPayload + EndpointExtra::kMaxBytes + kMaxDeviceName};
constexpr Kind kMemoryKind{kMemoryRecordMagic, RecordType::Memory, 24, 24};
constexpr Kind kHelloKind{kHelloMagic, RecordType::Hello, 12, 12};


struct Writer {
    std::vector<uint8_t> b;
    void u8(uint8_t v) { b.push_back(v); }
    void u16(uint16_t v) { u8(uint8_t(v)), u8(uint8_t(v >> 8)); }
    void u32(uint32_t v) { u16(uint16_t(v)), u16(uint16_t(v >> 16)); }
    void u64(uint64_t v) { u32(uint32_t(v)), u32(uint32_t(v >> 32)); }
    void bytes(const void* p, size_t n) {
        auto* c = static_cast<const uint8_t*>(p);
        b.insert(b.end(), c, c + n);
    }
};

const Kind* kind_of_magic(uint32_t magic) {
    for (const Kind* k : {&kQpKind, &kMemoryKind, &kHelloKind})
        if (k->magic == magic) return k;
    return nullptr;
}

std::vector<uint8_t> frame(const Kind& k, const std::vector<uint8_t>& payload) {
    Writer w;
    w.u32(k.magic);
    w.u16(kRecordVersion);
    w.u16(uint16_t(k.type));
    w.u32(uint32_t(payload.size()));
    w.bytes(payload.data(), payload.size());
    w.u32(crc32(w.b.data(), w.b.size()));
    return std::move(w.b);
}

[[noreturn]] void bad(const Kind& k, const std::string& msg) {
    throw RemoteError(std::string(record_type_name(k.type)) + ": " + msg);
}

// Checks the frame around a record and returns its payload.
const uint8_t* unframe(const Kind& k, const uint8_t* d, size_t n, size_t* payload_size) {
    const std::string name = record_type_name(k.type);
    auto short_header = [&] {
        bad(k, "record truncated: " + std::to_string(n) + " bytes, shorter than the " +
                   std::to_string(kRecordHeaderBytes) + "-byte header");
    };
    if (n < 4 || d == nullptr) short_header();
    uint32_t magic = get32(d);
    if (magic != k.magic) {
        if (const Kind* other = kind_of_magic(magic))
            bad(k, std::string("wrong record: got a ") + record_type_name(other->type) + " (magic " +
                       hex(magic) + ") expected " + hex(k.magic));
        bad(k, "not a gpuverbs record: magic " + hex(magic) + " expected " + hex(k.magic));
    }
    if (n < kRecordHeaderBytes) short_header();
    uint16_t version = get16(d + 4);
    if (version != kRecordVersion)
        bad(k, "record version " + std::to_string(version) + ", this build reads version " +
                   std::to_string(kRecordVersion));
    uint16_t type = get16(d + 6);
    if (type != uint16_t(k.type))
        bad(k, "record type " + std::to_string(type) + " disagrees with its magic (type " +
                   std::to_string(uint16_t(k.type)) + ")");
    uint32_t len = get32(d + 8);
    if (len < k.min_payload || len > k.max_payload)
        bad(k, "payload length " + std::to_string(len) + " out of range (" + std::to_string(k.min_payload) +
                   (k.min_payload == k.max_payload ? "" : ".." + std::to_string(k.max_payload)) + " bytes)");
    size_t total = kRecordHeaderBytes + len + kRecordTrailerBytes;
    if (n < total)
        bad(k, "record truncated: " + std::to_string(n) + " bytes, header says " + std::to_string(total));
    if (n > total)
        bad(k, "record oversized: " + std::to_string(n) + " bytes, header says " + std::to_string(total) +
                   " (" + std::to_string(n - total) + " trailing bytes)");
    uint32_t stored = get32(d + total - kRecordTrailerBytes);
    uint32_t computed = crc32(d, total - kRecordTrailerBytes);
    if (stored != computed)
        bad(k, "record checksum mismatch: stored " + hex(stored) + ", computed " + hex(computed));
    *payload_size = len;
    return d + kRecordHeaderBytes;
}

// Field rules shared by serialize() (local bug: InvalidUsage) and parse() (peer: RemoteError).
std::string check_qp(const QpEndpoint& e) {
    if (backend_code(e.backend) == 0)
        return std::string("backend ") + backend_name(e.backend) +
               " is not a concrete backend (soft, mlx5 or verbs)";
    if (e.qpn >= (1u << 24)) return "qpn " + hex(e.qpn) + " out of range (24 bits)";
    if (e.psn >= (1u << 24)) return "psn " + hex(e.psn) + " out of range (24 bits)";
    if (e.mtu != 256 && e.mtu != 512 && e.mtu != 1024 && e.mtu != 2048 && e.mtu != 4096)
        return "path MTU " + std::to_string(e.mtu) + " is not 256, 512, 1024, 2048 or 4096";
    if (e.device.size() > kMaxDeviceName)
        return "device name of " + std::to_string(e.device.size()) + " bytes, longer than " +
               std::to_string(kMaxDeviceName);
    for (size_t i = 0; i < e.device.size(); ++i) {
        auto c = uint8_t(e.device[i]);
        if (c < 0x20 || c > 0x7e)
            return "device name has a non-printable byte " + hex(c) + " at offset " + std::to_string(i);
    }
    return detail::check_endpoint_extra(e.backend, e.extra);
}

std::string check_buffer(const RemoteBuffer& b) {
    if (b.length == 0) return "buffer length 0 (an exported buffer cannot be empty)";
    if (b.addr + (b.length - 1) < b.addr)  // the last byte's address must not wrap
        return "buffer at " + hex(b.addr) + " of " + std::to_string(b.length) +
               " bytes wraps around the address space";
    if (b.access & ~uint32_t(kAllAccess))
        return "access " + hex(b.access) + " has bits outside gv::Access (" + hex(kAllAccess) + ")";
    return {};
}

std::string check_hello(const HelloRecord& h) {
    if (backend_code(h.backend) == 0)
        return std::string("backend ") + backend_name(h.backend) +
               " is not a concrete backend (soft, mlx5 or verbs)";
    if (h.qp_count > kMaxExchangeRecords)
        return "QP record count " + std::to_string(h.qp_count) + " exceeds " +
               std::to_string(kMaxExchangeRecords);
    if (h.memory_count > kMaxExchangeRecords)
        return "memory record count " + std::to_string(h.memory_count) + " exceeds " +
               std::to_string(kMaxExchangeRecords);
    return {};
}

}  // namespace

std::vector<uint8_t> QpRecord::serialize() const {
    std::string err = check_qp(endpoint);
    GV_REQUIRE(err.empty(), "cannot serialize a QP record: " + err);
    Writer w;
    w.u8(backend_code(endpoint.backend));
    w.u8(uint8_t(endpoint.device.size()));
    w.u8(endpoint.extra.size);
    w.u8(0);
    w.u32(endpoint.qpn);
    w.u32(endpoint.psn);
    w.u32(endpoint.mtu);
    w.u16(endpoint.lid);
    w.u16(0);
    w.bytes(endpoint.gid.data(), endpoint.gid.size());
    w.bytes(endpoint.extra.bytes.data(), endpoint.extra.size);
    w.bytes(endpoint.device.data(), endpoint.device.size());
    return frame(kQpKind, w.b);
}

QpRecord QpRecord::parse(const uint8_t* data, size_t size) {
    size_t len = 0;
    const uint8_t* p = unframe(kQpKind, data, size, &len);
    QpRecord r;
    QpEndpoint& e = r.endpoint;
    if (!backend_from_code(p[0], &e.backend)) bad(kQpKind, "unknown backend code " + std::to_string(p[0]));
    const size_t name_len = p[1], extra_len = p[2];
    if (name_len > kMaxDeviceName)
        bad(kQpKind,
            "device name length " + std::to_string(name_len) + " exceeds " + std::to_string(kMaxDeviceName));
    if (extra_len > EndpointExtra::kMaxBytes)
        bad(kQpKind, "backend-specific part of " + std::to_string(extra_len) + " bytes exceeds " +
                         std::to_string(EndpointExtra::kMaxBytes));
    if (p[3] != 0 || get16(p + 18) != 0) bad(kQpKind, "reserved bytes are not zero");
    if (len != kQpFixedPayload + extra_len + name_len)
        bad(kQpKind, "payload length " + std::to_string(len) + " disagrees with the lengths it names (" +
                         std::to_string(kQpFixedPayload) + " + " + std::to_string(extra_len) +
                         " backend-specific + " + std::to_string(name_len) + " name bytes)");
    e.qpn = get32(p + 4);
    e.psn = get32(p + 8);
    e.mtu = get32(p + 12);
    e.lid = get16(p + 16);
    std::memcpy(e.gid.data(), p + 20, 16);
    e.extra.size = uint8_t(extra_len);
    std::memcpy(e.extra.bytes.data(), p + kQpFixedPayload, extra_len);
    e.device.assign(reinterpret_cast<const char*>(p + kQpFixedPayload + extra_len), name_len);
    std::string err = check_qp(e);
    if (!err.empty()) bad(kQpKind, err);
    return r;
}

std::vector<uint8_t> MemoryRecord::serialize() const {
    std::string err = check_buffer(buffer);
    GV_REQUIRE(err.empty(), "cannot serialize a memory record: " + err);
    Writer w;
    w.u64(buffer.addr);
    w.u64(buffer.length);
    w.u32(buffer.rkey);
    w.u32(buffer.access);
    return frame(kMemoryKind, w.b);
}

MemoryRecord MemoryRecord::parse(const uint8_t* data, size_t size) {
    size_t len = 0;
    const uint8_t* p = unframe(kMemoryKind, data, size, &len);
    MemoryRecord r;
    r.buffer.addr = get64(p);
    r.buffer.length = get64(p + 8);
    r.buffer.rkey = get32(p + 16);
    r.buffer.access = get32(p + 20);
    std::string err = check_buffer(r.buffer);
    if (!err.empty()) bad(kMemoryKind, err);
    return r;
}

std::vector<uint8_t> HelloRecord::serialize() const {
    std::string err = check_hello(*this);
    GV_REQUIRE(err.empty(), "cannot serialize a hello record: " + err);
    Writer w;
    w.u32(qp_count);
    w.u32(memory_count);
    w.u8(backend_code(backend));
    w.u8(0), w.u8(0), w.u8(0);
    return frame(kHelloKind, w.b);
}

HelloRecord HelloRecord::parse(const uint8_t* data, size_t size) {
    size_t len = 0;
    const uint8_t* p = unframe(kHelloKind, data, size, &len);
    HelloRecord h;
    h.qp_count = get32(p);
    h.memory_count = get32(p + 4);
    if (!backend_from_code(p[8], &h.backend)) bad(kHelloKind, "unknown backend code " + std::to_string(p[8]));
    for (int i = 9; i < 12; ++i)
        if (p[i] != 0)
            bad(kHelloKind, "reserved byte " + std::to_string(i) + " is " + hex(p[i]) + ", must be 0");
    std::string err = check_hello(h);
    if (!err.empty()) bad(kHelloKind, err);
    return h;
}

}  // namespace gv::oob
