// The pure parts of the RC QP: capability checks and the attributes of each transition.
#include <algorithm>
#include <cstring>

#include "gpuverbs/errors.hpp"
#include "verbs/qp.hpp"

namespace gv::detail::verbs {

namespace {

void need(bool ok, const std::string& field, uint64_t value, const std::string& expected) {
    if (!ok) throw InvalidUsage(field + " = " + std::to_string(value) + ": expected " + expected);
}

}  // namespace

QpCaps check_qp_caps(const QpConfig& c, const DeviceCaps& d) {
    auto within = [&](const char* field, uint32_t v, uint32_t max, const char* limit) {
        need(v >= 1 && v <= max, field, v,
             "1.." + std::to_string(max) + " (the device's " + limit + ")");
    };
    within("send queue depth (sq_depth)", c.sq_depth, d.max_qp_wr, "max_qp_wr");
    within("receive queue depth (rq_depth)", c.rq_depth, d.max_qp_wr, "max_qp_wr");
    within("max_send_sge", c.max_send_sge, d.max_sge, "max_sge");
    within("max_recv_sge", c.max_recv_sge, d.max_sge, "max_sge");
    need(c.max_inline <= 65536, "max_inline", c.max_inline, "0..65536 bytes (and what the provider allows)");
    need(d.phys_port_cnt == 0 || (c.port >= 1 && c.port <= d.phys_port_cnt), "port", c.port,
         "1.." + std::to_string(d.phys_port_cnt));
    return QpCaps{c.sq_depth, c.rq_depth, c.max_send_sge, c.max_recv_sge, c.max_inline};
}

Transition init_transition(const InitAttr& a, const LocalPath& p) {
    const uint32_t known = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                           IBV_ACCESS_LOCAL_WRITE;
    need((a.access & ~known) == 0, "InitAttr::access", a.access, "bits of remote write, read, atomic");
    need(a.port == p.port, "InitAttr::port", a.port,
         "the port the QP was created for (" + std::to_string(p.port) + ")");
    Transition t;
    t.attr.qp_state = IBV_QPS_INIT;
    t.attr.pkey_index = 0;
    t.attr.port_num = p.port;
    t.attr.qp_access_flags = a.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
    t.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    return t;
}

Transition rtr_transition(const RtrAttr& a, const LocalPath& p, const DeviceCaps& d) {
    need(a.remote_qpn < (1u << 24) && a.remote_qpn != 0, "RtrAttr::remote_qpn", a.remote_qpn, "1..2^24-1");
    need(a.rq_psn < (1u << 24), "RtrAttr::rq_psn", a.rq_psn, "0..2^24-1");
    need(mtu_bytes_valid(a.path_mtu), "RtrAttr::path_mtu", a.path_mtu, "256, 512, 1024, 2048 or 4096");
    need(a.min_rnr_timer <= 31, "RtrAttr::min_rnr_timer", a.min_rnr_timer, "0..31");
    need(a.max_dest_rd_atomic <= 255, "RtrAttr::max_dest_rd_atomic", a.max_dest_rd_atomic, "0..255");
    Transition t;
    ibv_qp_attr& q = t.attr;
    q.qp_state = IBV_QPS_RTR;
    uint32_t mtu = a.path_mtu;
    if (mtu_bytes_valid(p.active_mtu)) mtu = std::min(mtu, p.active_mtu);
    q.path_mtu = mtu_from_bytes(mtu);
    q.dest_qp_num = a.remote_qpn;
    q.rq_psn = a.rq_psn;
    q.max_dest_rd_atomic = uint8_t(std::min(a.max_dest_rd_atomic, d.max_qp_rd_atom));
    q.min_rnr_timer = uint8_t(a.min_rnr_timer);
    q.ah_attr.port_num = p.port;
    q.ah_attr.sl = 0;
    q.ah_attr.src_path_bits = 0;
    if (p.link == LinkLayer::InfiniBand) {
        need(a.dlid != 0, "RtrAttr::dlid", a.dlid, "the peer's LID (nonzero) on an InfiniBand port");
        q.ah_attr.dlid = a.dlid;
        q.ah_attr.is_global = 0;
    } else {
        if (gid_is_zero(a.dgid))
            throw InvalidUsage("RtrAttr::dgid is zero: expected the peer's GID (RoCE addresses peers by GID)");
        q.ah_attr.dlid = a.dlid;
        q.ah_attr.is_global = 1;
        std::memcpy(q.ah_attr.grh.dgid.raw, a.dgid.data(), 16);
        q.ah_attr.grh.sgid_index = uint8_t(p.sgid.index);
        q.ah_attr.grh.hop_limit = p.hop_limit;
        q.ah_attr.grh.traffic_class = p.traffic_class;
        q.ah_attr.grh.flow_label = 0;
    }
    t.mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    return t;
}

Transition rts_transition(const RtsAttr& a, const DeviceCaps& d) {
    need(a.sq_psn < (1u << 24), "RtsAttr::sq_psn", a.sq_psn, "0..2^24-1");
    need(a.timeout <= 31, "RtsAttr::timeout", a.timeout, "0..31 (4.096 us * 2^timeout; 0 = infinite)");
    need(a.retry_cnt <= 7, "RtsAttr::retry_cnt", a.retry_cnt, "0..7");
    need(a.rnr_retry <= 7, "RtsAttr::rnr_retry", a.rnr_retry, "0..7 (7 = forever)");
    need(a.max_rd_atomic <= 255, "RtsAttr::max_rd_atomic", a.max_rd_atomic, "0..255");
    Transition t;
    ibv_qp_attr& q = t.attr;
    q.qp_state = IBV_QPS_RTS;
    q.sq_psn = a.sq_psn;
    q.timeout = uint8_t(a.timeout);
    q.retry_cnt = uint8_t(a.retry_cnt);
    q.rnr_retry = uint8_t(a.rnr_retry);
    q.max_rd_atomic = uint8_t(std::min(a.max_rd_atomic, d.max_qp_init_rd_atom));
    t.mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
             IBV_QP_MAX_QP_RD_ATOMIC;
    return t;
}

std::string qp_attr_mask_names(int mask) {
    static const struct {
        int bit;
        const char* name;
    } names[] = {
        {IBV_QP_STATE, "STATE"}, {IBV_QP_CUR_STATE, "CUR_STATE"},
        {IBV_QP_EN_SQD_ASYNC_NOTIFY, "EN_SQD_ASYNC_NOTIFY"}, {IBV_QP_ACCESS_FLAGS, "ACCESS_FLAGS"},
        {IBV_QP_PKEY_INDEX, "PKEY_INDEX"}, {IBV_QP_PORT, "PORT"}, {IBV_QP_QKEY, "QKEY"},
        {IBV_QP_AV, "AV"}, {IBV_QP_PATH_MTU, "PATH_MTU"}, {IBV_QP_TIMEOUT, "TIMEOUT"},
        {IBV_QP_RETRY_CNT, "RETRY_CNT"}, {IBV_QP_RNR_RETRY, "RNR_RETRY"}, {IBV_QP_RQ_PSN, "RQ_PSN"},
        {IBV_QP_MAX_QP_RD_ATOMIC, "MAX_QP_RD_ATOMIC"}, {IBV_QP_ALT_PATH, "ALT_PATH"},
        {IBV_QP_MIN_RNR_TIMER, "MIN_RNR_TIMER"}, {IBV_QP_SQ_PSN, "SQ_PSN"},
        {IBV_QP_MAX_DEST_RD_ATOMIC, "MAX_DEST_RD_ATOMIC"}, {IBV_QP_PATH_MIG_STATE, "PATH_MIG_STATE"},
        {IBV_QP_CAP, "CAP"}, {IBV_QP_DEST_QPN, "DEST_QPN"}, {IBV_QP_RATE_LIMIT, "RATE_LIMIT"},
    };
    std::string s;
    int rest = mask;
    for (const auto& n : names) {
        if (mask & n.bit) {
            s += (s.empty() ? "" : "|") + std::string(n.name);
            rest &= ~n.bit;
        }
    }
    if (rest) s += (s.empty() ? "" : "|") + hex(uint32_t(rest));
    return s.empty() ? "0" : s;
}

const char* qp_state_name(ibv_qp_state s) {
    switch (s) {
    case IBV_QPS_RESET: return "RESET";
    case IBV_QPS_INIT: return "INIT";
    case IBV_QPS_RTR: return "RTR";
    case IBV_QPS_RTS: return "RTS";
    case IBV_QPS_SQD: return "SQD";
    case IBV_QPS_SQE: return "SQE";
    case IBV_QPS_ERR: return "ERROR";
    case IBV_QPS_UNKNOWN: return "UNKNOWN";
    }
    return "?";
}

}  // namespace gv::detail::verbs
