// Out-of-band exchange (step 2 of an RDMA application): connection records that serialize
// themselves, and a TCP channel that swaps them between two peers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpuverbs/context.hpp"
#include "gpuverbs/errors.hpp"
#include "gpuverbs/memory_region.hpp"
#include "gpuverbs/queue_pair.hpp"

namespace gv::oob {

// ---------------------------------------------------------------------------------------------
// Records
//
// Every record has the same frame, all integers little-endian:
//
//   offset 0   u32 magic            one per record type ("GVQP", "GVMR", "GVHI" as bytes)
//   offset 4   u16 version          kRecordVersion
//   offset 6   u16 type             RecordType, must agree with the magic
//   offset 8   u32 payload length   exact for fixed-size records, bounded for the QP record
//   offset 12  payload              the record's fields in fixed order (see each record)
//   end - 4    u32 CRC-32           IEEE 802.3 CRC-32 of every byte before it
//
// parse() accepts exactly one record and nothing else: it throws gv::RemoteError, saying what
// is wrong, for a wrong magic, an unsupported version, a type that disagrees with the magic,
// a truncated or over-long buffer, a bad checksum, a nonzero reserved byte or a field out of
// range. A record that parses re-serializes to the very same bytes. serialize() checks the
// same field rules and throws gv::InvalidUsage when the local values break them.
// ---------------------------------------------------------------------------------------------

/// Version of the record format this build writes and reads.
/// Version 2: the QP record carries a software-device locator (gv::SoftLocator).
constexpr uint16_t kRecordVersion = 3;
constexpr uint32_t kQpRecordMagic = 0x50515647;      ///< bytes "GVQP"
constexpr uint32_t kMemoryRecordMagic = 0x524d5647;  ///< bytes "GVMR"
constexpr uint32_t kHelloMagic = 0x49485647;         ///< bytes "GVHI"
constexpr size_t kRecordHeaderBytes = 12;
constexpr size_t kRecordTrailerBytes = 4;
/// Longest device name a QP record carries (printable ASCII, 0x20..0x7e).
constexpr size_t kMaxDeviceName = 64;
/// Most QP records, and most memory records, one exchange() carries.
constexpr uint32_t kMaxExchangeRecords = 65536;

enum class RecordType : uint16_t { Qp = 1, Memory = 2, Hello = 3 };
const char* record_type_name(RecordType t);

/// IEEE 802.3 CRC-32 (reflected, polynomial 0xEDB88320), the records' checksum.
uint32_t crc32(const uint8_t* data, size_t size);

/// A QP's connection descriptor (gv::QpEndpoint). Payload, 36 + extra + name bytes:
///   u8 backend (1 soft, 2 mlx5, 3 verbs: the values of gv::Backend),
///   u8 device name length (0..64), u8 backend-specific length (0..48), u8 reserved (0),
///   u32 qpn (< 2^24), u32 psn (< 2^24), u32 path MTU (256, 512, 1024, 2048 or 4096),
///   u16 lid, u16 reserved (0), u8 gid[16],
///   the backend-specific bytes (QpEndpoint::extra), checked by the rules of the backend:
///     soft: none, or a locator of a QP in another process (u32 pid, 1..4194304;
///     u32 arena fd (< 2^31), u64 arena base, u64 arena size (0: no arena, then fd, base and
///     QP context are 0; else base and size page-aligned, the range below 2^57), u64 QP
///     context address (8-aligned, inside the arena)), followed in this version by the 16-byte
///     UUID of the device's GPU (zero: CPU threads; 48 bytes in all, docs/two-gpus.md; the
///     32-byte form is still read, as a peer without a GPU identity); mlx5, verbs: none,
///   device name bytes (printable ASCII, no terminator).
struct QpRecord {
    QpEndpoint endpoint;

    QpRecord() = default;
    explicit QpRecord(const QpEndpoint& e) : endpoint(e) {}
    std::vector<uint8_t> serialize() const;
    static QpRecord parse(const uint8_t* data, size_t size);
    static QpRecord parse(const std::vector<uint8_t>& b) { return parse(b.data(), b.size()); }
};

/// An exported memory region (gv::RemoteBuffer). Payload, 24 bytes:
///   u64 addr, u64 length (> 0, addr + length must not wrap), u32 rkey,
///   u32 access (bits of gv::Access only).
struct MemoryRecord {
    RemoteBuffer buffer;

