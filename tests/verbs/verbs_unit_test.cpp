// The verbs control layer's pure rules, on any machine (no RDMA device): the status <-> syndrome
// table, the GID choice over constructed tables, device selection, queue capability checks,
// the attributes of each QP transition, the GPU registration order and access checks.
#include <gtest/gtest.h>
#include <infiniband/mlx5dv.h>

#include <string>

#include "gpuverbs/errors.hpp"
#include "verbs/verbs.hpp"

namespace v = gv::detail::verbs;

namespace {

template <class E, class F>
std::string message_of(F&& f) {
    try {
        f();
    } catch (const E& e) {
        return e.what();
    }
    ADD_FAILURE() << "no exception of the expected type";
    return {};
}

v::Gid gid(std::initializer_list<int> bytes) {
    v::Gid g{};
    size_t i = 0;
    for (int b : bytes) g[i++] = uint8_t(b);
    return g;
}
v::Gid v4(int a, int b, int c, int d) { return gid({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d}); }
v::Gid link_local(int last) { return gid({0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0, 0, 0, 0, last}); }
v::Gid global6(int last) { return gid({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last}); }

v::GidEntry entry(uint32_t index, v::Gid g, v::GidType t) {
    v::GidEntry e;
    e.index = index;
    e.gid = g;
    e.type = t;
    return e;
}

}  // namespace

// ---- ibv_wc_status <-> mlx5 syndrome -------------------------------------------------------

TEST(VerbsUnitStatus, EveryStatusMapsToTheDocumentedSyndrome) {
    struct Row {
        ibv_wc_status status;
        uint8_t syndrome;
        bool exact;
    };
    // The table of docs/verbs.md, written out independently of the implementation.
    const Row rows[] = {
        {IBV_WC_SUCCESS, 0, true},
        {IBV_WC_LOC_LEN_ERR, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, true},
        {IBV_WC_LOC_QP_OP_ERR, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, true},
        {IBV_WC_LOC_EEC_OP_ERR, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, false},
        {IBV_WC_LOC_PROT_ERR, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, true},
        {IBV_WC_WR_FLUSH_ERR, MLX5_CQE_SYNDROME_WR_FLUSH_ERR, true},
        {IBV_WC_MW_BIND_ERR, MLX5_CQE_SYNDROME_MW_BIND_ERR, true},
        {IBV_WC_BAD_RESP_ERR, MLX5_CQE_SYNDROME_BAD_RESP_ERR, true},
        {IBV_WC_LOC_ACCESS_ERR, MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR, true},
        {IBV_WC_REM_INV_REQ_ERR, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR, true},
        {IBV_WC_REM_ACCESS_ERR, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, true},
        {IBV_WC_REM_OP_ERR, MLX5_CQE_SYNDROME_REMOTE_OP_ERR, true},
        {IBV_WC_RETRY_EXC_ERR, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR, true},
        {IBV_WC_RNR_RETRY_EXC_ERR, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR, true},
        {IBV_WC_LOC_RDD_VIOL_ERR, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, false},
        {IBV_WC_REM_INV_RD_REQ_ERR, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR, false},
        {IBV_WC_REM_ABORT_ERR, MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR, true},
        {IBV_WC_INV_EECN_ERR, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, false},
        {IBV_WC_INV_EEC_STATE_ERR, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, false},
        {IBV_WC_FATAL_ERR, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, false},
        {IBV_WC_RESP_TIMEOUT_ERR, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR, false},
        {IBV_WC_GENERAL_ERR, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, false},
        {IBV_WC_TM_ERR, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, false},
        {IBV_WC_TM_RNDV_INCOMPLETE, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, false},
    };
    // Every enumerator is in the table, in order.
    ASSERT_EQ(sizeof rows / sizeof rows[0], size_t(IBV_WC_TM_RNDV_INCOMPLETE) + 1);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; ++i) {
        const Row& r = rows[i];
        SCOPED_TRACE(v::wc_status_name(r.status));
        EXPECT_EQ(size_t(r.status), i);
        EXPECT_EQ(v::wc_status_to_syndrome(r.status), r.syndrome);
        EXPECT_EQ(v::wc_status_exact(r.status), r.exact);
        if (r.exact) EXPECT_EQ(v::syndrome_to_wc_status(r.syndrome), r.status);
        EXPECT_STRNE(v::wc_status_name(r.status), "IBV_WC_UNKNOWN");
        EXPECT_STRNE(v::syndrome_name(r.syndrome), "UNKNOWN_SYNDROME");
    }
    // Values past the enum: a local QP operation error, never success.
    EXPECT_EQ(v::wc_status_to_syndrome(ibv_wc_status(200)), MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
    EXPECT_STREQ(v::wc_status_name(ibv_wc_status(200)), "IBV_WC_UNKNOWN");
}

