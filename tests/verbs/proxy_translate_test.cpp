// The verbs proxy's translation (src/verbs/translate.hpp), as pure functions: every opcode and
// flag of a WQE the device API builds against the ibv_send_wr it must become, receive WQEs
// against ibv_recv_wr, malformed WQEs against the syndromes of mlx5::WqeReader, and device
// completions against the CQEs the software device writes.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpuverbs/device.cuh"
#include "verbs/status.hpp"
#include "verbs/translate.hpp"

namespace {

using namespace gv;
namespace v = gv::detail::verbs;

/// A send ring of 2^log_bb WQEBBs and the handle the device API's builders write through.
struct Ring {
    std::vector<uint8_t> mem;
    dev::QpCounters ctr{};
    dev::QpHandle h{};
    explicit Ring(uint32_t log_bb = 4, uint32_t qpn = 0x1234) : mem(size_t(64) << log_bb, 0xee) {
        h.q.sq = mem.data();
        h.q.sq_log_bb = log_bb;
        h.q.qpn = qpn;
        h.q.ctr = &ctr;
        h.q.max_inline = 972;
        h.q.max_send_sge = 8;
        h.q.sys = 1;
        h.q.host_reachable = 1;
        h.backend = Backend::Verbs;
    }
    v::SendLimits limits(uint32_t max_inline = 972, uint32_t max_sge = 8) const {
        return {h.q.qpn, max_inline, max_sge};
    }
};

struct Out {
    v::SendSlot slot{};
    std::vector<uint8_t> inl = std::vector<uint8_t>(v::kMaxInlineCopy);
};

const uint32_t kFlagSets[] = {0, kSignaled, kFence, kSolicited, kSignaled | kFence,
                              kSignaled | kFence | kSolicited};

unsigned expected_flags(uint32_t f) {
    return ((f & kSignaled) ? IBV_SEND_SIGNALED : 0u) | ((f & kFence) ? IBV_SEND_FENCE : 0u) |
           ((f & kSolicited) ? IBV_SEND_SOLICITED : 0u);
}

TEST(ProxyTranslate, OpcodeMapping) {
    const std::pair<uint8_t, ibv_wr_opcode> m[] = {
        {MLX5_OPCODE_RDMA_WRITE, IBV_WR_RDMA_WRITE},   {MLX5_OPCODE_RDMA_WRITE_IMM, IBV_WR_RDMA_WRITE_WITH_IMM},
        {MLX5_OPCODE_RDMA_READ, IBV_WR_RDMA_READ},     {MLX5_OPCODE_SEND, IBV_WR_SEND},
        {MLX5_OPCODE_SEND_IMM, IBV_WR_SEND_WITH_IMM},  {MLX5_OPCODE_ATOMIC_FA, IBV_WR_ATOMIC_FETCH_AND_ADD},
        {MLX5_OPCODE_ATOMIC_CS, IBV_WR_ATOMIC_CMP_AND_SWP}};
    for (auto [x, w] : m) {
        EXPECT_EQ(v::wr_opcode_of(x), w) << int(x);
        EXPECT_EQ(v::mlx5_opcode_of(w), x) << int(w);
    }
}

TEST(ProxyTranslate, WrId) {
    const uint64_t id = v::send_wr_id(0x1234567890ull, true);
    EXPECT_FALSE(v::wr_is_recv(id));
    EXPECT_TRUE(v::wr_user_signaled(id));
    EXPECT_EQ(v::wr_pos(id), 0x1234567890ull);
    EXPECT_FALSE(v::wr_user_signaled(v::send_wr_id(7, false)));
    const uint64_t r = v::recv_wr_id(99);
    EXPECT_TRUE(v::wr_is_recv(r));
    EXPECT_EQ(v::wr_pos(r), 99u);
    // Positions past 2^48 are rebuilt from a nearby one.
    const uint64_t big = (5ull << 48) + 10;
    EXPECT_EQ(v::wr_pos_near(v::send_wr_id(big, false), big + 100), big);
    EXPECT_EQ(v::wr_pos_near(v::send_wr_id(big - 20, false), big + 5), big - 20);  // across 2^48 * 5
    EXPECT_EQ(v::wr_pos_near(v::send_wr_id((5ull << 48) - 3, false), (5ull << 48) + 2), (5ull << 48) - 3);
}

// WRITE, WRITE_IMM, READ, SEND, SEND_IMM with 1..3 data segments, every flag combination, at
// positions whose WQE wraps the ring's end.
TEST(ProxyTranslate, SgeOpcodesEveryFlag) {
    const uint8_t ops[] = {MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_SEND,
                           MLX5_OPCODE_SEND_IMM};
    int checked = 0;
    for (uint8_t op : ops)
        for (uint32_t flags : kFlagSets)
            for (uint32_t n = 1; n <= 3; ++n)
                for (uint64_t pos : {0ull, 5ull, 15ull, 16ull + 15, 1000003ull}) {
                    Ring r;
                    Sge sg[3] = {{0x10000 + pos, 100, 0x501}, {0x20000, 7, 0x502}, {0x30000, 4096, 0x503}};
                    const uint32_t imm = 0xa1b2c3d4;
                    const uint32_t ds = dev::build_sge_wqe(r.h, pos, op, flags, mlx5::to_be32(imm), 0xfeed0000beefull,
                                                           0x7788, sg, n);
                    Out o;
                    const v::SendTranslation t = v::translate_send(r.mem.data(), 4, pos, 16, r.limits(), o.slot, o.inl.data());
                    SCOPED_TRACE("opcode " + std::to_string(op) + " flags " + std::to_string(flags) + " n " +
                                 std::to_string(n) + " pos " + std::to_string(pos));
                    ASSERT_EQ(t.kind, v::SendKind::Post);
                    EXPECT_EQ(t.opcode, op);
                    EXPECT_EQ(t.bbs, mlx5::ds_to_bbs(ds));
                    EXPECT_EQ(t.user_signaled, (flags & kSignaled) != 0);
                    const ibv_send_wr& w = o.slot.wr;
                    EXPECT_EQ(w.wr_id, v::send_wr_id(pos, flags & kSignaled));
                    EXPECT_EQ(w.next, nullptr);
                    EXPECT_EQ(w.opcode, v::wr_opcode_of(op));
                    EXPECT_EQ(w.send_flags, expected_flags(flags));
                    const bool imm_op = op == MLX5_OPCODE_RDMA_WRITE_IMM || op == MLX5_OPCODE_SEND_IMM;
                    EXPECT_EQ(w.imm_data, imm_op ? mlx5::to_be32(imm) : 0u);  // wire order in both
                    if (op == MLX5_OPCODE_SEND || op == MLX5_OPCODE_SEND_IMM) {
                        EXPECT_EQ(w.wr.rdma.remote_addr, 0u);
                    } else {
                        EXPECT_EQ(w.wr.rdma.remote_addr, 0xfeed0000beefull);
                        EXPECT_EQ(w.wr.rdma.rkey, 0x7788u);
                    }
                    ASSERT_EQ(w.num_sge, int(n));
                    uint32_t total = 0;
                    for (uint32_t i = 0; i < n; ++i) {
                        EXPECT_EQ(w.sg_list[i].addr, sg[i].addr);
                        EXPECT_EQ(w.sg_list[i].length, sg[i].length);
                        EXPECT_EQ(w.sg_list[i].lkey, sg[i].lkey);
                        total += sg[i].length;
                    }
                    EXPECT_EQ(t.byte_len, total);  // what the software device reports
                    ++checked;
                }
    EXPECT_EQ(checked, 5 * 6 * 3 * 5);
}

// Inline WRITE, WRITE_IMM, SEND, SEND_IMM: the payload (also one that runs past the ring's
// end) arrives whole in one segment with IBV_SEND_INLINE.
TEST(ProxyTranslate, InlineEveryOpcodeAndWrap) {
    const uint8_t ops[] = {MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_SEND, MLX5_OPCODE_SEND_IMM};
    std::vector<uint8_t> payload(972);
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = uint8_t(i * 31 + 7);
    int wrapped = 0;
    for (uint8_t op : ops)
        for (uint32_t len : {0u, 1u, 12u, 28u, 60u, 64u, 200u, 972u})
            for (uint64_t pos : {0ull, 14ull, 15ull, 31ull})
                for (uint32_t flags : {0u, kSignaled | kFence}) {
                    Ring r(5);  // 32 WQEBBs: a 972-byte payload fits
                    const uint32_t ds = dev::inline_wqe_ds(op, len);
                    dev::build_inline_wqe(r.h, pos, op, payload.data(), len, 0xabc000ull, 0x99, 0x01020304, flags, ds);
                    const mlx5::InlineLayout l = mlx5::inline_layout(5, pos, op == MLX5_OPCODE_SEND || op == MLX5_OPCODE_SEND_IMM ? 1 : 2, len);
                    wrapped += l.second > 0;
                    Out o;
                    const v::SendTranslation t = v::translate_send(r.mem.data(), 5, pos, 32, r.limits(), o.slot, o.inl.data());
                    SCOPED_TRACE("opcode " + std::to_string(op) + " len " + std::to_string(len) + " pos " + std::to_string(pos));
                    ASSERT_EQ(t.kind, v::SendKind::Post);
                    const ibv_send_wr& w = o.slot.wr;
                    EXPECT_EQ(w.send_flags, expected_flags(flags) | IBV_SEND_INLINE);
                    EXPECT_EQ(w.opcode, v::wr_opcode_of(op));
                    ASSERT_EQ(w.num_sge, 1);
                    EXPECT_EQ(w.sg_list[0].length, len);
                    EXPECT_EQ(w.sg_list[0].addr, reinterpret_cast<uint64_t>(o.inl.data()));  // the proxy's copy
                    EXPECT_EQ(std::memcmp(o.inl.data(), payload.data(), len), 0);
                    EXPECT_EQ(t.byte_len, len);
                    EXPECT_EQ(t.bbs, mlx5::ds_to_bbs(ds));
                    if (op == MLX5_OPCODE_RDMA_WRITE || op == MLX5_OPCODE_RDMA_WRITE_IMM) {
                        EXPECT_EQ(w.wr.rdma.remote_addr, 0xabc000u);
                        EXPECT_EQ(w.wr.rdma.rkey, 0x99u);
                    }
                }
    EXPECT_GT(wrapped, 20) << "too few cases wrapped the ring";
}

TEST(ProxyTranslate, Atomics) {
    for (uint8_t op : {uint8_t(MLX5_OPCODE_ATOMIC_FA), uint8_t(MLX5_OPCODE_ATOMIC_CS)})
        for (uint32_t flags : kFlagSets)
            for (uint64_t pos : {0ull, 15ull, 77ull}) {
                Ring r;
                uint64_t old = 0;
                dev::build_atomic_wqe(r.h, pos, op, &old, 0x4242, 0x5000008ull, 0x77, 0x1111222233334444ull,
                                      0x5555666677778888ull, flags);
                Out o;
                const v::SendTranslation t = v::translate_send(r.mem.data(), 4, pos, 16, r.limits(), o.slot, o.inl.data());
                ASSERT_EQ(t.kind, v::SendKind::Post);
                EXPECT_EQ(t.byte_len, 8u);
                EXPECT_EQ(t.bbs, 1u);
                const ibv_send_wr& w = o.slot.wr;
                EXPECT_EQ(w.opcode, v::wr_opcode_of(op));
                EXPECT_EQ(w.send_flags, expected_flags(flags));
                EXPECT_EQ(w.wr.atomic.remote_addr, 0x5000008u);
                EXPECT_EQ(w.wr.atomic.rkey, 0x77u);
                if (op == MLX5_OPCODE_ATOMIC_FA) {
                    EXPECT_EQ(w.wr.atomic.compare_add, 0x1111222233334444ull);  // the value to add
                } else {
                    EXPECT_EQ(w.wr.atomic.compare_add, 0x5555666677778888ull);  // compare
                    EXPECT_EQ(w.wr.atomic.swap, 0x1111222233334444ull);         // swap
                }
                ASSERT_EQ(w.num_sge, 1);
                EXPECT_EQ(w.sg_list[0].addr, reinterpret_cast<uint64_t>(&old));
                EXPECT_EQ(w.sg_list[0].length, 8u);
                EXPECT_EQ(w.sg_list[0].lkey, 0x4242u);
            }
}

TEST(ProxyTranslate, NopIsCompletedByTheProxy) {
    for (uint32_t flags : kFlagSets) {
        Ring r;
        mlx5::set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(dev::sq_seg(r.h, 3, 0)), 3, MLX5_OPCODE_NOP, 0,
                           r.h.q.qpn, dev::fm_ce_se(flags), 1, 0, 0);
        Out o;
        const v::SendTranslation t = v::translate_send(r.mem.data(), 4, 3, 16, r.limits(), o.slot, o.inl.data());
        EXPECT_EQ(t.kind, v::SendKind::Nop);
        EXPECT_EQ(t.opcode, MLX5_OPCODE_NOP);
        EXPECT_EQ(t.bbs, 1u);
        EXPECT_EQ(t.byte_len, 0u);
        EXPECT_EQ(t.user_signaled, (flags & kSignaled) != 0);
    }
}