    MemoryRecord() = default;
    explicit MemoryRecord(const RemoteBuffer& b) : buffer(b) {}
    std::vector<uint8_t> serialize() const;
    static MemoryRecord parse(const uint8_t* data, size_t size);
    static MemoryRecord parse(const std::vector<uint8_t>& b) { return parse(b.data(), b.size()); }
};

/// First message of an exchange: who we are and what follows. Payload, 12 bytes:
///   u32 QP record count, u32 memory record count (each <= kMaxExchangeRecords),
///   u8 backend (as in QpRecord), u8 reserved[3] (zero).
struct HelloRecord {
    Backend backend = Backend::Soft;
    uint32_t qp_count = 0;
    uint32_t memory_count = 0;

    std::vector<uint8_t> serialize() const;
    static HelloRecord parse(const uint8_t* data, size_t size);
    static HelloRecord parse(const std::vector<uint8_t>& b) { return parse(b.data(), b.size()); }
};

// ---------------------------------------------------------------------------------------------
// TCP channel
//
// Every channel starts, in each direction, with an 8-byte greeting: the bytes "GVCH", u16
// kChannelVersion, u16 zero. connect() and accept() send ours; the first receive (recv_message,
// recv_record, exchange) reads the peer's before anything else, so a peer that is not a
// gpuverbs channel (an HTTP server, a port scanner, a client sending garbage, an older
// gpuverbs) is told apart at once: RemoteError "the peer at HOST:PORT does not speak the
// gpuverbs exchange protocol: ...", saying what it sent (or that it closed without a word).
// After the greeting, messages are framed as a u32 little-endian length (1..max_message)
// followed by that many bytes. Every operation is bounded by a timeout in milliseconds (a
// negative timeout waits without limit) and fails with a typed exception:
//   gv::TimeoutError  the time ran out (connect, accept, send, receive, exchange);
//   gv::RemoteError   the peer closed or reset the connection ("after N of M bytes"), sent an
//                     empty or oversized frame, a malformed record or a mismatched hello;
//   gv::SystemError   a socket call failed (e.g. "port 18515 already in use");
//   gv::InvalidUsage  the caller broke a rule (oversized message, channel already broken).
// When the framing fails (closed or reset connection, empty or oversized frame, a send error or
// a send that timed out part-way, a failed exchange) the byte stream is out of step and the
// channel is broken: later operations throw InvalidUsage. A receive that times out keeps what
// it got, and the next receive continues the same message; a well-framed message that is not
// a valid record throws RemoteError and leaves the channel usable.
// Writes use MSG_NOSIGNAL: a peer that went away never raises SIGPIPE.
// ---------------------------------------------------------------------------------------------

/// Version of the channel protocol (the greeting and the framing) this build speaks.
/// Version 1: the greeting; builds before it sent none (their first bytes are a frame).
constexpr uint16_t kChannelVersion = 1;
constexpr uint32_t kGreetingMagic = 0x48435647;  ///< bytes "GVCH"
constexpr size_t kGreetingBytes = 8;

constexpr uint16_t kDefaultPort = 18515;
constexpr int kDefaultTimeoutMs = 10000;
/// Default largest message a channel sends or accepts.
constexpr uint32_t kDefaultMaxMessage = 1u << 20;

class Listener;

/// What exchange() received from the peer.
struct Exchanged {
    Backend backend = Backend::Soft;
    std::vector<QpEndpoint> qps;        ///< peer's QP i pairs with our QP i
    std::vector<RemoteBuffer> buffers;  ///< in the order the peer passed them
};

/// One connected TCP stream to a peer (RAII: the socket closes with the object).
class Channel {
public:
    /// Listens on address:port (port 0: the kernel picks one, read it from Listener::port()).
    /// SO_REUSEADDR is set. A port taken by another listener throws SystemError
    /// "port N already in use on ADDRESS".
    static Listener listen(uint16_t port = kDefaultPort, const std::string& address = "127.0.0.1");

    /// Connects to host:port (a name or a numeric IPv4/IPv6 address). A refused or unreachable
    /// server is retried (the server may start later) until timeout_ms has passed, then
    /// TimeoutError names host:port and the last error. on_retry, when given, is called once,
    /// when the first attempt failed and the retries begin (a tool says there what it waits
    /// for). Sends our greeting; the server's is checked by the first receive.
    static Channel connect(const std::string& host, uint16_t port, int timeout_ms = kDefaultTimeoutMs,
                           const std::function<void()>& on_retry = {});

    Channel();  ///< not connected
    ~Channel();
    Channel(Channel&&) noexcept;
    Channel& operator=(Channel&&) noexcept;

