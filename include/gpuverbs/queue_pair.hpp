// QueuePair: a reliable-connection (RC) QP with the verbs state machine
// RESET -> INIT -> RTR -> RTS (-> SQD) -> ERROR, whose queues kernels drive directly.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>

#include "gpuverbs/completion_queue.hpp"
#include "gpuverbs/memory_region.hpp"

namespace gv {

struct QpOptions {
    CompletionQueue* send_cq = nullptr;  ///< required
    CompletionQueue* recv_cq = nullptr;  ///< required
    uint32_t sq_depth = 256;    ///< WQEs of max_send_sge entries (or max_inline bytes)
    uint32_t rq_depth = 256;    ///< receive WQEs
    uint32_t max_send_sge = 1;  ///< 1..8
    uint32_t max_recv_sge = 1;  ///< 1..8
    uint32_t max_inline = 64;   ///< bytes of inline payload per WQE, <= 972 on the software device
    MemoryKind memory = MemoryKind::Default;
};

/// The backend-specific part of an endpoint: bytes that only the backend that made them
/// reads (the software device puts there where a QP of another process lives; the other
/// backends need nothing beyond the common fields). Copied as they are by connect() into
/// RtrAttr::remote_extra and by the out-of-band records, which check them with the rules
/// of the endpoint's backend.
struct EndpointExtra {
    static constexpr size_t kMaxBytes = 48;
    uint8_t size = 0;  ///< bytes used, 0..kMaxBytes (0: nothing backend-specific)
    std::array<uint8_t, kMaxBytes> bytes{};
    bool operator==(const EndpointExtra& o) const {
        if (size != o.size) return false;
        for (size_t i = 0; i < size; ++i)
            if (bytes[i] != o.bytes[i]) return false;
        return true;
    }
    bool operator!=(const EndpointExtra& o) const { return !(*this == o); }
};

/// What a peer needs to connect to a QP (exchanged out of band).
struct QpEndpoint {
    Backend backend = Backend::Soft;
    uint32_t qpn = 0;
    uint32_t psn = 0;
    uint16_t lid = 0;              ///< InfiniBand port LID (0 on RoCE and the software device)
    std::array<uint8_t, 16> gid{};  ///< port GID (RoCE: the address; IB: subnet prefix + GUID)
    uint32_t mtu = 4096;
    std::string device;  ///< device name, to tell peers on other devices apart
    EndpointExtra extra;  ///< backend-specific part (see EndpointExtra)
};

struct InitAttr {
    uint32_t access = kRemoteWrite | kRemoteRead | kRemoteAtomic;  ///< what peers may do here
    uint8_t port = 1;
};

struct RtrAttr {
    uint32_t remote_qpn = 0;
    uint32_t rq_psn = 0;         ///< 24 bits
    uint32_t path_mtu = 4096;    ///< 256, 512, 1024, 2048 or 4096
    /// RDMA READs and atomics the peer may have in flight here: 0..16 on the software device;
    /// 0..255 on verbs and mlx5, lowered to the device's limit (max_qp_rd_atom).
    uint32_t max_dest_rd_atomic = 16;
    uint32_t min_rnr_timer = 12;  ///< 0..31, IB encoding (12 = 0.64 ms)
    uint16_t dlid = 0;
    std::array<uint8_t, 16> dgid{};
    /// The peer endpoint's backend-specific part (QpEndpoint::extra; connect() copies it).
    /// Software device: names the peer's process and where its QP lives, so a peer in
    /// another process can be reached; empty, the peer is found by remote_qpn on this
    /// process's device.
    EndpointExtra remote_extra{};
};

struct RtsAttr {
    uint32_t sq_psn = 0;      ///< 24 bits
    uint32_t timeout = 14;    ///< 0..31 (4.096 us * 2^timeout)
    uint32_t retry_cnt = 7;   ///< 0..7
    uint32_t rnr_retry = 7;   ///< 0..7, 7 = forever
    /// RDMA READs and atomics this QP may have in flight: 0..16 on the software device; 0..255
    /// on verbs and mlx5, lowered to the device's limit (max_qp_init_rd_atom).
    uint32_t max_rd_atomic = 16;
};

class QueuePair {
public:
    QueuePair(const ProtectionDomain& pd, const QpOptions& options);
    /// Destroys the QP: its unpolled completions are removed from its CQs (nobody may poll
    /// them meanwhile), and a connected peer's later work fails with TRANSPORT_RETRY_EXC_ERR.
    ~QueuePair();
    QueuePair(QueuePair&&) noexcept;
    QueuePair& operator=(QueuePair&&) noexcept;

    uint32_t qpn() const;
    QpState state() const;
    /// Syndrome that moved the QP to ERROR (0 when the user moved it there or it is not).
    uint8_t error_syndrome() const;

    void to_init(const InitAttr& attr = {});
    void to_rtr(const RtrAttr& attr);
    void to_rts(const RtsAttr& attr = {});
    /// Moves to ERROR: outstanding work completes with WR_FLUSH_ERR.
    /// Peer in another process: nothing tells the software device that the peer died (its
    /// queues stay mapped here and simply stop moving). When the application learns it, e.g.
    /// the oob::Channel to the peer closes or a bounded wait times out, it calls to_error()
    /// on every QP connected to that peer: posted receives and sends then flush.
    void to_error();
    /// Back to RESET: queues emptied, counters cleared, and this QP's unpolled completions
    /// removed from its CQs (as libmlx5 does); nobody may poll those CQs meanwhile.
    void reset();

    QpEndpoint endpoint() const;
    /// INIT -> RTR -> RTS against a peer's endpoint, with default attributes: the peer's QPN,
    /// PSN (as rq_psn), LID and GID, the smaller MTU, and this QP's own endpoint PSN as
    /// sq_psn (the one the peer took as its rq_psn; rts.sq_psn is ignored).
    void connect(const QpEndpoint& peer, const InitAttr& init = {}, RtrAttr rtr = {},
                 const RtsAttr& rts = {});

    using DeviceHandle = dev::QpHandle;
    /// Handle for kernels and CPU threads. Keep the QueuePair alive while it is used.
    DeviceHandle device_handle() const;

    /// The options the QP was created with (the CQ pointers are those given then; they
    /// dangle if those CompletionQueue objects were moved or destroyed since).
    const QpOptions& options() const;

    struct Impl;
    Impl* impl() const { return impl_.get(); }

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace gv