// The device API posts put-with-signal as an unsignaled WRITE followed by a fetch-add that
// carries the caller's flags: two WQEs, translated in order into that chain.
TEST(ProxyTranslate, PutWithSignalIsWriteThenFetchAdd) {
    Ring r;
    uint8_t data[256];
    uint64_t old = 0;
    ASSERT_EQ(dev::put_signal(r.h, data, sizeof data, 0x11, 0x9000, 0x22, &old, 0x33, 0xa000, 0x44, 5,
                              kSignaled | kFence),
              Status::Ok);
    const unsigned long long end = r.ctr.sq_ready;
    ASSERT_EQ(end, 2u);
    Out a, b;
    const v::SendTranslation ta = v::translate_send(r.mem.data(), 4, 0, 2, r.limits(), a.slot, a.inl.data());
    const v::SendTranslation tb = v::translate_send(r.mem.data(), 4, ta.bbs, 2 - ta.bbs, r.limits(), b.slot, b.inl.data());
    ASSERT_EQ(ta.kind, v::SendKind::Post);
    ASSERT_EQ(tb.kind, v::SendKind::Post);
    EXPECT_EQ(a.slot.wr.opcode, IBV_WR_RDMA_WRITE);
    EXPECT_EQ(a.slot.wr.send_flags, 0u);  // the data's WRITE is unsignaled
    EXPECT_EQ(a.slot.wr.wr.rdma.remote_addr, 0x9000u);
    EXPECT_EQ(a.slot.wr.sg_list[0].length, 256u);
    EXPECT_EQ(b.slot.wr.opcode, IBV_WR_ATOMIC_FETCH_AND_ADD);
    EXPECT_EQ(b.slot.wr.send_flags, unsigned(IBV_SEND_SIGNALED | IBV_SEND_FENCE));
    EXPECT_EQ(b.slot.wr.wr.atomic.remote_addr, 0xa000u);
    EXPECT_EQ(b.slot.wr.wr.atomic.rkey, 0x44u);
    EXPECT_EQ(b.slot.wr.wr.atomic.compare_add, 5u);
    EXPECT_EQ(b.slot.wr.sg_list[0].addr, reinterpret_cast<uint64_t>(&old));
}

