// The two-process protocol of gv_write_bw / gv_read_bw / gv_send_bw / gv_write_lat: the
// messages a benchmark client and server swap over a gv::oob::Channel around the QP and
// buffer exchange (which uses the library's own records). Host code only, no CUDA.
//
// Conversation (C: client, the initiator; S: server, started with only --server):
//   C -> S  Params          what to run; S refuses what it cannot run or what disagrees with
//                           options given on its own command line (Error with the reason)
//   S -> C  Accept | Error  S has set up its side (or says why it could not)
//   C -> S  Accept | Error  C has set up its side
//   both    Channel::exchange (QP endpoints; S's target buffer, C's too for write_lat)
//   per measurement:  C -> S Run(size, iters);  S -> C Ready (S's kernel is running, if any);
//                     C measures, sending Heartbeat about once a second;
//                     C -> S Done(errors);  S -> C Result(errors of S's kernel)
//   C -> S  Bye
// Either side may send Error(text) in place of any control message; the other then fails with
// that text. Every wait is bounded (the client's heartbeats keep a long measurement alive).
//
// Frames, all integers little-endian (small, explicit, versioned records):
//   u32 magic ("GVBP" params, "GVBC" control), u16 version (kWireVersion), u16 zero,
//   u32 payload length (exact), payload.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gpuverbs/errors.hpp"
#include "gpuverbs/oob.hpp"

namespace gvbench {

/// Version 2: Params carries the inline size (in what were reserved bytes).
constexpr uint16_t kWireVersion = 2;
constexpr uint32_t kParamsMagic = 0x50425647;  ///< bytes "GVBP"
constexpr uint32_t kCtlMagic = 0x43425647;     ///< bytes "GVBC"
constexpr size_t kFrameHeader = 12;
constexpr uint32_t kMaxSizes = 64;   ///< message sizes one Params carries (-a gives 23)
constexpr uint32_t kMaxText = 1024;  ///< bytes of an Error's text
constexpr uint32_t kMaxBootId = 64;
constexpr uint32_t kMaxInline = 912;  ///< bytes of an inline WRITE's payload (perftest's bound)

/// What the client asks the server to run. Payload, 32 + 4 * sizes + boot id length bytes:
///   u8 lat (0, 1), u8 op (0 write, 1 read, 2 send), u8 host_mem (0, 1), u8 gpu_init (0, 1),
///   u32 iters (1..1e8), u32 qps (1..4096), u32 threads (1..1024), u32 reps (1..100),
///   u32 duration in us (0..3.6e9), u32 size count (1..kMaxSizes),
///   u8 boot id length (0..kMaxBootId), u8 zero, u16 inline size (0..kMaxInline: messages up
///   to it are posted inline by both sides; CPU initiators only), u32 sizes[count] (each
///   1..8 MiB), boot id bytes (printable ASCII; the client's /proc/sys/kernel/random/boot_id).
struct Params {
    uint8_t lat = 0, op = 0, host_mem = 0, gpu_init = 1;
    uint16_t inline_size = 0;
    uint32_t iters = 0, qps = 0, threads = 0, reps = 0, duration_us = 0;
    std::vector<uint32_t> sizes;
    std::string boot_id;

    std::vector<uint8_t> serialize() const;
    static Params parse(const std::vector<uint8_t>& m);
};

enum class Ctl : uint16_t {
    Accept = 1,
    Error = 2,
    Run = 3,
    Ready = 4,
    Heartbeat = 5,
    Done = 6,
    Result = 7,
    Bye = 8
};

/// A control message. Payload, 12 + text length bytes: u32 a, u32 b, u32 text length
/// (0..kMaxText, nonzero only for Error). Run: a = size, b = iterations; Done and Result:
/// a = failed work requests or waits.
struct CtlMsg {
    Ctl type = Ctl::Accept;
    uint32_t a = 0, b = 0;
    std::string text;

    std::vector<uint8_t> serialize() const;
    static CtlMsg parse(const std::vector<uint8_t>& m);
};

inline const char* ctl_name(Ctl t) {
    switch (t) {
        case Ctl::Accept: return "Accept";
        case Ctl::Error: return "Error";
        case Ctl::Run: return "Run";
        case Ctl::Ready: return "Ready";
        case Ctl::Heartbeat: return "Heartbeat";
        case Ctl::Done: return "Done";
        case Ctl::Result: return "Result";
        case Ctl::Bye: return "Bye";
    }
    return "unknown";
}

namespace wire {

inline void put16(std::vector<uint8_t>& b, uint16_t v) {
    for (int i = 0; i < 2; ++i) b.push_back(uint8_t(v >> (8 * i)));
}
inline void put32(std::vector<uint8_t>& b, uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i)));
}
inline uint32_t get(const uint8_t* p, int bytes) {
    uint32_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint32_t(p[i]) << (8 * i);
    return v;
}
[[noreturn]] inline void bad(const char* what, const std::string& why) {
    throw gv::RemoteError(std::string("gv_bench peer sent a bad ") + what + " message: " + why);
}

