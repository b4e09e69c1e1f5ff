// The verbs control layer on a real RDMA device (Soft-RoCE rxe0 in the VM of tools/rdma-vm, or
// any device): open, ports and GIDs, memory regions, QP states, and plain ibv_post_send traffic
// between two RC QPs of one device, byte-verified, then the error cases. Without a device every
// test is skipped with the reason (GV_REQUIRE_RDMA=1: failed instead).
#include <gtest/gtest.h>
#include <infiniband/mlx5dv.h>

#include <cstdio>
#include <cstring>

#include "gpuverbs/errors.hpp"
#include "verbs/verbs.hpp"
#include "verbs_test_util.hpp"

using namespace gvtest::verbs;

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

}  // namespace

TEST(VerbsDevice, OpensTheFirstAndByName) {
    GV_SKIP_WITHOUT_RDMA();
    v::Device first;
    ASSERT_NE(first.get(), nullptr);
    EXPECT_EQ(first.name(), v::list_devices().front());
    v::Device named(first.name());
    EXPECT_EQ(named.name(), first.name());
    const v::DeviceCaps& c = named.caps();
    EXPECT_GT(c.max_qp_wr, 0u);
    EXPECT_GT(c.max_sge, 0u);
    EXPECT_GT(c.max_cqe, 0u);
    EXPECT_GE(c.phys_port_cnt, 1);
    std::printf("  device %s: max_qp_wr %u, max_sge %u, max_cqe %u, rd_atom %u/%u, atomic_cap %d, ports %d\n",
                named.name().c_str(), c.max_qp_wr, c.max_sge, c.max_cqe,
                c.max_qp_rd_atom, c.max_qp_init_rd_atom, int(c.atomic_cap), int(c.phys_port_cnt));
    v::Device moved = std::move(named);
    EXPECT_EQ(named.get(), nullptr);
    EXPECT_NE(moved.get(), nullptr);
}

TEST(VerbsDevice, UnknownNameListsTheDevicesPresent) {
    GV_SKIP_WITHOUT_RDMA();
    std::string present = v::list_devices().front();
    std::string m = message_of<gv::InvalidUsage>([] { v::Device d("no_such_dev0"); });
    EXPECT_NE(m.find("no RDMA device named 'no_such_dev0'"), std::string::npos) << m;
    EXPECT_NE(m.find(present), std::string::npos) << m;
}

TEST(VerbsDevice, PortsAndGids) {
    GV_SKIP_WITHOUT_RDMA();
    v::Device d(device_name());
    v::PortInfo p = d.port(1);
    EXPECT_TRUE(p.active()) << "port 1 of " << d.name() << " is not ACTIVE";
    EXPECT_TRUE(v::mtu_bytes_valid(p.active_mtu)) << p.active_mtu;
    std::vector<v::GidEntry> t = d.gid_table(1);
    ASSERT_FALSE(t.empty());
    for (const v::GidEntry& e : t)
        std::printf("  %s port 1 gid[%u] %s %s ifindex %u\n", d.name().c_str(), e.index,
                    v::gid_to_string(e.gid).c_str(), v::gid_type_name(e.type), e.ndev_ifindex);
    v::GidEntry g = d.choose_gid(1, gid_index());
    std::printf("  link layer %s, active MTU %u, lid %u, chosen gid[%u] %s (%s)\n", v::link_layer_name(p.link_layer),
                p.active_mtu, p.lid, g.index, v::gid_to_string(g.gid).c_str(), v::gid_type_name(g.type));
    if (p.link_layer == v::LinkLayer::Ethernet) {
        // The default: a RoCE v2 IPv4-mapped GID (rxe in the VM has ::ffff:10.0.0.1 at index 1).
        v::GidEntry def = d.choose_gid(1);
        EXPECT_EQ(def.type, v::GidType::RoCEv2);
        EXPECT_TRUE(v::gid_is_ipv4_mapped(def.gid)) << v::gid_to_string(def.gid);
        const char* ip = std::getenv("RDMA_IPV4");
        if (ip && *ip) EXPECT_EQ(v::gid_to_string(def.gid), std::string("::ffff:") + ip);
    } else if (p.link_layer == v::LinkLayer::InfiniBand) {
        EXPECT_NE(p.lid, 0);
    }
    EXPECT_THROW(d.port(0), gv::InvalidUsage);
    EXPECT_THROW(d.port(uint8_t(d.caps().phys_port_cnt + 1)), gv::InvalidUsage);
}