// A data segment of byte count 0 means 2 GiB on mlx5, and so in the work request.
TEST(ProxyTranslate, ZeroByteCountIsTwoGiB) {
    Ring r;
    auto* ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg*>(dev::sq_seg(r.h, 0, 0));
    mlx5::set_raddr_seg(reinterpret_cast<mlx5_wqe_raddr_seg*>(dev::sq_seg(r.h, 0, 1)), 0x1000, 1);
    mlx5::set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(dev::sq_seg(r.h, 0, 2)), 0, 5, 0x2000);
    mlx5::set_ctrl_seg(ctrl, 0, MLX5_OPCODE_RDMA_WRITE, 0, r.h.q.qpn, 0, 3, 0, 0);
    Out o;
    const v::SendTranslation t = v::translate_send(r.mem.data(), 4, 0, 16, r.limits(), o.slot, o.inl.data());
    ASSERT_EQ(t.kind, v::SendKind::Post);
    EXPECT_EQ(o.slot.wr.sg_list[0].length, 0x80000000u);
    EXPECT_EQ(t.byte_len, 0x80000000u);
}

// Malformed WQEs: the reader's checks and syndromes, as the software device reports them.
TEST(ProxyTranslate, MalformedWqes) {
    auto run = [](const char* what, auto&& build, uint32_t published, uint8_t syndrome, uint32_t bbs,
                  v::SendLimits lim = Ring().limits()) {
        Ring r;
        build(r);
        Out o;
        const v::SendTranslation t = v::translate_send(r.mem.data(), 4, 2, published, lim, o.slot, o.inl.data());
        EXPECT_EQ(t.kind, v::SendKind::Malformed) << what;
        EXPECT_EQ(t.syndrome, syndrome) << what;
        EXPECT_EQ(t.bbs, bbs) << what;
        return t;
    };
    auto ctrl = [](Ring& r, uint16_t idx, uint8_t op, uint32_t qpn, uint8_t ds) {
        mlx5::set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(dev::sq_seg(r.h, 2, 0)), idx, op, 0, qpn,
                           MLX5_WQE_CTRL_CQ_UPDATE, ds, 0, 0);
    };
    const uint8_t QP_OP = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, LEN = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
    run("wrong index", [&](Ring& r) { ctrl(r, 3, MLX5_OPCODE_RDMA_WRITE, r.h.q.qpn, 3); }, 16, QP_OP, 1);
    run("wrong QP", [&](Ring& r) { ctrl(r, 2, MLX5_OPCODE_RDMA_WRITE, r.h.q.qpn + 1, 3); }, 16, QP_OP, 1);
    run("ds 0", [&](Ring& r) { ctrl(r, 2, MLX5_OPCODE_SEND, r.h.q.qpn, 0); }, 16, QP_OP, 1);
    run("unknown opcode", [&](Ring& r) { ctrl(r, 2, 0x1f, r.h.q.qpn, 1); }, 16, QP_OP, 1);
    run("RDMA without raddr", [&](Ring& r) { ctrl(r, 2, MLX5_OPCODE_RDMA_READ, r.h.q.qpn, 1); }, 16, QP_OP, 1);
    const v::SendTranslation big = run(
        "larger than published", [&](Ring& r) { ctrl(r, 2, MLX5_OPCODE_RDMA_WRITE, r.h.q.qpn, 9); }, 2, QP_OP, 1);
    EXPECT_TRUE(big.oversize);
    run("atomic of ds 3", [&](Ring& r) { ctrl(r, 2, MLX5_OPCODE_ATOMIC_FA, r.h.q.qpn, 3); }, 16, QP_OP, 1);
    run("atomic of 4 bytes",
        [&](Ring& r) {
            uint64_t x;
            dev::build_atomic_wqe(r.h, 2, MLX5_OPCODE_ATOMIC_FA, &x, 1, 0x1000, 2, 1, 0, kSignaled);
            mlx5::set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(dev::sq_seg(r.h, 2, 3)), 4, 1, 0x2000);
        },
        16, LEN, 1);
    run("inline past max_inline",
        [&](Ring& r) {
            uint8_t d[100] = {};
            dev::build_inline_wqe(r.h, 2, MLX5_OPCODE_SEND, d, 100, 0, 0, 0, kSignaled, dev::inline_wqe_ds(MLX5_OPCODE_SEND, 100));
        },
        16, LEN, mlx5::ds_to_bbs(dev::inline_wqe_ds(MLX5_OPCODE_SEND, 100)), Ring().limits(64, 8));
    run("inline READ",
        [&](Ring& r) {
            uint8_t d[8] = {};
            dev::build_inline_wqe(r.h, 2, MLX5_OPCODE_RDMA_WRITE, d, 8, 0x1000, 1, 0, kSignaled, 3);
            auto* c = reinterpret_cast<mlx5_wqe_ctrl_seg*>(dev::sq_seg(r.h, 2, 0));
            mlx5::set_ctrl_seg(c, 2, MLX5_OPCODE_RDMA_READ, 0, r.h.q.qpn, MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0);
        },
        16, QP_OP, 1);
    run("more SGEs than granted",
        [&](Ring& r) {
            Sge sg[3] = {{0x1000, 8, 1}, {0x2000, 8, 1}, {0x3000, 8, 1}};
            dev::build_sge_wqe(r.h, 2, MLX5_OPCODE_SEND, kSignaled, 0, 0, 0, sg, 3);
        },
        16, QP_OP, 1, Ring().limits(972, 2));
}