/// Starts a frame; finish() patches the payload length.
inline std::vector<uint8_t> begin(uint32_t magic) {
    std::vector<uint8_t> b;
    put32(b, magic);
    put16(b, kWireVersion);
    put16(b, 0);
    put32(b, 0);
    return b;
}
inline std::vector<uint8_t> finish(std::vector<uint8_t> b) {
    uint32_t n = uint32_t(b.size() - kFrameHeader);
    for (int i = 0; i < 4; ++i) b[8 + i] = uint8_t(n >> (8 * i));
    return b;
}

/// Checks a frame's header; returns the payload length.
inline size_t check_frame(const std::vector<uint8_t>& m, uint32_t magic, const char* what) {
    if (m.size() < kFrameHeader) bad(what, std::to_string(m.size()) + " bytes, shorter than a header");
    uint32_t got = get(m.data(), 4);
    if (got != magic) {
        if (got == kParamsMagic || got == kCtlMagic)
            bad(what,
                got == kParamsMagic ? "a parameters message out of turn" : "a control message out of turn");
        bad(what, "magic " + gv::detail::hex(got) + ": not a gv_bench peer");
    }
    uint16_t v = uint16_t(get(m.data() + 4, 2));
    if (v != kWireVersion)
        throw gv::RemoteError("gv_bench peer speaks protocol version " + std::to_string(v) + ", this build " +
                              std::to_string(kWireVersion) + ": run the same build on both sides");
    if (get(m.data() + 6, 2) != 0) bad(what, "nonzero reserved header field");
    size_t n = get(m.data() + 8, 4);
    if (n != m.size() - kFrameHeader)
        bad(what, "payload length " + std::to_string(n) + " but " + std::to_string(m.size() - kFrameHeader) +
                      " bytes follow the header");
    return n;
}

inline bool printable(const std::string& s) {
    for (unsigned char c : s)
        if (c < 0x20 || c > 0x7e) return false;
    return true;
}

}  // namespace wire

inline std::vector<uint8_t> Params::serialize() const {
    using namespace wire;
    GV_REQUIRE(!sizes.empty() && sizes.size() <= kMaxSizes,
               "gv_bench params: 1.." + std::to_string(kMaxSizes) + " sizes");
    GV_REQUIRE(boot_id.size() <= kMaxBootId && printable(boot_id), "gv_bench params: bad boot id");
    std::vector<uint8_t> b = begin(kParamsMagic);
    for (uint8_t v : {lat, op, host_mem, gpu_init}) b.push_back(v);
    for (uint32_t v : {iters, qps, threads, reps, duration_us, uint32_t(sizes.size())}) put32(b, v);
    GV_REQUIRE(inline_size <= kMaxInline, "gv_bench params: inline size above " + std::to_string(kMaxInline));
    b.push_back(uint8_t(boot_id.size()));
    b.push_back(0);
    put16(b, inline_size);
    for (uint32_t s : sizes) put32(b, s);
    b.insert(b.end(), boot_id.begin(), boot_id.end());
    return finish(std::move(b));
}

inline Params Params::parse(const std::vector<uint8_t>& m) {
    using namespace wire;
    const char* what = "parameters";
    size_t n = check_frame(m, kParamsMagic, what);
    if (n < 32) bad(what, "payload of " + std::to_string(n) + " bytes, at least 32 expected");
    const uint8_t* p = m.data() + kFrameHeader;
    Params r;
    r.lat = p[0];
    r.op = p[1];
    r.host_mem = p[2];
    r.gpu_init = p[3];
    r.iters = get(p + 4, 4);
    r.qps = get(p + 8, 4);
    r.threads = get(p + 12, 4);
    r.reps = get(p + 16, 4);
    r.duration_us = get(p + 20, 4);
    uint32_t count = get(p + 24, 4);
    uint32_t idlen = p[28];
    r.inline_size = uint16_t(get(p + 30, 2));
    auto range = [&](const char* field, uint64_t v, uint64_t lo, uint64_t hi) {
        if (v < lo || v > hi)
            bad(what, std::string(field) + " " + std::to_string(v) + " outside " + std::to_string(lo) + ".." +
                          std::to_string(hi));
    };
    range("lat", r.lat, 0, 1);
    range("op", r.op, 0, 2);
    range("host_mem", r.host_mem, 0, 1);
    range("gpu_init", r.gpu_init, 0, 1);
    range("iters", r.iters, 1, 100000000);
    range("qps", r.qps, 1, 4096);
    range("threads", r.threads, 1, 1024);
    range("reps", r.reps, 1, 100);
    range("duration_us", r.duration_us, 0, 3600000000ull);
    range("size count", count, 1, kMaxSizes);
    range("boot id length", idlen, 0, kMaxBootId);
    range("inline size", r.inline_size, 0, kMaxInline);
    if (p[29]) bad(what, "nonzero reserved byte");
    if (n != 32 + 4ull * count + idlen)
        bad(what, "payload of " + std::to_string(n) + " bytes, " + std::to_string(32 + 4ull * count + idlen) +
                      " expected for " + std::to_string(count) + " sizes");
    for (uint32_t i = 0; i < count; ++i) {
        r.sizes.push_back(get(p + 32 + 4 * i, 4));
        range("size", r.sizes.back(), 1, 8u << 20);
    }
    r.boot_id.assign(reinterpret_cast<const char*>(p + 32 + 4 * count), idlen);
    if (!printable(r.boot_id)) bad(what, "boot id not printable ASCII");
    return r;
}