TEST(VerbsDevice, BadGidIndexIsRefused) {
    GV_SKIP_WITHOUT_RDMA();
    v::Device d(device_name());
    std::string m = message_of<gv::InvalidUsage>([&] { d.choose_gid(1, 1000); });
    EXPECT_NE(m.find("GID index 1000 is not a valid entry"), std::string::npos) << m;
    EXPECT_NE(m.find(d.name() + " port 1"), std::string::npos) << m;
    // The same through QP creation.
    v::Pd pd(d);
    v::Cq cq(d, 16);
    v::QpConfig c = qp_config();
    c.gid_index = 1000;
    EXPECT_THROW(v::RcQp(d, pd, cq, cq, c), gv::InvalidUsage);
}

TEST(VerbsMemory, HostRegionKeysAndAccessRules) {
    GV_SKIP_WITHOUT_RDMA();
    v::Device d(device_name());
    v::Pd pd(d);
    std::vector<uint8_t> buf(8192);
    v::Mr mr = v::Mr::host(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    EXPECT_EQ(mr.path(), v::MrPath::Host);
    EXPECT_EQ(mr.addr(), buf.data());
    EXPECT_EQ(mr.length(), buf.size());
    EXPECT_EQ(mr.lkey(), mr.get()->lkey);
    EXPECT_EQ(mr.rkey(), mr.get()->rkey);
    std::printf("  MR lkey 0x%x rkey 0x%x\n", mr.lkey(), mr.rkey());
    EXPECT_THROW(v::Mr::host(pd, buf.data(), buf.size(), IBV_ACCESS_REMOTE_WRITE), gv::InvalidUsage);
    EXPECT_THROW(v::Mr::host(pd, nullptr, 16, 0), gv::InvalidUsage);
    // Host memory is not GPU memory: refused with a reason (no CUDA build: NotSupported).
    EXPECT_THROW(v::Mr::gpu(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE), gv::Error);
}

TEST(VerbsQp, CapsBeyondTheDeviceAreRefused) {
    GV_SKIP_WITHOUT_RDMA();
    v::Device d(device_name());
    v::Pd pd(d);
    v::Cq cq(d, 16);
    v::QpConfig c = qp_config();
    c.sq_depth = d.caps().max_qp_wr + 1;
    std::string m = message_of<gv::InvalidUsage>([&] { v::RcQp q(d, pd, cq, cq, c); });
    EXPECT_NE(m.find("max_qp_wr"), std::string::npos) << m;
    c = qp_config();
    c.max_send_sge = d.caps().max_sge + 1;
    EXPECT_THROW(v::RcQp(d, pd, cq, cq, c), gv::InvalidUsage);
    EXPECT_THROW(v::Cq(d, int(d.caps().max_cqe) + 1), gv::InvalidUsage);
}

TEST(VerbsQp, StatesAndEndpoint) {
    GV_SKIP_WITHOUT_RDMA();
    v::Device d(device_name());
    v::Pd pd(d);
    v::Cq cq(d, 16);
    v::RcQp a(d, pd, cq, cq, qp_config());
    v::RcQp b(d, pd, cq, cq, qp_config());
    EXPECT_EQ(a.state(), IBV_QPS_RESET);
    EXPECT_GE(a.caps().sq_depth, 64u);
    EXPECT_GE(a.caps().max_inline, 64u);
    gv::QpEndpoint e = a.endpoint();
    EXPECT_EQ(e.backend, gv::Backend::Verbs);
    EXPECT_EQ(e.qpn, a.qpn());
    EXPECT_EQ(e.psn, a.psn());
    EXPECT_EQ(e.gid, a.path().sgid.gid);
    EXPECT_EQ(e.device, d.name());
    a.to_init();
    EXPECT_EQ(a.state(), IBV_QPS_INIT);
    gv::RtrAttr r;
    r.remote_qpn = b.qpn();
    r.rq_psn = b.psn();
    r.dlid = b.endpoint().lid;
    r.dgid = b.endpoint().gid;
    a.to_rtr(r);
    EXPECT_EQ(a.state(), IBV_QPS_RTR);
    gv::RtsAttr s;
    s.sq_psn = a.psn();
    a.to_rts(s);
    EXPECT_EQ(a.state(), IBV_QPS_RTS);
    a.to_error();
    EXPECT_EQ(a.state(), IBV_QPS_ERR);
    a.reset();
    EXPECT_EQ(a.state(), IBV_QPS_RESET);
}

TEST(VerbsQp, FailedTransitionNamesItAndTheMask) {
    GV_SKIP_WITHOUT_RDMA();
    v::Device d(device_name());
    v::Pd pd(d);
    v::Cq cq(d, 16);
    v::RcQp a(d, pd, cq, cq, qp_config());
    // RESET -> RTS is not a transition.
    std::string m = message_of<gv::VerbsError>([&] { a.to_rts(); });
    EXPECT_NE(m.find("RTR -> RTS"), std::string::npos) << m;
    EXPECT_NE(m.find("attribute mask"), std::string::npos) << m;
    EXPECT_NE(m.find("STATE|TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC|SQ_PSN"), std::string::npos) << m;
    EXPECT_NE(m.find("QP is in RESET"), std::string::npos) << m;
    EXPECT_NE(m.find("errno"), std::string::npos) << m;
    std::printf("  %s\n", m.c_str());
}

// ---- traffic between two QPs of one device -----------------------------------------------------

class VerbsTraffic : public ::testing::Test {
protected:
    void SetUp() override {
        GV_SKIP_WITHOUT_RDMA();
        lb = std::make_unique<Loopback>();
        src = std::make_unique<Buffer>(lb->pd, kSize);
        dst = std::make_unique<Buffer>(lb->pd, kSize);
        src->fill(1);
        std::memset(dst->data(), 0, kSize);
    }
    /// Posts on QP a and waits for its completion, which must succeed.
    void run_a(ibv_send_wr& wr, ibv_wc_opcode expect) {
        ASSERT_EQ(post(lb->a, wr), 0);
        ibv_wc wc = lb->cq_a.wait_one(kTimeoutMs);
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
        EXPECT_EQ(wc.opcode, expect);
        EXPECT_EQ(wc.wr_id, wr.wr_id);
    }
    static constexpr size_t kSize = 16384;
    std::unique_ptr<Loopback> lb;
    std::unique_ptr<Buffer> src, dst;
};

TEST_F(VerbsTraffic, Write) {
    ibv_sge sge{src->addr() + 100, 9000, src->mr->lkey()};  // several MTUs, unaligned
    ibv_send_wr wr = make_wr(IBV_WR_RDMA_WRITE, &sge, 1, dst->addr() + 50, dst->mr->rkey());
    run_a(wr, IBV_WC_RDMA_WRITE);
    EXPECT_EQ(std::memcmp(dst->data() + 50, src->data() + 100, 9000), 0);
    for (size_t i = 0; i < 50; ++i) ASSERT_EQ(dst->data()[i], 0) << i;
    for (size_t i = 9050; i < kSize; ++i) ASSERT_EQ(dst->data()[i], 0) << i;
    EXPECT_TRUE(dst->guards_intact());
}

TEST_F(VerbsTraffic, Read) {
    dst->fill(9);
    std::memset(src->data(), 0, kSize);
    ibv_sge sge{src->addr(), 12345, src->mr->lkey()};
    ibv_send_wr wr = make_wr(IBV_WR_RDMA_READ, &sge, 1, dst->addr() + 7, dst->mr->rkey());
    run_a(wr, IBV_WC_RDMA_READ);
    EXPECT_EQ(std::memcmp(src->data(), dst->data() + 7, 12345), 0);
    EXPECT_EQ(src->data()[12345], 0);
    EXPECT_TRUE(src->guards_intact());
}

TEST_F(VerbsTraffic, SendRecv) {
    ibv_sge rsge{dst->addr(), 4096, dst->mr->lkey()};
    ASSERT_EQ(post_recv(lb->b, &rsge, 1, 77), 0);
    ibv_sge sge{src->addr() + 3, 3000, src->mr->lkey()};
    ibv_send_wr wr = make_wr(IBV_WR_SEND, &sge, 1, 0, 0, 5);
    run_a(wr, IBV_WC_SEND);
    ibv_wc wc = lb->cq_b.wait_one(kTimeoutMs);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.wr_id, 77u);
    EXPECT_EQ(wc.byte_len, 3000u);
    EXPECT_EQ(wc.qp_num, lb->b.qpn());
    EXPECT_EQ(std::memcmp(dst->data(), src->data() + 3, 3000), 0);
    EXPECT_EQ(dst->data()[3000], 0);
}