// translate_send takes the common WQE (one WQEBB, one data segment or one inline payload) on a
// path of one pass; it must give exactly what the general path gives, for well-formed WQEs of
// every shape and for WQEs with random fields (wrong index or QP, any ds, opcode, byte count,
// inline flag, limits). Seeded, so a failure repeats.
TEST(ProxyTranslate, OnePassMatchesTheGeneralPath) {
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    auto rnd = [&seed]() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        return seed;
    };
    const uint8_t ops[] = {MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_RDMA_READ,
                           MLX5_OPCODE_SEND,       MLX5_OPCODE_SEND_IMM,       MLX5_OPCODE_ATOMIC_FA,
                           MLX5_OPCODE_ATOMIC_CS,  MLX5_OPCODE_NOP,            0x1f};
    int one_pass = 0, posted = 0;
    for (int i = 0; i < 40000; ++i) {
        Ring r(4);
        const uint64_t pos = rnd() % 40;
        const uint8_t op = ops[rnd() % 9];
        const uint32_t flags = kFlagSets[rnd() % 6];
        const uint64_t mode = rnd() % 4;
        if (mode == 0) {  // a WQE the API builds: 1-3 entries
            Sge sg[3] = {{rnd(), uint32_t(rnd() % 3 ? rnd() % 70000 : 0), uint32_t(rnd())},
                         {rnd(), uint32_t(rnd() % 100), uint32_t(rnd())},
                         {rnd(), 4096, uint32_t(rnd())}};
            dev::build_sge_wqe(r.h, pos, op, flags, uint32_t(rnd()), rnd(), uint32_t(rnd()), sg, 1 + uint32_t(rnd() % 3));
        } else if (mode == 1) {  // an inline one
            uint8_t d[300];
            for (auto& b : d) b = uint8_t(rnd());
            const uint32_t len = uint32_t(rnd() % (rnd() % 2 ? 45 : 300));
            dev::build_inline_wqe(r.h, pos, op, d, len, rnd(), uint32_t(rnd()), uint32_t(rnd()), flags,
                                  dev::inline_wqe_ds(op, len));
        } else {  // random segments under a ctrl of random fields (some right)
            for (uint32_t k = 0; k < 8; ++k) {
                auto* seg = reinterpret_cast<uint32_t*>(dev::sq_seg(r.h, pos, k));
                for (int j = 0; j < 4; ++j) seg[j] = uint32_t(rnd());
                if (rnd() % 2) seg[0] = mlx5::to_be32(uint32_t(rnd() % 200) | (rnd() % 2 ? MLX5_INLINE_SEG : 0));
            }
            const uint16_t idx = rnd() % 4 ? uint16_t(pos) : uint16_t(rnd());
            const uint32_t qpn = rnd() % 4 ? r.h.q.qpn : uint32_t(rnd() & 0xffffff);
            mlx5::set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(dev::sq_seg(r.h, pos, 0)), idx, op, 0, qpn,
                               uint8_t(rnd()), uint8_t(rnd() % 9), 0, uint32_t(rnd()));
        }
        const uint32_t published = 1 + uint32_t(rnd() % 16);
        const v::SendLimits lim = r.limits(uint32_t(rnd() % 2 ? 972 : rnd() % 64), 1 + uint32_t(rnd() % 8));
        Out a, b;
        const v::SendTranslation ta = v::translate_send(r.mem.data(), 4, pos, published, lim, a.slot, a.inl.data());
        const v::SendTranslation tb =
            v::translate_send_general(mlx5::WqeReader(r.mem.data(), 4, pos), pos, published, lim, b.slot, b.inl.data());
        SCOPED_TRACE("case " + std::to_string(i) + " mode " + std::to_string(mode) + " opcode " + std::to_string(op));
        ASSERT_EQ(int(ta.kind), int(tb.kind));
        ASSERT_EQ(ta.syndrome, tb.syndrome);
        ASSERT_EQ(ta.opcode, tb.opcode);
        ASSERT_EQ(ta.user_signaled, tb.user_signaled);
        ASSERT_EQ(ta.oversize, tb.oversize);
        ASSERT_EQ(ta.bbs, tb.bbs);
        if (ta.kind != v::SendKind::Post) continue;
        ++posted;
        const mlx5::WqeReader w(r.mem.data(), 4, pos);
        if (w.ds() <= 4 && (op == MLX5_OPCODE_SEND || op == MLX5_OPCODE_SEND_IMM ? w.ds() >= 2 : w.ds() >= 3) &&
            !mlx5::is_atomic(op) && (w.is_inline(w.first_data()) || w.ds() == w.first_data() + 1))
            ++one_pass;
        ASSERT_EQ(ta.byte_len, tb.byte_len);
        const ibv_send_wr &x = a.slot.wr, &y = b.slot.wr;
        ASSERT_EQ(x.wr_id, y.wr_id);
        ASSERT_EQ(x.next, y.next);
        ASSERT_EQ(x.opcode, y.opcode);
        ASSERT_EQ(x.send_flags, y.send_flags);
        ASSERT_EQ(x.imm_data, y.imm_data);
        ASSERT_EQ(x.wr.atomic.remote_addr, y.wr.atomic.remote_addr);
        ASSERT_EQ(x.wr.atomic.compare_add, y.wr.atomic.compare_add);
        ASSERT_EQ(x.wr.atomic.swap, y.wr.atomic.swap);
        ASSERT_EQ(x.wr.atomic.rkey, y.wr.atomic.rkey);
        ASSERT_EQ(x.num_sge, y.num_sge);
        for (int k = 0; k < x.num_sge; ++k) {
            ASSERT_EQ(x.sg_list[k].length, y.sg_list[k].length);
            ASSERT_EQ(x.sg_list[k].lkey, y.sg_list[k].lkey);
            if (x.send_flags & IBV_SEND_INLINE)  // each path's own copy, with the same bytes
                ASSERT_EQ(std::memcmp(reinterpret_cast<const void*>(x.sg_list[k].addr),
                                      reinterpret_cast<const void*>(y.sg_list[k].addr), x.sg_list[k].length), 0);
            else
                ASSERT_EQ(x.sg_list[k].addr, y.sg_list[k].addr);
        }
    }
    // Both paths were exercised (about 4100 one-pass and 4900 other posted WQEs with this seed).
    EXPECT_GT(one_pass, 3000) << posted;
    EXPECT_GT(posted - one_pass, 1000) << one_pass;
}