inline std::vector<uint8_t> CtlMsg::serialize() const {
    using namespace wire;
    GV_REQUIRE(
        text.size() <= kMaxText && (type == Ctl::Error || text.empty()),
        "gv_bench control message: text only on Error, at most " + std::to_string(kMaxText) + " bytes");
    std::vector<uint8_t> m = begin(kCtlMagic);
    put16(m, uint16_t(type));
    put16(m, 0);
    put32(m, a);
    put32(m, b);
    put32(m, uint32_t(text.size()));
    m.insert(m.end(), text.begin(), text.end());
    return finish(std::move(m));
}

inline CtlMsg CtlMsg::parse(const std::vector<uint8_t>& m) {
    using namespace wire;
    const char* what = "control";
    size_t n = check_frame(m, kCtlMagic, what);
    if (n < 16) bad(what, "payload of " + std::to_string(n) + " bytes, at least 16 expected");
    const uint8_t* p = m.data() + kFrameHeader;
    CtlMsg r;
    uint32_t type = get(p, 2);
    if (type < uint32_t(Ctl::Accept) || type > uint32_t(Ctl::Bye)) bad(what, "type " + std::to_string(type));
    r.type = Ctl(type);
    if (get(p + 2, 2) != 0) bad(what, "nonzero reserved bytes");
    r.a = get(p + 4, 4);
    r.b = get(p + 8, 4);
    uint32_t len = get(p + 12, 4);
    if (len > kMaxText || (len && r.type != Ctl::Error))
        bad(what, std::string(ctl_name(r.type)) + " with " + std::to_string(len) + " bytes of text");
    if (n != 16 + size_t(len))
        bad(what, "payload of " + std::to_string(n) + " bytes, " + std::to_string(16 + len) + " expected");
    r.text.assign(reinterpret_cast<const char*>(p + 16), len);
    for (char& c : r.text)  // the text is printed: keep it one line of printable ASCII
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
    return r;
}

// ---- talking over the channel -----------------------------------------------------------------

/// The peer's side in messages ("server" or "client").
struct Peer {
    gv::oob::Channel& ch;
    const char* name;
    int timeout_ms;

    void send(Ctl t, uint32_t a = 0, uint32_t b = 0) {
        ch.send_message(CtlMsg{t, a, b, {}}.serialize(), timeout_ms);
    }

    /// Receives the next control message other than Heartbeat (each heartbeat restarts the
    /// timeout). An Error from the peer throws RemoteError carrying its text; any type other
    /// than `want` (and `also`, when given) throws RemoteError naming both.
    CtlMsg expect(Ctl want, Ctl also = Ctl::Heartbeat) {
        for (;;) {
            CtlMsg m;
            try {
                m = CtlMsg::parse(ch.recv_message(timeout_ms));
            } catch (const gv::TimeoutError&) {
                char secs[32];
                std::snprintf(secs, sizeof secs, "%g", timeout_ms / 1000.0);
                throw gv::TimeoutError(std::string("no word from the ") + name + " for " + secs +
                                       " s (waiting for " + ctl_name(want) + "; --timeout sets the limit)");
            } catch (const gv::RemoteError& e) {
                throw gv::RemoteError(std::string("the ") + name +
                                      " went away or broke the protocol (waiting for " + ctl_name(want) +
                                      "): " + e.what());
            }
            if (m.type == Ctl::Heartbeat) continue;
            if (m.type == Ctl::Error) throw gv::RemoteError(std::string(name) + ": " + m.text);
            if (m.type != want && m.type != also)
                throw gv::RemoteError(std::string("the ") + name + " sent " + ctl_name(m.type) + " where " +
                                      ctl_name(want) + " was expected");
            return m;
        }
    }

    /// After a local failure: tells the peer why (best effort) and gives it a moment to read
    /// it before our socket closes (waits, bounded, for the peer to close or answer).
    void fail(const std::string& why) noexcept {
        try {
            if (!ch.is_open()) return;
            ch.send_message(CtlMsg{Ctl::Error, 0, 0, why.substr(0, kMaxText)}.serialize(), 1000);
            ch.recv_message(2000);
        } catch (...) {
        }
    }
};

/// This boot's id (/proc/sys/kernel/random/boot_id): processes that see the same id run on
/// the same host, the only peers the software device reaches. Empty when unreadable.
inline std::string boot_id() {
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::string s;
    std::getline(f, s);
    return s.size() <= kMaxBootId && wire::printable(s) ? s : std::string();
}

}  // namespace gvbench