TEST_F(VerbsTraffic, WriteWithImmediate) {
    ibv_sge rsge{dst->addr(), 0, dst->mr->lkey()};
    ASSERT_EQ(post_recv(lb->b, &rsge, 0, 88), 0);  // WRITE_IMM consumes a receive, no data in it
    ibv_sge sge{src->addr(), 2048, src->mr->lkey()};
    ibv_send_wr wr = make_wr(IBV_WR_RDMA_WRITE_WITH_IMM, &sge, 1, dst->addr() + 4096, dst->mr->rkey());
    wr.imm_data = htobe32(0xfeedbeef);
    run_a(wr, IBV_WC_RDMA_WRITE);
    ibv_wc wc = lb->cq_b.wait_one(kTimeoutMs);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(be32toh(wc.imm_data), 0xfeedbeefu);
    EXPECT_EQ(wc.wr_id, 88u);
    EXPECT_EQ(std::memcmp(dst->data() + 4096, src->data(), 2048), 0);
}

TEST_F(VerbsTraffic, InlineWrite) {
    uint8_t payload[48];
    for (size_t i = 0; i < sizeof payload; ++i) payload[i] = uint8_t(0xc0 + i);
    ibv_sge sge{reinterpret_cast<uintptr_t>(payload), sizeof payload, 0};  // no lkey needed
    ibv_send_wr wr = make_wr(IBV_WR_RDMA_WRITE, &sge, 1, dst->addr() + 8, dst->mr->rkey(), 3,
                             IBV_SEND_SIGNALED | IBV_SEND_INLINE);
    ASSERT_EQ(post(lb->a, wr), 0);
    std::memset(payload, 0, sizeof payload);  // inline: copied at post time
    ibv_wc wc = lb->cq_a.wait_one(kTimeoutMs);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    for (size_t i = 0; i < 48; ++i) ASSERT_EQ(dst->data()[8 + i], uint8_t(0xc0 + i)) << i;
    EXPECT_EQ(dst->data()[7], 0);
    EXPECT_EQ(dst->data()[56], 0);
}

