#include "verbs/qp.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <sstream>
#include <utility>

#include "gpuverbs/errors.hpp"
#include "verbs/cq.hpp"
#include "verbs/memory.hpp"

namespace gv::detail::verbs {

RcQp::RcQp(const Device& dev, const Pd& pd, const Cq& send_cq, const Cq& recv_cq, const QpConfig& config)
    : dev_name_(dev.name()), dev_caps_(dev.caps()) {
    if (!dev.get() || !pd.get() || !send_cq.get() || !recv_cq.get())
        throw InvalidUsage("verbs::RcQp on a moved-from Device, Pd or Cq");
    QpCaps want;
    try {
        want = check_qp_caps(config, dev.caps());
    } catch (const InvalidUsage& e) {
        throw InvalidUsage("RC QP on " + dev.name() + ": " + e.what());
    }
    PortInfo port = dev.port(config.port);
    path_.port = config.port;
    path_.link = port.link_layer;
    path_.lid = port.lid;
    path_.active_mtu = port.active_mtu;
    path_.hop_limit = config.hop_limit;
    path_.traffic_class = config.traffic_class;
    path_.sgid = dev.choose_gid(config.port, config.gid_index);

    ibv_qp_init_attr ia{};
    ia.send_cq = send_cq.get();
    ia.recv_cq = recv_cq.get();
    ia.qp_type = IBV_QPT_RC;
    ia.sq_sig_all = config.sq_sig_all ? 1 : 0;
    ia.cap.max_send_wr = want.sq_depth;
    ia.cap.max_recv_wr = want.rq_depth;
    ia.cap.max_send_sge = want.max_send_sge;
    ia.cap.max_recv_sge = want.max_recv_sge;
    ia.cap.max_inline_data = want.max_inline;
    errno = 0;
    qp_ = ibv_create_qp(pd.get(), &ia);
    if (!qp_) {
        int e = errno ? errno : EINVAL;
        std::ostringstream s;
        s << "ibv_create_qp(" << dev.name() << ", RC, send depth " << want.sq_depth << ", recv depth "
          << want.rq_depth << ", send sge " << want.max_send_sge << ", recv sge " << want.max_recv_sge
          << ", max_inline " << want.max_inline << ") failed: " << errno_text(e)
          << "; the device allows max_qp_wr " << dev.caps().max_qp_wr << ", max_sge " << dev.caps().max_sge
          << (want.max_inline ? " (and an inline size the provider supports: try a smaller max_inline)" : "");
        throw VerbsError(s.str(), e);
    }
    caps_ = QpCaps{ia.cap.max_send_wr, ia.cap.max_recv_wr, ia.cap.max_send_sge, ia.cap.max_recv_sge,
                   ia.cap.max_inline_data};
    std::random_device rd;
    psn_ = rd() & 0xffffff;
}

RcQp::~RcQp() {
    if (qp_) ibv_destroy_qp(qp_);
}

RcQp::RcQp(RcQp&& o) noexcept
    : qp_(std::exchange(o.qp_, nullptr)), dev_name_(std::move(o.dev_name_)), dev_caps_(o.dev_caps_),
      caps_(o.caps_), path_(o.path_), psn_(o.psn_) {}

RcQp& RcQp::operator=(RcQp&& o) noexcept {
    if (this != &o) {
        if (qp_) ibv_destroy_qp(qp_);
        qp_ = std::exchange(o.qp_, nullptr);
        dev_name_ = std::move(o.dev_name_);
        dev_caps_ = o.dev_caps_;
        caps_ = o.caps_;
        path_ = o.path_;
        psn_ = o.psn_;
    }
    return *this;
}

ibv_qp_state RcQp::state() const {
    if (!qp_) throw InvalidUsage("verbs::RcQp used after it was moved from");
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    if (int e = ibv_query_qp(qp_, &a, IBV_QP_STATE, &ia))
        throw VerbsError("ibv_query_qp(" + dev_name_ + " QP " + hex(qpn()) + ") failed: " + errno_text(e), e);
    return a.qp_state;
}

QpEndpoint RcQp::endpoint() const {
    QpEndpoint e;
    e.backend = Backend::Verbs;
    e.qpn = qpn();
    e.psn = psn_;
    e.lid = path_.lid;
    e.gid = path_.sgid.gid;
    e.mtu = path_.active_mtu ? path_.active_mtu : 1024;
    e.device = dev_name_;
    return e;
}

void RcQp::modify(const Transition& t, const char* what) {
    if (!qp_) throw InvalidUsage("verbs::RcQp used after it was moved from");
    ibv_qp_attr a = t.attr;
    int e = ibv_modify_qp(qp_, &a, t.mask);
    if (e == 0) return;
    if (e < 0) e = -e;  // some providers return -errno
    std::string now;
    try {
        now = qp_state_name(state());
    } catch (const Error&) {
        now = "unknown";
    }
    std::ostringstream s;
    s << "ibv_modify_qp(" << dev_name_ << " QP " << hex(qpn()) << ", " << what << ") failed: " << errno_text(e)
      << "; attribute mask " << hex(uint32_t(t.mask)) << " (" << qp_attr_mask_names(t.mask) << "); QP is in "
      << now;
    if (t.attr.qp_state == IBV_QPS_RTR) {
        s << "; dest QPN " << hex(t.attr.dest_qp_num) << ", rq_psn " << hex(t.attr.rq_psn) << ", path MTU "
          << mtu_to_bytes(t.attr.path_mtu) << ", port " << int(t.attr.ah_attr.port_num);
        if (t.attr.ah_attr.is_global) {
            Gid dg;
            std::memcpy(dg.data(), t.attr.ah_attr.grh.dgid.raw, 16);
            s << ", dgid " << gid_to_string(dg) << ", sgid index " << int(t.attr.ah_attr.grh.sgid_index) << " ("
              << gid_to_string(path_.sgid.gid) << ", " << gid_type_name(path_.sgid.type) << "), hop limit "
              << int(t.attr.ah_attr.grh.hop_limit);
        } else {
            s << ", dlid " << t.attr.ah_attr.dlid;
        }
        s << "; expected the QP in INIT and a peer GID reachable from the source GID's netdev";
    } else if (t.attr.qp_state == IBV_QPS_RTS) {
        s << "; expected the QP in RTR";
    } else if (t.attr.qp_state == IBV_QPS_INIT) {
        s << "; expected the QP in RESET";
    }
    throw VerbsError(s.str(), e);
}

void RcQp::to_init(const InitAttr& a) {
    InitAttr x = a;
    if (x.port == 1 && path_.port != 1) x.port = path_.port;  // default follows the QP's port
    modify(init_transition(x, path_), "RESET -> INIT");
}

void RcQp::to_rtr(const RtrAttr& a) { modify(rtr_transition(a, path_, dev_caps_), "INIT -> RTR"); }

void RcQp::to_rts(const RtsAttr& a) { modify(rts_transition(a, dev_caps_), "RTR -> RTS"); }

void RcQp::to_error() {
    Transition t;
    t.attr.qp_state = IBV_QPS_ERR;
    t.mask = IBV_QP_STATE;
    modify(t, "-> ERROR");
}

void RcQp::reset() {
    Transition t;
    t.attr.qp_state = IBV_QPS_RESET;
    t.mask = IBV_QP_STATE;
    modify(t, "-> RESET");
}

void RcQp::connect(const QpEndpoint& peer, const InitAttr& init, RtrAttr rtr, RtsAttr rts) {
    if (peer.backend != Backend::Verbs)
        throw InvalidUsage(std::string("connect: the peer's endpoint is of backend ") + backend_name(peer.backend) +
                           ", expected verbs");
    rtr.remote_qpn = peer.qpn;
    rtr.rq_psn = peer.psn;
    rtr.dlid = peer.lid;
    rtr.dgid = peer.gid;
    if (mtu_bytes_valid(peer.mtu)) rtr.path_mtu = std::min(rtr.path_mtu, peer.mtu);
    rts.sq_psn = psn_;
    to_init(init);
    to_rtr(rtr);
    to_rts(rts);
}

}  // namespace gv::detail::verbs