    bool is_open() const;
    /// True when the peer closed its end of the connection, reset it, or the socket holds an
    /// error: whether it exited, was killed (the kernel closes its sockets) or called close().
    /// Does not wait (poll with a zero timeout for POLLRDHUP, POLLHUP, POLLERR) and consumes
    /// nothing: a message the peer sent before closing stays receivable, and a peer that is
    /// alive with data pending is not "closed". For a watcher loop beside a running data
    /// path, so a peer that went away ends the run at once rather than after a timeout.
    /// InvalidUsage when the channel is not open (never connected, or closed here).
    bool peer_closed() const;
    /// Peer's numeric address, "host:port".
    std::string peer() const;
    int fd() const;
    /// Closes the socket now (the destructor does the same).
    void close();

    void set_max_message(uint32_t bytes);
    uint32_t max_message() const;

    /// Sends one message (1..max_message bytes) within timeout_ms.
    void send_message(const uint8_t* data, size_t size, int timeout_ms = kDefaultTimeoutMs);
    void send_message(const std::vector<uint8_t>& m, int timeout_ms = kDefaultTimeoutMs) {
        send_message(m.data(), m.size(), timeout_ms);
    }
    /// Receives one message within timeout_ms.
    std::vector<uint8_t> recv_message(int timeout_ms = kDefaultTimeoutMs);

    /// Sends a record (QpRecord, MemoryRecord, HelloRecord) as one message.
    template <class Record>
    void send_record(const Record& r, int timeout_ms = kDefaultTimeoutMs) {
        send_message(r.serialize(), timeout_ms);
    }
    /// Receives one message and parses it as a Record (RemoteError if it is not one).
    template <class Record>
    Record recv_record(int timeout_ms = kDefaultTimeoutMs) {
        std::vector<uint8_t> m = recv_message(timeout_ms);
        return parse_message<Record>(m);
    }

    /// Swaps connection records with the peer, both sides calling it: each sends a hello
    /// (backend and counts), then its QP records, then its memory records, while it receives
    /// the peer's (sending and receiving interleave, so neither side can block the other).
    /// Fails early, on both sides, when the backends differ ("peer uses backend mlx5, we use
    /// soft") or the QP counts differ (QPs connect pairwise). Every QP endpoint must be of
    /// `backend`. The whole exchange completes within timeout_ms.
    Exchanged exchange(Backend backend, const std::vector<QpEndpoint>& qps,
                       const std::vector<RemoteBuffer>& buffers, int timeout_ms = kDefaultTimeoutMs);

    struct Impl;

private:
    friend class Listener;
    explicit Channel(std::unique_ptr<Impl> impl);
    template <class Record>
    Record parse_message(const std::vector<uint8_t>& m);
    [[noreturn]] void bad_record(const std::string& what) const;

    std::unique_ptr<Impl> impl_;
};

/// A listening TCP socket (RAII). Made by Channel::listen.
class Listener {
public:
    Listener();
    ~Listener();
    Listener(Listener&&) noexcept;
    Listener& operator=(Listener&&) noexcept;

    /// The bound port (the one the kernel chose when listen() was given port 0).
    uint16_t port() const;
    const std::string& address() const;
    int fd() const;
    void close();

    /// Waits up to timeout_ms for a client; TimeoutError when none came. Sends our greeting;
    /// the client's is checked by the first receive.
    Channel accept(int timeout_ms = kDefaultTimeoutMs);

    /// A server's first exchange with a new client: runs within budget_ms (the smaller of
    /// accept_client's handshake_ms and the time left), and throws RemoteError or
    /// TimeoutError to reject the client.
    using Handshake = std::function<void(Channel& ch, int budget_ms)>;
    /// Told about each rejected client: its address and why.
    using OnReject = std::function<void(const std::string& peer, const std::string& why)>;

    /// Waits for one good client while surviving bad ones: accepts connections until
    /// `handshake` returns normally for one (that channel is returned), or timeout_ms has
    /// passed in all (a negative timeout: no limit). A client the handshake rejects
    /// (RemoteError: it closed, sent garbage, does not speak the protocol, asked for what
    /// the server cannot do; TimeoutError: it stayed silent past handshake_ms) is passed to
    /// on_reject, its connection closed, and the wait goes on. Any other exception ends the
    /// wait (a local failure is not the client's fault). TimeoutError at the end says how
    /// many clients were rejected and why the last one was.
    Channel accept_client(int timeout_ms, int handshake_ms, const Handshake& handshake,
                          const OnReject& on_reject = {});

    struct Impl;

private:
    friend class Channel;
    explicit Listener(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

template <class Record>
Record Channel::parse_message(const std::vector<uint8_t>& m) {
    try {
        return Record::parse(m.data(), m.size());
    } catch (const RemoteError& e) {
        bad_record(e.what());
    }
}

}  // namespace gv::oob