TEST(ProxyTranslate, ReceiveWqes) {
    alignas(16) uint8_t wqe[64];
    auto* seg = reinterpret_cast<mlx5_wqe_data_seg*>(wqe);
    v::RecvSlot s{};
    // Two entries, then the end marker.
    mlx5::set_data_seg(&seg[0], 100, 0x11, 0x1000);
    mlx5::set_data_seg(&seg[1], 0, 0x12, 0x2000);  // byte count 0: 2 GiB
    mlx5::set_data_seg(&seg[2], 0, MLX5_INVALID_LKEY, 0);
    ASSERT_TRUE(v::translate_recv(wqe, 64, 77, 4, s));
    EXPECT_EQ(s.wr.wr_id, v::recv_wr_id(77));
    EXPECT_EQ(s.wr.next, nullptr);
    ASSERT_EQ(s.wr.num_sge, 2);
    EXPECT_EQ(s.wr.sg_list[0].addr, 0x1000u);
    EXPECT_EQ(s.wr.sg_list[0].length, 100u);
    EXPECT_EQ(s.wr.sg_list[0].lkey, 0x11u);
    EXPECT_EQ(s.wr.sg_list[1].length, 0x80000000u);
    // A full stride needs no marker.
    for (int i = 0; i < 4; ++i) mlx5::set_data_seg(&seg[i], 8, 0x20 + i, 0x100 * i);
    ASSERT_TRUE(v::translate_recv(wqe, 64, 1, 4, s));
    EXPECT_EQ(s.wr.num_sge, 4);
    // No entry: a receive for a WRITE_IMM or an empty SEND.
    mlx5::set_data_seg(&seg[0], 0, MLX5_INVALID_LKEY, 0);
    ASSERT_TRUE(v::translate_recv(wqe, 64, 2, 4, s));
    EXPECT_EQ(s.wr.num_sge, 0);
    // More entries than the device QP takes.
    for (int i = 0; i < 4; ++i) mlx5::set_data_seg(&seg[i], 8, 0x20 + i, 0x100 * i);
    EXPECT_FALSE(v::translate_recv(wqe, 64, 3, 3, s));
}