TEST_F(VerbsTraffic, FetchAdd) {
    uint64_t* target = reinterpret_cast<uint64_t*>(dst->data() + 64);
    *target = 1000;
    uint64_t* old = reinterpret_cast<uint64_t*>(src->data());
    *old = 0;
    ibv_sge sge{src->addr(), 8, src->mr->lkey()};
    ibv_send_wr wr = make_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, &sge, 1, 0, 0);
    wr.wr.atomic.remote_addr = dst->addr() + 64;
    wr.wr.atomic.rkey = dst->mr->rkey();
    wr.wr.atomic.compare_add = 42;
    run_a(wr, IBV_WC_FETCH_ADD);
    EXPECT_EQ(*old, 1000u);
    EXPECT_EQ(*target, 1042u);
    run_a(wr, IBV_WC_FETCH_ADD);
    EXPECT_EQ(*old, 1042u);
    EXPECT_EQ(*target, 1084u);
    EXPECT_EQ(dst->data()[63], 0);
    EXPECT_EQ(dst->data()[72], 0);
}

TEST_F(VerbsTraffic, CompareSwap) {
    uint64_t* target = reinterpret_cast<uint64_t*>(dst->data() + 128);
    *target = 0x1111222233334444ull;
    uint64_t* old = reinterpret_cast<uint64_t*>(src->data());
    ibv_sge sge{src->addr(), 8, src->mr->lkey()};
    ibv_send_wr wr = make_wr(IBV_WR_ATOMIC_CMP_AND_SWP, &sge, 1, 0, 0);
    wr.wr.atomic.remote_addr = dst->addr() + 128;
    wr.wr.atomic.rkey = dst->mr->rkey();
    wr.wr.atomic.compare_add = 0x1111222233334444ull;
    wr.wr.atomic.swap = 0xaaaabbbbccccddddull;
    run_a(wr, IBV_WC_COMP_SWAP);
    EXPECT_EQ(*old, 0x1111222233334444ull);
    EXPECT_EQ(*target, 0xaaaabbbbccccddddull);
    // Compare fails: no swap, the old value comes back.
    wr.wr.atomic.swap = 5;
    run_a(wr, IBV_WC_COMP_SWAP);
    EXPECT_EQ(*old, 0xaaaabbbbccccddddull);
    EXPECT_EQ(*target, 0xaaaabbbbccccddddull);
}

// ---- error cases ---------------------------------------------------------------------------------

class VerbsErrors : public VerbsTraffic {};

