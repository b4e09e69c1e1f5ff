// RC queue pair (RAII) with plain verbs: creation with capabilities validated against the
// device, and RESET -> INIT -> RTR -> RTS from the attributes the out-of-band records carry
// (gv::QpEndpoint, gv::InitAttr, gv::RtrAttr, gv::RtsAttr of gpuverbs/queue_pair.hpp).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

#include "gpuverbs/queue_pair.hpp"
#include "verbs/addressing.hpp"
#include "verbs/device.hpp"

namespace gv::detail::verbs {

class Pd;
class Cq;

struct QpConfig {
    uint32_t sq_depth = 256;     ///< 1..max_qp_wr
    uint32_t rq_depth = 256;     ///< 1..max_qp_wr
    uint32_t max_send_sge = 1;   ///< 1..max_sge
    uint32_t max_recv_sge = 1;   ///< 1..max_sge
    uint32_t max_inline = 64;    ///< bytes; the provider refuses what it cannot do (VerbsError)
    uint8_t port = 1;            ///< 1..phys_port_cnt
    int gid_index = -1;          ///< source GID; < 0: choose_gid()'s default (RoCE v2, IPv4)
    uint8_t hop_limit = 64;      ///< RoCE (GRH) only
    uint8_t traffic_class = 0;   ///< RoCE (GRH) only
    bool sq_sig_all = false;     ///< every send WR completes (else only IBV_SEND_SIGNALED ones)
};

/// The capabilities asked of ibv_create_qp (and, after it, what the QP got).
struct QpCaps {
    uint32_t sq_depth = 0, rq_depth = 0, max_send_sge = 0, max_recv_sge = 0, max_inline = 0;
};
/// Checks a QpConfig's queue sizes against the device: InvalidUsage naming the field, the value
/// and the device's limit. Pure.
QpCaps check_qp_caps(const QpConfig& c, const DeviceCaps& d);

/// Where the local side of a connection is: the port, its link layer and the chosen source GID.
struct LocalPath {
    uint8_t port = 1;
    LinkLayer link = LinkLayer::Ethernet;
    GidEntry sgid;
    uint16_t lid = 0;           ///< InfiniBand
    uint32_t active_mtu = 4096; ///< bytes
    uint8_t hop_limit = 64;
    uint8_t traffic_class = 0;
};

/// The ibv_modify_qp attributes and mask of one transition, checked (InvalidUsage naming the
/// field, its value and the range expected) and clamped where the device allows less (the RDMA
/// READ/atomic depths to the device's limits, the path MTU to the local port's active MTU).
/// RoCE (Ethernet): a GRH address vector (dgid required, sgid index, hop limit, traffic class);
/// InfiniBand: a LID address vector (dlid required). Pure.
struct Transition {
    ibv_qp_attr attr{};
    int mask = 0;
};
Transition init_transition(const InitAttr& a, const LocalPath& p);
Transition rtr_transition(const RtrAttr& a, const LocalPath& p, const DeviceCaps& d);
Transition rts_transition(const RtsAttr& a, const DeviceCaps& d);
/// "STATE|AV|PATH_MTU" for an attribute mask.
std::string qp_attr_mask_names(int mask);
const char* qp_state_name(ibv_qp_state s);

class RcQp {
public:
    /// Creates the RC QP on dev (pd, CQs of dev) and chooses its source GID (config.gid_index,
    /// validated) on config.port. InvalidUsage for sizes beyond the device's limits, a bad port or
    /// GID index; VerbsError when ibv_create_qp fails (its errno, what was asked, the limits).
    RcQp(const Device& dev, const Pd& pd, const Cq& send_cq, const Cq& recv_cq, const QpConfig& config = {});
    ~RcQp();
    RcQp(RcQp&&) noexcept;
    RcQp& operator=(RcQp&&) noexcept;
    RcQp(const RcQp&) = delete;
    RcQp& operator=(const RcQp&) = delete;

    ibv_qp* get() const { return qp_; }
    uint32_t qpn() const { return qp_ ? qp_->qp_num : 0; }
    /// What the QP got (the provider may round sizes up).
    const QpCaps& caps() const { return caps_; }
    const LocalPath& path() const { return path_; }
    /// The first send PSN this QP uses in connect() (random, 24 bits).
    uint32_t psn() const { return psn_; }
    /// The QP's state (ibv_query_qp).
    ibv_qp_state state() const;

    /// What the peer needs: backend Verbs, qpn, psn, lid, the chosen GID, the port's active
    /// MTU and the device name.
    QpEndpoint endpoint() const;

    void to_init(const InitAttr& a = {});
    void to_rtr(const RtrAttr& a);
    void to_rts(const RtsAttr& a = {});
    void to_error();
    void reset();
    /// INIT -> RTR -> RTS against a peer's endpoint: remote_qpn, rq_psn, dlid and dgid come from
    /// `peer`, the path MTU is the smaller of both ports' (and rtr.path_mtu), sq_psn is psn().
    void connect(const QpEndpoint& peer, const InitAttr& init = {}, RtrAttr rtr = {}, RtsAttr rts = {});

private:
    void modify(const Transition& t, const char* what);

    ibv_qp* qp_ = nullptr;
    std::string dev_name_;
    DeviceCaps dev_caps_;
    QpCaps caps_;
    LocalPath path_;
    uint32_t psn_ = 0;
};

}  // namespace gv::detail::verbs