/// Writes f into a CQE and decodes it as a poller does.
Completion roundtrip(const mlx5::CqeFields& f) {
    alignas(64) mlx5_cqe64 cqe{};
    mlx5::write_cqe(&cqe, f, 0, false);
    uint8_t op_own = 0;
    EXPECT_TRUE(mlx5::cqe_ready(&cqe, 0, 4, false, &op_own));
    return mlx5::decode_cqe(&cqe, op_own);
}

TEST(ProxyTranslate, SendCompletions) {
    ibv_wc wc{};
    wc.status = IBV_WC_SUCCESS;
    wc.byte_len = 12345;  // undefined for sends: the proxy's own count is reported
    Completion c = roundtrip(v::send_cqe(wc, 0x77, 0x1fffe, MLX5_OPCODE_RDMA_READ, 4096));
    EXPECT_TRUE(c.ok());
    EXPECT_EQ(c.cqe_opcode, MLX5_CQE_REQ);
    EXPECT_EQ(c.wqe_opcode, MLX5_OPCODE_RDMA_READ);
    EXPECT_EQ(c.wqe_counter, 0xfffeu);
    EXPECT_EQ(c.qpn, 0x77u);
    EXPECT_EQ(c.byte_len, 4096u);
    // Every error status: REQ_ERR with its syndrome (never success); the vendor byte carries
    // the status itself where the syndrome is not its exact twin.
    for (int s = IBV_WC_LOC_LEN_ERR; s <= IBV_WC_TM_RNDV_INCOMPLETE; ++s) {
        wc.status = ibv_wc_status(s);
        wc.vendor_err = 0x42;
        c = roundtrip(v::send_cqe(wc, 0x77, 5, MLX5_OPCODE_SEND, 10));
        SCOPED_TRACE(v::wc_status_name(wc.status));
        EXPECT_FALSE(c.ok());
        EXPECT_EQ(c.cqe_opcode, MLX5_CQE_REQ_ERR);
        EXPECT_EQ(c.status, v::wc_status_to_syndrome(wc.status));
        EXPECT_EQ(c.vendor_err, v::wc_status_exact(wc.status) ? 0x42 : s);
        EXPECT_EQ(c.wqe_opcode, MLX5_OPCODE_SEND);
        EXPECT_EQ(c.wqe_counter, 5u);
        EXPECT_EQ(c.qpn, 0x77u);
    }
}

