// The sink: a Provider (port.hpp) with no device under it, for testing the verbs proxy on any
// machine. Every work request the proxy would give ibv_post_send / ibv_post_recv is recorded
// (a deep copy, inline payloads included) and completed successfully at once, as a verbs
// device would complete it (a completion for signaled sends and for every receive). Optional:
//   loopback   connected sink QPs execute what they are given in this process (WRITE, READ,
//              SEND into the peer's next receive, atomics), so the completions and the bytes
//              are those of a real pair, without any key or bounds checks;
//   hold       sends wait (posted, not executed) until released: backpressure tests;
//   fail_*     the n-th send or receive of a QP completes with a chosen status, the QP then
//              goes to ERROR and flushes the rest, as a device does;
//   grants     the depths a QP is granted (tiny ones for backpressure tests).
// Tests reach it through open_sink_context (internal; tests include src/ headers).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "gpuverbs/context.hpp"
#include "verbs/port.hpp"

namespace gv::detail::verbs {

struct SinkOptions {
    uint32_t max_send_wr = 1u << 14;  ///< most send work requests a QP is granted
    uint32_t max_recv_wr = 1u << 14;
    uint32_t max_sge = 16;
    uint32_t max_inline = 1024;
    bool record = true;     ///< keep every work request (records())
    bool loopback = false;  ///< connected sink QPs execute their work between them
};

/// One recorded work request, as the proxy posted it.
struct SinkWr {
    uint32_t qpn = 0;
    bool recv = false;
    uint64_t call = 0;  ///< which ibv_post_send / ibv_post_recv call (a list) brought it
    uint64_t wr_id = 0;
    ibv_wr_opcode opcode = IBV_WR_SEND;  ///< sends
    unsigned send_flags = 0;
    uint32_t imm_data = 0;  ///< wire order, as posted
    uint64_t remote_addr = 0;
    uint32_t rkey = 0;
    uint64_t compare_add = 0;
    uint64_t swap = 0;
    std::vector<ibv_sge> sge;
    std::vector<uint8_t> inline_data;  ///< IBV_SEND_INLINE: the payload, copied when posted
};

class SinkDevice {
public:
    explicit SinkDevice(const SinkOptions& o = {}) : opts_(o) {}
    const SinkOptions& options() const { return opts_; }

    /// Every recorded work request, in posting order (of all QPs, or of one).
    std::vector<SinkWr> records() const;
    std::vector<SinkWr> records(uint32_t qpn) const;
    void clear_records();
    /// Send / receive work requests posted on a QP, and on all.
    uint64_t send_wrs(uint32_t qpn) const;
    uint64_t recv_wrs(uint32_t qpn) const;
    uint64_t total_send_wrs() const;
    /// The most send work requests a QP held at once: posted, and not yet freed by a polled
    /// completion of it or of a later one (what a device's send queue holds).
    uint32_t max_outstanding(uint32_t qpn) const;
    /// The QP's state as the sink sees it.
    QpState state(uint32_t qpn) const;

    /// On: send work requests wait unexecuted (and uncompleted); off: they run.
    void hold(bool on);
    /// The nth (0-based) send / receive work request posted on qpn completes with `status`;
    /// the QP goes to ERROR (what is left flushes).
    void fail_send(uint32_t qpn, uint64_t nth, ibv_wc_status status);
    void fail_recv(uint32_t qpn, uint64_t nth, ibv_wc_status status);

    // ---- for SinkPort ----
    uint32_t create_qp(const QpCaps& caps);
    void destroy_qp(uint32_t qpn);
    int post_send(uint32_t qpn, ibv_send_wr* wr, ibv_send_wr** bad);
    int post_recv(uint32_t qpn, ibv_recv_wr* wr, ibv_recv_wr** bad);
    int poll(uint32_t qpn, int n, ibv_wc* wc);
    void transition(uint32_t qpn, QpState to, uint32_t remote_qpn = 0);
    uint32_t new_key();

private:
    struct Send {
        ibv_send_wr wr;
        std::vector<ibv_sge> sge;
        std::vector<uint8_t> inl;
        uint64_t seq;
    };
    struct Recv {
        uint64_t wr_id;
        std::vector<ibv_sge> sge;
        uint64_t seq;
    };
    struct Wc {
        ibv_wc wc;
        uint64_t seq;  ///< sends: the work request's number (frees the queue up to it)
        bool send;
    };
    struct Qp {
        uint32_t qpn = 0;
        QpState state = QpState::Reset;
        uint32_t peer = 0;
        QpCaps caps;
        std::deque<Send> sq;
        std::deque<Recv> rq;
        std::deque<Wc> cq;
        uint64_t sends = 0, recvs = 0, freed = 0;
        uint32_t max_out = 0;
        std::map<uint64_t, ibv_wc_status> fail_send, fail_recv;
    };

    Qp* find(uint32_t qpn);
    const Qp* find(uint32_t qpn) const;
    void record(uint32_t qpn, const ibv_send_wr& wr);
    void record(uint32_t qpn, const ibv_recv_wr& wr);
    /// Executes the QP's queued sends while it can (not held; a SEND waits for a receive).
    void run(Qp& q);
    enum class Outcome { Done, Failed, Wait };
    /// Runs the send at the queue's head: Done, Failed (its error completion is written; the
    /// QP goes to ERROR), or Wait (a SEND with no receive posted on the peer).
    Outcome execute(Qp& q, Send& s);
    void complete_send(Qp& q, const Send& s, ibv_wc_status st, uint32_t byte_len);
    void complete_recv(Qp& q, uint64_t wr_id, ibv_wc_status st, ibv_wc_opcode op, uint32_t byte_len,
                       uint32_t imm, bool with_imm, uint32_t src_qp);
    void to_error(Qp& q);
    void run_senders_to(uint32_t qpn);

    const SinkOptions opts_;
    mutable std::mutex mu_;
    std::map<uint32_t, Qp> qps_;
    std::vector<SinkWr> rec_;
    uint32_t next_qpn_ = 0x200;
    uint32_t next_key_ = 0x1000;
    uint64_t calls_ = 0;
    bool hold_ = false;
};

/// A Provider over the sink.
std::unique_ptr<Provider> sink_provider(std::shared_ptr<SinkDevice> dev);

/// A verbs context whose proxy posts into the sink (CPU threads post and poll: gpu = -1;
/// on a GPU, its queues are pinned host memory kernels reach).
Context open_sink_context(std::shared_ptr<SinkDevice> dev, const VerbsOptions& options = {}, int gpu = -1);

}  // namespace gv::detail::verbs