TEST_F(VerbsErrors, WrongRkeyIsRemoteAccessError) {
    ibv_sge sge{src->addr(), 64, src->mr->lkey()};
    ibv_send_wr wr = make_wr(IBV_WR_RDMA_WRITE, &sge, 1, dst->addr(), dst->mr->rkey() ^ 0x5a5a00, 11);
    ASSERT_EQ(post(lb->a, wr), 0);
    ibv_wc wc = lb->cq_a.wait_one(kTimeoutMs);
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << describe(wc);
    EXPECT_EQ(v::wc_status_to_syndrome(wc.status), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
    EXPECT_EQ(wc.wr_id, 11u);
    EXPECT_EQ(lb->a.state(), IBV_QPS_ERR);
    for (size_t i = 0; i < kSize; ++i) ASSERT_EQ(dst->data()[i], 0) << i;
    // Work posted after the error is flushed.
    wr.wr_id = 12;
    wr.wr.rdma.rkey = dst->mr->rkey();
    ASSERT_EQ(post(lb->a, wr), 0);
    wc = lb->cq_a.wait_one(kTimeoutMs);
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << describe(wc);
    EXPECT_EQ(wc.wr_id, 12u);
}

TEST_F(VerbsErrors, OutOfBoundsIsRemoteAccessError) {
    ibv_sge sge{src->addr(), 256, src->mr->lkey()};
    ibv_send_wr wr = make_wr(IBV_WR_RDMA_WRITE, &sge, 1, dst->addr() + kSize - 128, dst->mr->rkey(), 21);
    ASSERT_EQ(post(lb->a, wr), 0);
    ibv_wc wc = lb->cq_a.wait_one(kTimeoutMs);
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << describe(wc);
    EXPECT_TRUE(dst->guards_intact());
    // A READ past the end is refused the same way (on a fresh pair: the first QP is in ERROR).
    Loopback lb2;
    Buffer s2(lb2.pd, 4096), d2(lb2.pd, 4096);
    ibv_sge sge2{s2.addr(), 64, s2.mr->lkey()};
    ibv_send_wr rd = make_wr(IBV_WR_RDMA_READ, &sge2, 1, d2.addr() + 4096 - 32, d2.mr->rkey(), 22);
    ASSERT_EQ(post(lb2.a, rd), 0);
    wc = lb2.cq_a.wait_one(kTimeoutMs);
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << describe(wc);
}

TEST(VerbsQpNotReady, PostBeforeRtsFails) {
    GV_SKIP_WITHOUT_RDMA();
    v::Device d(device_name());
    v::Pd pd(d);
    v::Cq cq(d, 16);
    v::RcQp a(d, pd, cq, cq, qp_config());
    v::RcQp b(d, pd, cq, cq, qp_config());
    Buffer buf(pd, 4096);
    ibv_sge sge{buf.addr(), 64, buf.mr->lkey()};
    ibv_send_wr wr = make_wr(IBV_WR_RDMA_WRITE, &sge, 1, buf.addr() + 1024, buf.mr->rkey(), 31);
    // RESET, INIT, RTR: the send queue is not ready. rxe refuses the post (EINVAL) and
    // produces no completion; other devices may accept it into the queue without executing it.
    int rc_reset = post(a, wr);
    a.to_init();
    int rc_init = post(a, wr);
    gv::RtrAttr r;
    r.remote_qpn = b.qpn();
    r.dgid = b.endpoint().gid;
    r.dlid = b.endpoint().lid;
    a.to_rtr(r);
    int rc_rtr = post(a, wr);
    std::printf("  ibv_post_send before RTS on %s: RESET %d, INIT %d, RTR %d\n", d.name().c_str(), rc_reset,
                rc_init, rc_rtr);
    ibv_wc wc{};
    if (d.name().rfind("rxe", 0) == 0) {
        EXPECT_EQ(rc_reset, EINVAL);
        EXPECT_EQ(rc_init, EINVAL);
        EXPECT_EQ(rc_rtr, EINVAL);
        EXPECT_EQ(cq.poll(&wc, 1), 0) << describe(wc);
    } else {
        EXPECT_TRUE(rc_reset != 0 || rc_init != 0 || rc_rtr != 0 || cq.poll(&wc, 1) == 0);
    }
    for (size_t i = 1024; i < 1024 + 64; ++i) ASSERT_EQ(buf.data()[i], kGuard) << i;  // nothing was written
}