// Receive completions: the opcodes, byte count, sender and the immediate in the byte order the
// software device writes it (what the WQE carried), so decode_cqe gives the host value.
TEST(ProxyTranslate, ReceiveCompletions) {
    const uint32_t imm = 0xdeadbeef;
    ibv_wc wc{};
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = IBV_WC_RECV;
    wc.byte_len = 300;
    wc.src_qp = 0x55;
    Completion c = roundtrip(v::recv_cqe(wc, 0x66, 0x10003));
    EXPECT_EQ(c.cqe_opcode, MLX5_CQE_RESP_SEND);
    EXPECT_TRUE(c.is_recv());
    EXPECT_EQ(c.byte_len, 300u);
    EXPECT_EQ(c.wqe_counter, 3u);
    EXPECT_EQ(c.qpn, 0x66u);
    EXPECT_EQ(c.imm, 0u);
    wc.wc_flags = IBV_WC_WITH_IMM;
    wc.imm_data = mlx5::to_be32(imm);  // network order, as libibverbs gives it
    c = roundtrip(v::recv_cqe(wc, 0x66, 4));
    EXPECT_EQ(c.cqe_opcode, MLX5_CQE_RESP_SEND_IMM);
    EXPECT_EQ(c.imm, imm);
    wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    c = roundtrip(v::recv_cqe(wc, 0x66, 5));
    EXPECT_EQ(c.cqe_opcode, MLX5_CQE_RESP_WR_IMM);
    EXPECT_EQ(c.imm, imm);
    EXPECT_EQ(c.byte_len, 300u);
    // The software device's own responder CQE for the same completion: the same fields.
    mlx5::CqeFields soft{};
    soft.cqe_opcode = MLX5_CQE_RESP_WR_IMM;
    soft.qpn = 0x66;
    soft.rqpn = 0x55;
    soft.wqe_counter = 5;
    soft.byte_cnt = 300;
    soft.imm_be = mlx5::to_be32(imm);
    const mlx5::CqeFields mine = v::recv_cqe(wc, 0x66, 5);
    EXPECT_EQ(std::memcmp(&mine, &soft, sizeof soft), 0);
    wc.status = IBV_WC_LOC_LEN_ERR;
    c = roundtrip(v::recv_cqe(wc, 0x66, 6));
    EXPECT_EQ(c.cqe_opcode, MLX5_CQE_RESP_ERR);
    EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
    EXPECT_TRUE(c.is_recv());
}

TEST(ProxyTranslate, LocalCompletions) {
    Completion c = roundtrip(v::local_send_cqe(0x9, 0x10007, MLX5_OPCODE_NOP, 0));
    EXPECT_TRUE(c.ok());
    EXPECT_EQ(c.cqe_opcode, MLX5_CQE_REQ);
    EXPECT_EQ(c.wqe_opcode, MLX5_OPCODE_NOP);
    EXPECT_EQ(c.wqe_counter, 7u);
    c = roundtrip(v::local_send_cqe(0x9, 8, MLX5_OPCODE_RDMA_WRITE, MLX5_CQE_SYNDROME_WR_FLUSH_ERR));
    EXPECT_EQ(c.cqe_opcode, MLX5_CQE_REQ_ERR);
    EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
    EXPECT_EQ(c.wqe_opcode, MLX5_OPCODE_RDMA_WRITE);
    c = roundtrip(v::local_recv_flush_cqe(0x9, 0x20001));
    EXPECT_EQ(c.cqe_opcode, MLX5_CQE_RESP_ERR);
    EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
    EXPECT_EQ(c.wqe_counter, 1u);
    EXPECT_TRUE(c.is_recv());
}

}  // namespace
