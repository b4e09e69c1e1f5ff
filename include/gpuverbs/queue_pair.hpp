// QueuePair: a reliable-connection (RC) QP with the verbs state machine
// RESET -> INIT -> RTR -> RTS (-> SQD) -> ERROR, whose queues kernels drive directly.
#pragma once

#include <array>
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

/// Where a software-device QP lives, for a peer in another process on the same host
/// (docs/cross-process.md). pid 0: not a software device. arena_size 0 (and then fd, base
/// and qp_state 0): the QP cannot be reached from another process (its state, queues or
/// CQs are not in its device's shared arena, e.g. host-memory queues on a GPU device).
struct SoftLocator {
    uint32_t pid = 0;        ///< owning process
    uint32_t arena_fd = 0;   ///< its descriptor of the shared arena (/proc/<pid>/fd/<fd>)
    uint64_t arena_base = 0; ///< the arena's address, the same in every process mapping it
    uint64_t arena_size = 0;
    uint64_t qp_state = 0;   ///< the QP's soft::QpState inside the arena
    bool operator==(const SoftLocator& o) const {
        return pid == o.pid && arena_fd == o.arena_fd && arena_base == o.arena_base &&
               arena_size == o.arena_size && qp_state == o.qp_state;
    }
};

/// What a peer needs to connect to a QP (exchanged out of band).
struct QpEndpoint {
    Backend backend = Backend::Soft;
    uint32_t qpn = 0;
    uint32_t psn = 0;
    uint16_t lid = 0;
    std::array<uint8_t, 16> gid{};
    uint32_t mtu = 4096;
    std::string device;  ///< device name, to tell peers on other devices apart
    SoftLocator soft;    ///< software device: the QP's process and place (see SoftLocator)
};

struct InitAttr {
    uint32_t access = kRemoteWrite | kRemoteRead | kRemoteAtomic;  ///< what peers may do here
    uint8_t port = 1;
};

struct RtrAttr {
    uint32_t remote_qpn = 0;
    uint32_t rq_psn = 0;         ///< 24 bits
    uint32_t path_mtu = 4096;    ///< 256, 512, 1024, 2048 or 4096
    uint32_t max_dest_rd_atomic = 16;  ///< 0..16
    uint32_t min_rnr_timer = 12;  ///< 0..31, IB encoding (12 = 0.64 ms)
    uint16_t dlid = 0;
    std::array<uint8_t, 16> dgid{};
    /// Software device: the peer's locator (QpEndpoint::soft). A pid other than this
    /// process's imports the peer's arena and connects to the QpState it names; pid 0 or
    /// this process: the peer is found by remote_qpn on this process's device.
    SoftLocator remote_soft{};
};

struct RtsAttr {
    uint32_t sq_psn = 0;      ///< 24 bits
    uint32_t timeout = 14;    ///< 0..31 (4.096 us * 2^timeout)
    uint32_t retry_cnt = 7;   ///< 0..7
    uint32_t rnr_retry = 7;   ///< 0..7, 7 = forever
    uint32_t max_rd_atomic = 16;  ///< 0..16
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
    /// INIT -> RTR -> RTS against a peer's endpoint, with default attributes.
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