TEST(VerbsUnitStatus, SyndromesBackToStatusesAndNames) {
    EXPECT_EQ(v::syndrome_to_wc_status(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR), IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(v::syndrome_to_wc_status(MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR), IBV_WC_REM_ABORT_ERR);
    EXPECT_EQ(v::syndrome_to_wc_status(0), IBV_WC_SUCCESS);
    EXPECT_EQ(v::syndrome_to_wc_status(0x03), IBV_WC_GENERAL_ERR);  // not an mlx5 syndrome
    EXPECT_EQ(v::syndrome_to_wc_status(0xff), IBV_WC_GENERAL_ERR);
    EXPECT_STREQ(v::syndrome_name(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR), "REMOTE_ACCESS_ERR");
    EXPECT_STREQ(v::syndrome_name(MLX5_CQE_SYNDROME_WR_FLUSH_ERR), "WR_FLUSH_ERR");
    EXPECT_STREQ(v::syndrome_name(0x03), "UNKNOWN_SYNDROME");
    EXPECT_STREQ(v::wc_status_name(IBV_WC_RNR_RETRY_EXC_ERR), "IBV_WC_RNR_RETRY_EXC_ERR");
    // Every syndrome mlx5 defines round-trips.
    for (int s = 0; s < 256; ++s) {
        ibv_wc_status st = v::syndrome_to_wc_status(uint8_t(s));
        if (st != IBV_WC_GENERAL_ERR) {
            EXPECT_EQ(v::wc_status_to_syndrome(st), s) << "syndrome " << s;
            EXPECT_STRNE(v::syndrome_name(uint8_t(s)), "UNKNOWN_SYNDROME");
        } else {
            EXPECT_STREQ(v::syndrome_name(uint8_t(s)), "UNKNOWN_SYNDROME") << s;
        }
    }
}

// ---- GID choice ----------------------------------------------------------------------------

TEST(VerbsUnitGid, RoceDefaultIsV2Ipv4Mapped) {
    // The layout of a RoCE port with an IPv4 and an IPv6 address: v1 and v2 of each.
    std::vector<v::GidEntry> t = {
        entry(0, link_local(1), v::GidType::RoCEv1), entry(1, link_local(1), v::GidType::RoCEv2),
        entry(2, v4(10, 0, 0, 1), v::GidType::RoCEv1), entry(3, v4(10, 0, 0, 1), v::GidType::RoCEv2),
        entry(4, global6(9), v::GidType::RoCEv2)};
    EXPECT_EQ(v::choose_gid(t, v::LinkLayer::Ethernet, -1).index, 3u);
    // Without the IPv4 v2 entry: the global IPv6 v2 one; without that: link-local v2; then v1.
    t.erase(t.begin() + 3);
    EXPECT_EQ(v::choose_gid(t, v::LinkLayer::Ethernet, -1).index, 4u);
    t.pop_back();
    EXPECT_EQ(v::choose_gid(t, v::LinkLayer::Ethernet, -1).index, 1u);
    t.erase(t.begin() + 1);
    EXPECT_EQ(v::choose_gid(t, v::LinkLayer::Ethernet, -1).index, 2u);  // v1 IPv4 before v1 link-local
    // rxe on Linux 6.1: v2 only, link-local at 0, IPv4 at 1.
    std::vector<v::GidEntry> rxe = {entry(0, link_local(7), v::GidType::RoCEv2),
                                    entry(1, v4(10, 0, 0, 1), v::GidType::RoCEv2)};
    v::GidEntry g = v::choose_gid(rxe, v::LinkLayer::Ethernet, -1);
    EXPECT_EQ(g.index, 1u);
    EXPECT_EQ(v::gid_to_string(g.gid), "::ffff:10.0.0.1");
    EXPECT_TRUE(v::gid_is_ipv4_mapped(g.gid));
}

TEST(VerbsUnitGid, SelectedIndexIsValidated) {
    std::vector<v::GidEntry> t = {entry(0, link_local(1), v::GidType::RoCEv2),
                                  entry(1, v4(10, 0, 0, 1), v::GidType::RoCEv2)};
    EXPECT_EQ(v::choose_gid(t, v::LinkLayer::Ethernet, 0).index, 0u);
    std::string m = message_of<gv::InvalidUsage>([&] { v::choose_gid(t, v::LinkLayer::Ethernet, 7); });
    EXPECT_NE(m.find("GID index 7 is not a valid entry"), std::string::npos) << m;
    EXPECT_NE(m.find("[1] ::ffff:10.0.0.1 (RoCE v2)"), std::string::npos) << m;
    // Holes in the table (the kernel leaves unused slots out): index 2 is absent.
    t.push_back(entry(3, global6(3), v::GidType::RoCEv1));
    EXPECT_THROW(v::choose_gid(t, v::LinkLayer::Ethernet, 2), gv::InvalidUsage);
    EXPECT_EQ(v::choose_gid(t, v::LinkLayer::Ethernet, 3).type, v::GidType::RoCEv1);
    // An IB GID on an Ethernet port and a RoCE GID on an IB port are refused.
    std::vector<v::GidEntry> mixed = {entry(0, link_local(1), v::GidType::IB)};
    EXPECT_THROW(v::choose_gid(mixed, v::LinkLayer::Ethernet, 0), gv::InvalidUsage);
    EXPECT_THROW(v::choose_gid(t, v::LinkLayer::InfiniBand, 1), gv::InvalidUsage);
}

TEST(VerbsUnitGid, InfiniBandUsesIndexZeroAndEmptyTablesFail) {
    std::vector<v::GidEntry> ib = {entry(0, link_local(1), v::GidType::IB), entry(1, global6(2), v::GidType::IB)};
    EXPECT_EQ(v::choose_gid(ib, v::LinkLayer::InfiniBand, -1).index, 0u);
    EXPECT_EQ(v::choose_gid(ib, v::LinkLayer::InfiniBand, 1).index, 1u);
    std::string m = message_of<gv::NotSupported>([] { v::choose_gid({}, v::LinkLayer::Ethernet, -1); });
    EXPECT_NE(m.find("no IP address"), std::string::npos) << m;
    // Only IB-type or zero GIDs on an Ethernet port: nothing to choose by default.
    EXPECT_THROW(v::choose_gid({entry(0, v::Gid{}, v::GidType::RoCEv2)}, v::LinkLayer::Ethernet, -1),
                 gv::NotSupported);
}

// ---- device selection ----------------------------------------------------------------------

TEST(VerbsUnitDevice, SelectByName) {
    EXPECT_EQ(v::select_device({"mlx5_0", "rxe0"}, ""), 0u);
    EXPECT_EQ(v::select_device({"mlx5_0", "rxe0"}, "rxe0"), 1u);
    std::string m = message_of<gv::InvalidUsage>([] { v::select_device({"mlx5_0", "rxe0"}, "mlx5_9"); });
    EXPECT_NE(m.find("no RDMA device named 'mlx5_9'; devices present: mlx5_0, rxe0"), std::string::npos) << m;
    m = message_of<gv::NotSupported>([] { v::select_device({}, ""); });
    EXPECT_NE(m.find("no RDMA device"), std::string::npos) << m;
    EXPECT_NE(m.find("rdma_rxe"), std::string::npos) << m;
    EXPECT_NE(m.find("Backend::Soft"), std::string::npos) << m;
}

TEST(VerbsUnitDevice, ErrnoTextAndMtu) {
    EXPECT_EQ(v::errno_text(22), "Invalid argument (errno 22)");
    EXPECT_EQ(v::mtu_from_bytes(1024), IBV_MTU_1024);
    EXPECT_EQ(v::mtu_to_bytes(IBV_MTU_4096), 4096u);
    EXPECT_THROW(v::mtu_from_bytes(1500), gv::InvalidUsage);
    EXPECT_EQ(v::mtu_to_bytes(ibv_mtu(9)), 0u);
}

// ---- QP capabilities and transitions -------------------------------------------------------

namespace {
v::DeviceCaps rxe_like() {
    v::DeviceCaps d;
    d.max_qp_wr = 1048576;
    d.max_sge = 32;
    d.max_cqe = 32767;
    d.max_qp_rd_atom = 128;
    d.max_qp_init_rd_atom = 128;
    d.phys_port_cnt = 1;
    return d;
}
v::DeviceCaps small() {
    v::DeviceCaps d = rxe_like();
    d.max_qp_wr = 1024;
    d.max_sge = 4;
    d.max_qp_rd_atom = 8;
    d.max_qp_init_rd_atom = 4;
    return d;
}
v::LocalPath roce_path() {
    v::LocalPath p;
    p.port = 1;
    p.link = v::LinkLayer::Ethernet;
    p.sgid = entry(1, v4(10, 0, 0, 1), v::GidType::RoCEv2);
    p.active_mtu = 1024;
    p.hop_limit = 64;
    return p;
}
}  // namespace

TEST(VerbsUnitQp, CapsCheckedAgainstTheDevice) {
    v::QpConfig c;
    v::QpCaps k = v::check_qp_caps(c, small());
    EXPECT_EQ(k.sq_depth, 256u);
    c.sq_depth = 2048;
    std::string m = message_of<gv::InvalidUsage>([&] { v::check_qp_caps(c, small()); });
    EXPECT_NE(m.find("send queue depth (sq_depth) = 2048: expected 1..1024 (the device's max_qp_wr)"),
              std::string::npos) << m;
    c = {};
    c.rq_depth = 0;
    EXPECT_THROW(v::check_qp_caps(c, small()), gv::InvalidUsage);
    c = {};
    c.max_send_sge = 5;
    m = message_of<gv::InvalidUsage>([&] { v::check_qp_caps(c, small()); });
    EXPECT_NE(m.find("max_sge"), std::string::npos) << m;
    c = {};
    c.port = 2;
    EXPECT_THROW(v::check_qp_caps(c, small()), gv::InvalidUsage);
}

TEST(VerbsUnitQp, InitTransition) {
    gv::InitAttr a;
    v::Transition t = v::init_transition(a, roce_path());
    EXPECT_EQ(t.attr.qp_state, IBV_QPS_INIT);
    EXPECT_EQ(t.attr.port_num, 1);
    EXPECT_EQ(t.attr.qp_access_flags,
              unsigned(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC));
    EXPECT_EQ(t.mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    EXPECT_EQ(v::qp_attr_mask_names(t.mask), "STATE|ACCESS_FLAGS|PKEY_INDEX|PORT");
    a.port = 2;
    EXPECT_THROW(v::init_transition(a, roce_path()), gv::InvalidUsage);
    a.port = 1;
    a.access = 1u << 20;
    EXPECT_THROW(v::init_transition(a, roce_path()), gv::InvalidUsage);
}

TEST(VerbsUnitQp, RtrTransitionRoceAndIb) {
    gv::RtrAttr a;
    a.remote_qpn = 0x123;
    a.rq_psn = 0xabcdef;
    a.dgid = v4(10, 0, 0, 2);
    v::Transition t = v::rtr_transition(a, roce_path(), small());
    EXPECT_EQ(t.attr.qp_state, IBV_QPS_RTR);
    EXPECT_EQ(t.attr.dest_qp_num, 0x123u);
    EXPECT_EQ(t.attr.rq_psn, 0xabcdefu);
    EXPECT_EQ(t.attr.path_mtu, IBV_MTU_1024);         // 4096 asked, the port runs 1024
    EXPECT_EQ(t.attr.max_dest_rd_atomic, 8);          // 16 asked, the device allows 8
    EXPECT_EQ(t.attr.min_rnr_timer, 12);
    EXPECT_EQ(t.attr.ah_attr.is_global, 1);
    EXPECT_EQ(t.attr.ah_attr.grh.sgid_index, 1);
    EXPECT_EQ(t.attr.ah_attr.grh.hop_limit, 64);
    EXPECT_EQ(t.attr.ah_attr.grh.dgid.raw[15], 2);
    EXPECT_EQ(t.attr.ah_attr.port_num, 1);
    EXPECT_EQ(v::qp_attr_mask_names(t.mask), "STATE|AV|PATH_MTU|RQ_PSN|MIN_RNR_TIMER|MAX_DEST_RD_ATOMIC|DEST_QPN");
    // RoCE needs the peer's GID.
    gv::RtrAttr no_gid = a;
    no_gid.dgid = {};
    std::string m = message_of<gv::InvalidUsage>([&] { v::rtr_transition(no_gid, roce_path(), small()); });
    EXPECT_NE(m.find("dgid is zero"), std::string::npos) << m;
    // Out-of-range fields.
    for (auto bad : {+[](gv::RtrAttr& x) { x.remote_qpn = 1u << 24; }, +[](gv::RtrAttr& x) { x.rq_psn = 1u << 24; },
                     +[](gv::RtrAttr& x) { x.path_mtu = 1500; }, +[](gv::RtrAttr& x) { x.min_rnr_timer = 32; },
                     +[](gv::RtrAttr& x) { x.remote_qpn = 0; }}) {
        gv::RtrAttr x = a;
        bad(x);
        EXPECT_THROW(v::rtr_transition(x, roce_path(), small()), gv::InvalidUsage);
    }
    // InfiniBand: a LID address vector, no GRH; a zero LID is refused.
    v::LocalPath ib = roce_path();
    ib.link = v::LinkLayer::InfiniBand;
    ib.active_mtu = 4096;
    a.dlid = 7;
    t = v::rtr_transition(a, ib, rxe_like());
    EXPECT_EQ(t.attr.ah_attr.is_global, 0);
    EXPECT_EQ(t.attr.ah_attr.dlid, 7);
    EXPECT_EQ(t.attr.path_mtu, IBV_MTU_4096);
    EXPECT_EQ(t.attr.max_dest_rd_atomic, 16);
    a.dlid = 0;
    EXPECT_THROW(v::rtr_transition(a, ib, rxe_like()), gv::InvalidUsage);
}

TEST(VerbsUnitQp, RtsTransition) {
    gv::RtsAttr a;
    a.sq_psn = 0x10;
    v::Transition t = v::rts_transition(a, small());
    EXPECT_EQ(t.attr.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(t.attr.sq_psn, 0x10u);
    EXPECT_EQ(t.attr.timeout, 14);
    EXPECT_EQ(t.attr.retry_cnt, 7);
    EXPECT_EQ(t.attr.rnr_retry, 7);
    EXPECT_EQ(t.attr.max_rd_atomic, 4);  // clamped to max_qp_init_rd_atom
    EXPECT_EQ(v::qp_attr_mask_names(t.mask), "STATE|TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC|SQ_PSN");
    for (auto bad : {+[](gv::RtsAttr& x) { x.sq_psn = 1u << 24; }, +[](gv::RtsAttr& x) { x.timeout = 32; },
                     +[](gv::RtsAttr& x) { x.retry_cnt = 8; }, +[](gv::RtsAttr& x) { x.rnr_retry = 8; }}) {
        gv::RtsAttr x = a;
        bad(x);
        EXPECT_THROW(v::rts_transition(x, small()), gv::InvalidUsage);
    }
    EXPECT_STREQ(v::qp_state_name(IBV_QPS_ERR), "ERROR");
    EXPECT_EQ(v::qp_attr_mask_names(1 << 30), "0x40000000");
}

// ---- memory ---------------------------------------------------------------------------------

TEST(VerbsUnitMemory, GpuRegistrationOrder) {
    v::GpuRegFacts f;
    f.cuda_built = true;
    f.dmabuf_supported = true;
    f.peermem_loaded = true;
    EXPECT_EQ(v::choose_gpu_path(f), v::MrPath::GpuDmaBuf);  // dma-buf first
    f.dmabuf_supported = false;
    EXPECT_EQ(v::choose_gpu_path(f), v::MrPath::GpuPeerMem);
    f.peermem_loaded = false;
    std::string m = message_of<gv::NotSupported>([&] { v::choose_gpu_path(f); });
    EXPECT_NE(m.find("DMA_BUF_SUPPORTED"), std::string::npos) << m;
    EXPECT_NE(m.find("modprobe nvidia-peermem"), std::string::npos) << m;
    f.cuda_built = false;
    f.dmabuf_supported = true;
    m = message_of<gv::NotSupported>([&] { v::choose_gpu_path(f); });
    EXPECT_NE(m.find("no CUDA"), std::string::npos) << m;
}

TEST(VerbsUnitMemory, AccessRules) {
    EXPECT_NO_THROW(v::check_access(0));
    EXPECT_NO_THROW(v::check_access(IBV_ACCESS_REMOTE_READ));
    EXPECT_NO_THROW(v::check_access(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC));
    std::string m = message_of<gv::InvalidUsage>([] { v::check_access(IBV_ACCESS_REMOTE_WRITE); });
    EXPECT_NE(m.find("requires local write"), std::string::npos) << m;
    EXPECT_THROW(v::check_access(IBV_ACCESS_REMOTE_ATOMIC), gv::InvalidUsage);
    EXPECT_THROW(v::check_access(1u << 25), gv::InvalidUsage);
    // gv::Access has the bit values of ibv_access_flags.
    EXPECT_EQ(uint32_t(gv::kRemoteWrite), uint32_t(IBV_ACCESS_REMOTE_WRITE));
    EXPECT_EQ(uint32_t(gv::kRemoteAtomic), uint32_t(IBV_ACCESS_REMOTE_ATOMIC));
    EXPECT_STREQ(v::mr_path_name(v::MrPath::GpuDmaBuf), "GPU dma-buf (ibv_reg_dmabuf_mr)");
}
