// The mlx5 layer's WQE reader (gpuverbs/mlx5/wqe_reader.cuh) on malformed WQEs: every one
// mapped to its syndrome at random and wrapped ring positions, and completed with it by the
// software device; limits that are inclusive; the opcode classes. Well-formed WQEs read back:
// mlx5_reader_test.cpp; the oracle: mlx5_reader_util.hpp.
#include <endian.h>

#include <algorithm>
#include <vector>

#include "gpuverbs/detail/soft/state.cuh"
#include "gpuverbs/device/queue_pair_device.cuh"
#include "gpuverbs/mlx5/wqe_reader.cuh"
#include "unit/mlx5_reader_util.hpp"

namespace {

using gv::mlx5::Violation;
using gv::mlx5::WqeReader;
using mlx5test::DataSeg;
using mlx5test::kSeed;
using mlx5test::oracle_bytes;
using mlx5test::pick_pos;
using mlx5test::place;
using mlx5test::Ring;
using mlx5test::Rng;
using mlx5test::WqeSpec;

constexpr uint8_t kQpOp = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
constexpr uint8_t kLength = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;

// ---- malformed WQEs and their syndromes ------------------------------------------------------

struct Malformed {
    const char* what;
    WqeSpec spec;
    uint8_t syndrome;
    uint8_t unit;
    // Applied to the oracle's bytes before they are placed (e.g. a wrong ds).
    void (*edit)(std::vector<uint8_t>&) = nullptr;
    int index_skew = 0;
    uint32_t qpn_xor = 0;
    int published_less = 0;
    // What the software device completes with, when not `syndrome`: it resolves the data
    // segments before a violation found after them, and no region here spans 2 GiB.
    uint8_t exec_syndrome = 0;
};

void set_ds(std::vector<uint8_t>& w, uint8_t ds) {
    auto* c = reinterpret_cast<mlx5_wqe_ctrl_seg*>(w.data());
    c->qpn_ds = htobe32((be32toh(c->qpn_ds) & ~0x3fu) | ds);
    w.resize(std::max<size_t>(w.size(), 16u * ds));
}

/// Every malformed WQE against limits `lim`; `seg` is a data segment and `local8` an
/// atomic's 8-byte result segment (valid ones where a device executes the cases).
std::vector<Malformed> malformed_cases(const gv::mlx5::WqeLimits& lim, DataSeg seg, DataSeg local8) {
    auto spec = [&](uint8_t op, std::vector<DataSeg> data = {}, std::vector<uint8_t> payload = {}, bool inl = false) {
        WqeSpec s;
        s.opcode = op;
        s.fm_ce_se = MLX5_WQE_CTRL_CQ_UPDATE;
        s.qpn = lim.qpn;
        s.raddr = 0x1000;
        s.rkey = 0x777;
        s.data = std::move(data);
        s.payload = std::move(payload);
        s.inline_data = inl;
        return s;
    };
    const uint8_t kProt = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
    std::vector<Malformed> m;
    // The ctrl segment (unit 0).
    m.push_back({"larger than what is published", spec(MLX5_OPCODE_SEND, {seg, seg, seg, seg}), kQpOp, 0, nullptr, 0,
                 0, 1});
    m.push_back({"index is not its position", spec(MLX5_OPCODE_RDMA_WRITE, {seg}), kQpOp, 0, nullptr, 1});
    m.push_back({"another QP's number", spec(MLX5_OPCODE_RDMA_WRITE, {seg}), kQpOp, 0, nullptr, 0, 0x10});
    m.push_back({"ds 0", spec(MLX5_OPCODE_RDMA_WRITE, {seg}), kQpOp, 0, [](std::vector<uint8_t>& w) { set_ds(w, 0); }});
    for (uint8_t op : {uint8_t(MLX5_OPCODE_SEND_INVAL), uint8_t(MLX5_OPCODE_TSO), uint8_t(MLX5_OPCODE_ATOMIC_MASKED_CS),
                       uint8_t(MLX5_OPCODE_ATOMIC_MASKED_FA), uint8_t(MLX5_OPCODE_UMR), uint8_t(0x03), uint8_t(0xff)})
        m.push_back({"unknown opcode", spec(op, {seg}), kQpOp, 0});
    // Segments per opcode.
    for (uint8_t op : {uint8_t(MLX5_OPCODE_RDMA_WRITE), uint8_t(MLX5_OPCODE_RDMA_WRITE_IMM),
                       uint8_t(MLX5_OPCODE_RDMA_READ), uint8_t(MLX5_OPCODE_ATOMIC_FA)})
        m.push_back({"RDMA without a raddr segment", spec(op, {seg}), kQpOp, 1,
                     [](std::vector<uint8_t>& w) { set_ds(w, 1); }});
    const WqeSpec atomic = spec(MLX5_OPCODE_ATOMIC_CS, {local8});
    m.push_back({"atomic of ds 2", atomic, kQpOp, 2, [](std::vector<uint8_t>& w) { set_ds(w, 2); }});
    m.push_back({"atomic of ds 3", atomic, kQpOp, 2, [](std::vector<uint8_t>& w) { set_ds(w, 3); }});
    m.push_back({"atomic of ds 5", atomic, kQpOp, 2, [](std::vector<uint8_t>& w) { set_ds(w, 5); }});
    for (uint32_t len : {0u, 4u, 7u, 9u, 16u, 8u | MLX5_INLINE_SEG})
        m.push_back({"atomic's local segment not 8 bytes",
                     spec(MLX5_OPCODE_ATOMIC_FA, {{local8.addr, len, local8.lkey}}), kLength, 3});
    m.push_back({"READ with an inline payload", spec(MLX5_OPCODE_RDMA_READ, {}, {1, 2, 3, 4}, true), kQpOp, 2});
    m.push_back({"inline payload after a data segment", spec(MLX5_OPCODE_SEND, {seg}), kQpOp, 2,
                 [](std::vector<uint8_t>& w) {
                     set_ds(w, 3);
                     auto* h = reinterpret_cast<mlx5_wqe_inl_data_seg*>(&w[32]);
                     h->byte_count = htobe32(4 | MLX5_INLINE_SEG);
                 }});
    m.push_back({"inline payload over max_inline",
                 spec(MLX5_OPCODE_RDMA_WRITE, {}, std::vector<uint8_t>(lim.max_inline + 1), true), kLength, 2});
    m.push_back({"inline payload longer than the WQE", spec(MLX5_OPCODE_SEND, {}, std::vector<uint8_t>(40), true),
                 kQpOp, 1, [](std::vector<uint8_t>& w) { set_ds(w, 3); }});  // 4 + 40 bytes need 3 units
    m.push_back({"more data segments than max_sge",
                 spec(MLX5_OPCODE_RDMA_WRITE, std::vector<DataSeg>(lim.max_sge + 1, seg)), kQpOp,
                 uint8_t(2 + lim.max_sge)});
    m.push_back({"more than 2 GiB in all", spec(MLX5_OPCODE_SEND, {{seg.addr, 0, seg.lkey}, seg}), kLength, 3, nullptr,
                 0, 0, 0, kProt});
    m.push_back({"more than 2 GiB in all, READ",
                 spec(MLX5_OPCODE_RDMA_READ, {{seg.addr, 0x40000000, seg.lkey}, {seg.addr, 0x40000000, seg.lkey}, seg}),
                 kLength, 5, nullptr, 0, 0, 0, kProt});
    return m;
}

const DataSeg kSeg{0x2000, 64, 0x555};
const DataSeg kLocal8{0x3000, 8, 0x556};

TEST(Mlx5Reader, MalformedWqesMapToTheirSyndromes) {
    const gv::mlx5::WqeLimits lim{0x123456, 64, 4};
    Rng rng(kSeed + 2);
    int n = 0;
    for (const Malformed& m : malformed_cases(lim, kSeg, kLocal8)) {
        for (uint32_t log_bb : {1u, 4u}) {
            for (int i = 0; i < 8; ++i) {
                SCOPED_TRACE(::testing::Message() << m.what << " (opcode " << int(m.spec.opcode) << "), log_bb "
                                                  << log_bb << ", iteration " << i);
                Ring ring(log_bb);
                rng.fill(ring.base, ring.bytes());
                const uint64_t pos = pick_pos(rng, ring.bbs(), i);
                WqeSpec s = m.spec;
                s.qpn ^= m.qpn_xor;
                std::vector<uint8_t> w = oracle_bytes(s, pos + m.index_skew);
                if (m.edit) m.edit(w);
                if (w.size() > ring.bytes()) w.resize(ring.bytes());
                place(ring, pos, w);
                const WqeReader r(ring.base, ring.log_bb, pos);
                const uint32_t published = r.bbs() - m.published_less;
                const Violation v = r.validate(uint16_t(pos), published, lim);
                EXPECT_EQ(v.syndrome, m.syndrome) << gv::mlx5::syndrome_name(v.syndrome);
                EXPECT_EQ(v.unit, m.unit);
                ++n;
            }
        }
    }
    EXPECT_GT(n, 400);
}

// The software device executes through the reader: each malformed WQE, posted raw at
// several ring positions of a connected QP, completes with the error CQE of its syndrome
// and moves the QP to ERROR with it.
TEST(Mlx5Reader, SoftDeviceCompletesMalformedWqesWithTheirSyndromes) {
    constexpr uint64_t kTimeout = 5'000'000'000ull;
    int n = 0;
    for (int variant = 0; variant < 3; ++variant) {
        gv::QpOptions o;
        o.max_send_sge = gv::detail::soft::kMaxSge;
        o.max_inline = 64;
        o.sq_depth = 8;
        // One case per pair: the QP ends in ERROR. Cases are listed once to get their count.
        const size_t cases = malformed_cases({0, 64, o.max_send_sge}, kSeg, kLocal8).size();
        for (size_t c = 0; c < cases; ++c) {
            gvtest::Pair p(gvtest::cpu_context(), o, gv::MemoryKind::Default, 64);
            gvtest::HostBuf buf(p.pd, 4096, gv::kLocalWrite);
            const gv::dev::QpHandle h = p.h(0);
            const gv::mlx5::WqeLimits lim{p.qp[0]->qpn(), o.max_inline, o.max_send_sge};
            const Malformed m = malformed_cases(lim, {buf.addr(64), 64, buf.lkey()}, {buf.addr(8), 8, buf.lkey()})[c];
            SCOPED_TRACE(::testing::Message() << m.what << " (opcode " << int(m.spec.opcode) << "), variant "
                                              << variant);
            // Move the ring's position (the WQE may then wrap past the ring's end).
            const uint32_t ring_bbs = 1u << h.q.sq_log_bb, nops = (variant * 11 + int(c)) % ring_bbs;
            for (uint32_t i = 0; i < nops; ++i) ASSERT_EQ(gv::dev::nop(h, 0), gv::Status::Ok);
            if (nops) {
                ASSERT_EQ(gv::dev::nop(h), gv::Status::Ok);
                ASSERT_EQ(gv::dev::commit(h), gv::Status::Ok);
                gv::Completion done;
                ASSERT_EQ(gv::dev::wait_send(h, 1, &done, kTimeout), gv::Status::Ok);
            }
            WqeSpec s = m.spec;
            s.qpn ^= m.qpn_xor;
            std::vector<uint8_t> w = oracle_bytes(s, 0);
            if (m.edit) m.edit(w);
            const uint32_t bbs = gv::mlx5::ds_to_bbs(uint32_t(w.size() + 15) / 16) - m.published_less;
            unsigned long long pos = 0;
            ASSERT_EQ(gv::dev::sq_reserve(h, bbs, &pos, kTimeout), gv::Status::Ok);
            w = oracle_bytes(s, pos + m.index_skew);
            if (m.edit) m.edit(w);
            for (size_t k = 0; k < w.size() / 16 && k < 4 * bbs; ++k)
                std::memcpy(gv::dev::sq_seg(h, pos, uint32_t(k)), &w[16 * k], 16);
            gv::dev::sq_publish(h, pos, bbs);
            EXPECT_EQ(gv::dev::commit(h), gv::Status::QpError);
            gv::Completion got;
            ASSERT_EQ(gv::dev::wait_send(h, 1, &got, kTimeout), gv::Status::CompletionError);
            const uint8_t want = m.exec_syndrome ? m.exec_syndrome : m.syndrome;
            EXPECT_EQ(got.cqe_opcode, MLX5_CQE_REQ_ERR);
            EXPECT_EQ(got.status, want) << "got " << gv::mlx5::syndrome_name(got.status) << ", expected "
                                        << gv::mlx5::syndrome_name(want);
            EXPECT_EQ(got.wqe_opcode, m.spec.opcode);
            EXPECT_EQ(got.wqe_counter, uint16_t(pos));
            EXPECT_EQ(p.qp[0]->state(), gv::QpState::Error);
            EXPECT_EQ(p.qp[0]->error_syndrome(), want);
            ++n;
        }
    }
    EXPECT_GT(n, 90);
}

WqeSpec spec(uint8_t op, std::vector<DataSeg> data = {}, std::vector<uint8_t> payload = {}, bool inl = false) {
    WqeSpec s;
    s.opcode = op;
    s.qpn = 0x123456;
    s.data = std::move(data);
    s.payload = std::move(payload);
    s.inline_data = inl;
    return s;
}

// Exactly at the limits is legal.
TEST(Mlx5Reader, LimitsAreInclusive) {
    const gv::mlx5::WqeLimits lim{0x123456, 64, 4};
    Ring ring(4);
    const auto ok = [&](const WqeSpec& s) {
        std::vector<uint8_t> w = oracle_bytes(s, 3);
        place(ring, 3, w);
        const WqeReader r(ring.base, ring.log_bb, 3);
        const Violation v = r.validate(3, r.bbs(), lim);
        return v.syndrome == 0 && v.unit == 0;
    };
    EXPECT_TRUE(ok(spec(MLX5_OPCODE_RDMA_WRITE, {}, std::vector<uint8_t>(64), true))) << "inline of max_inline";
    EXPECT_TRUE(ok(spec(MLX5_OPCODE_SEND, std::vector<DataSeg>(4, kSeg)))) << "max_sge segments";
    EXPECT_TRUE(ok(spec(MLX5_OPCODE_SEND, {{0x2000, 0, 0x555}}))) << "one segment of 2 GiB";
    EXPECT_TRUE(ok(spec(MLX5_OPCODE_SEND))) << "SEND of nothing";
    EXPECT_TRUE(ok(spec(MLX5_OPCODE_RDMA_WRITE))) << "WRITE of nothing";
    EXPECT_TRUE(ok(spec(MLX5_OPCODE_SEND, {}, {}, true))) << "inline of nothing";
    WqeSpec nop = spec(MLX5_OPCODE_NOP);
    std::vector<uint8_t> w = oracle_bytes(nop, 3);
    set_ds(w, 4);  // a NOP's other units are not read
    std::memset(&w[16], 0xff, 48);
    place(ring, 3, w);
    const WqeReader r(ring.base, ring.log_bb, 3);
    EXPECT_EQ(r.validate(3, 1, lim).syndrome, 0);
}

TEST(Mlx5Reader, OpcodeClasses) {
    for (int op = 0; op < 256; ++op) {
        const bool known = op == MLX5_OPCODE_NOP || op == MLX5_OPCODE_RDMA_WRITE || op == MLX5_OPCODE_RDMA_WRITE_IMM ||
                           op == MLX5_OPCODE_RDMA_READ || op == MLX5_OPCODE_SEND || op == MLX5_OPCODE_SEND_IMM ||
                           op == MLX5_OPCODE_ATOMIC_CS || op == MLX5_OPCODE_ATOMIC_FA;
        EXPECT_EQ(gv::mlx5::opcode_known(uint8_t(op)), known) << "opcode " << op;
        EXPECT_EQ(gv::mlx5::consumes_receive(uint8_t(op)),
                  op == MLX5_OPCODE_RDMA_WRITE_IMM || op == MLX5_OPCODE_SEND || op == MLX5_OPCODE_SEND_IMM)
            << "opcode " << op;
    }
}

}  // namespace
