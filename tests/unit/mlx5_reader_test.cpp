// The mlx5 layer read back: WqeReader (gpuverbs/mlx5/wqe_reader.cuh) on WQEs that
// rdma-core's helpers build (mlx5dv_set_ctrl_seg, mlx5dv_set_data_seg, and raddr / atomic /
// inline segments assembled per mlx5dv.h's structs) at random and wrapped ring positions,
// and the device API's builders round-tripped through the reader. Malformed WQEs and their
// syndromes: mlx5_reader_malformed_test.cpp; CQEs: mlx5_reader_cqe_test.cpp; the oracle they
// share: mlx5_reader_util.hpp. Random cases use fixed seeds that every failure prints with
// the iteration.
#include <endian.h>

#include <algorithm>
#include <vector>

#include "gpuverbs/device/queue_pair_device.cuh"
#include "gpuverbs/mlx5/wqe_reader.cuh"
#include "unit/mlx5_reader_util.hpp"

namespace {

using gv::mlx5::Violation;
using gv::mlx5::WqeReader;
using mlx5test::DataSeg;
using mlx5test::kIters;
using mlx5test::kSeed;
using mlx5test::oracle_bytes;
using mlx5test::pick_pos;
using mlx5test::place;
using mlx5test::Ring;
using mlx5test::Rng;
using mlx5test::same_bytes;
using mlx5test::WqeSpec;

const uint8_t kOps[] = {MLX5_OPCODE_NOP,      MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_RDMA_WRITE_IMM,
                        MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_SEND,       MLX5_OPCODE_SEND_IMM,
                        MLX5_OPCODE_ATOMIC_CS, MLX5_OPCODE_ATOMIC_FA};

/// A random well-formed WQE of opcode `op` that fits 2^log_bb WQEBBs and the limits.
WqeSpec random_spec(Rng& rng, uint8_t op, uint32_t log_bb, const gv::mlx5::WqeLimits& lim) {
    WqeSpec s;
    s.opcode = op;
    s.fm_ce_se = uint8_t(rng.u8() & (MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED | MLX5_WQE_CTRL_FENCE));
    s.qpn = lim.qpn;
    s.imm_be = rng.u32();
    s.raddr = rng.u64();
    s.rkey = rng.u32();
    if (op == MLX5_OPCODE_NOP) return s;
    if (gv::mlx5::is_atomic(op)) {
        s.swap_add = rng.u64();
        s.compare = rng.u64();
        s.data.push_back({rng.u64(), 8, rng.u32()});
        return s;
    }
    const uint32_t head = gv::mlx5::has_raddr(op) ? 2 : 1;
    const uint32_t max_ds = std::min<uint32_t>(gv::mlx5::kMaxDs, 4u << log_bb);
    if (op != MLX5_OPCODE_RDMA_READ && rng.below(2)) {
        s.inline_data = true;
        uint32_t room = (max_ds - head) * 16 - 4;  // bytes after the inline header
        uint32_t len = rng.below(std::min(room, lim.max_inline) + 1);
        s.payload.resize(len);
        rng.fill(s.payload.data(), len);
        return s;
    }
    const uint32_t n = rng.below(std::min(lim.max_sge, max_ds - head) + 1);
    for (uint32_t i = 0; i < n; ++i) {
        // At most 16 segments of under 2^27 bytes: the total stays within 2 GiB. byte_count 0
        // (2 GiB) only alone.
        uint32_t bc = rng.u32() & 0x07ffffffu;
        if (bc == 0 || (n == 1 && rng.below(8) == 0)) bc = n == 1 ? 0 : 1;
        s.data.push_back({rng.u64(), bc, rng.u32()});
    }
    return s;
}

/// Checks that the reader decodes `s` as placed at `pos`.
::testing::AssertionResult reads_as(const Ring& ring, uint64_t pos, const WqeSpec& s, const gv::mlx5::WqeLimits& lim,
                                    uint32_t ds) {
    const WqeReader w(ring.base, ring.log_bb, pos);
    const gv::mlx5::CtrlFields& c = w.ctrl();
    auto fail = [&](const char* what) { return ::testing::AssertionFailure() << what << " differs"; };
    if (c.opcode != s.opcode || w.opcode() != s.opcode) return fail("opcode");
    if (c.wqe_index != uint16_t(pos)) return fail("wqe_index");
    if (c.qpn != s.qpn) return fail("qpn");
    if (c.ds != ds || w.ds() != ds) return fail("ds");
    if (w.bbs() != gv::mlx5::ds_to_bbs(ds)) return fail("bbs");
    if (c.fm_ce_se != s.fm_ce_se) return fail("fm_ce_se");
    if (w.signaled() != ((s.fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) != 0)) return fail("signaled");
    if (c.imm_be != s.imm_be) return fail("imm");
    const Violation v = w.validate(uint16_t(pos), w.bbs(), lim);
    if (v.syndrome) return ::testing::AssertionFailure() << "valid WQE refused: syndrome " << int(v.syndrome)
                                                         << " at unit " << int(v.unit);
    if (s.opcode == MLX5_OPCODE_NOP) return ::testing::AssertionSuccess();
    if (gv::mlx5::has_raddr(s.opcode)) {
        if (w.raddr().raddr != s.raddr || w.raddr().rkey != s.rkey) return fail("raddr segment");
    }
    if (gv::mlx5::is_atomic(s.opcode)) {
        if (w.atomic().swap_add != s.swap_add || w.atomic().compare != s.compare) return fail("atomic segment");
    }
    uint32_t k = w.first_data();
    if (s.inline_data) {
        if (!w.is_inline(k)) return fail("inline bit");
        const gv::mlx5::InlinePayload in = w.inline_payload(k);
        if (in.length() != s.payload.size()) return fail("inline length");
        const size_t off = (pos * 64 + k * 16 + 4) % ring.bytes();
        if (in.first != ring.base + off) return fail("inline payload's first piece");
        if (in.second != ring.base) return fail("inline payload's second piece");
        if (in.first_len != std::min<size_t>(s.payload.size(), ring.bytes() - off)) return fail("inline split");
        std::vector<uint8_t> got(in.first, in.first + in.first_len);
        got.insert(got.end(), in.second, in.second + in.second_len);
        if (got != s.payload) return fail("inline payload");
        return ::testing::AssertionSuccess();
    }
    for (const DataSeg& d : s.data) {
        if (w.is_inline(k)) return fail("inline bit");
        const gv::mlx5::DataFields f = w.data(k++);
        if (f.addr != d.addr || f.byte_count != d.byte_count || f.lkey != d.lkey) return fail("data segment");
    }
    if (k != ds) return fail("segment count");
    return ::testing::AssertionSuccess();
}

// ---- rdma-core's WQEs, read back -----------------------------------------------------------

TEST(Mlx5Reader, RdmaCoreWqesDecodeAtRandomAndWrappedPositions) {
    Rng rng(kSeed);
    int wrapped = 0, inline_wrapped = 0;
    for (int i = 0; i < kIters; ++i) {
        TRACE_ITER(i);
        Ring ring(rng.below(6));  // 1..32 WQEBBs
        const gv::mlx5::WqeLimits lim{rng.u32() & 0xffffff, 1 + rng.below(900), 1 + rng.below(16)};
        const uint8_t op = kOps[rng.below(std::size(kOps))];
        const WqeSpec s = random_spec(rng, op, ring.log_bb, lim);
        const uint64_t pos = pick_pos(rng, ring.bbs(), i);
        rng.fill(ring.base, ring.bytes());
        const std::vector<uint8_t> w = oracle_bytes(s, pos);
        ASSERT_LE(w.size(), ring.bytes());
        place(ring, pos, w);
        ASSERT_TRUE(reads_as(ring, pos, s, lim, uint32_t(w.size() / 16))) << "opcode " << int(op) << " pos " << pos;
        const bool wraps = (pos % ring.bbs()) * 64 + w.size() > ring.bytes();
        wrapped += wraps;
        inline_wrapped += wraps && s.inline_data;
    }
    EXPECT_GT(wrapped, kIters / 10) << "too few WQEs crossed the end of the ring";
    EXPECT_GT(inline_wrapped, kIters / 40) << "too few inline payloads crossed the end of the ring";
}

// Units past the first WQEBB come from the ring, not from the reader's copy of it.
TEST(Mlx5Reader, UnitsAddressTheRing) {
    Ring ring(3);
    for (uint64_t pos : {0ull, 5ull, 7ull, 8ull + 6, (1ull << 40) + 7}) {
        const WqeReader w(ring.base, ring.log_bb, pos);
        for (uint32_t k = 4; k < 64; ++k)
            EXPECT_EQ(w.unit(k), ring.base + (pos * 64 + k * 16) % ring.bytes()) << "pos " << pos << " unit " << k;
    }
}

// ---- the device API's builders, read back ---------------------------------------------------

TEST(Mlx5Reader, DeviceBuildersRoundTrip) {
    Rng rng(kSeed + 1);
    for (int i = 0; i < kIters; ++i) {
        TRACE_ITER(i);
        Ring ring(1 + rng.below(5));
        gv::dev::QpHandle qp{};
        qp.q.sq = ring.base;
        qp.q.sq_log_bb = ring.log_bb;
        qp.q.qpn = rng.u32() & 0xffffff;
        const gv::mlx5::WqeLimits lim{qp.q.qpn, 256, 4};
        const uint64_t pos = pick_pos(rng, ring.bbs(), i);
        rng.fill(ring.base, ring.bytes());
        const uint32_t flags = rng.below(8);
        WqeSpec s;
        s.qpn = qp.q.qpn;
        s.fm_ce_se = gv::dev::fm_ce_se(flags);
        s.raddr = rng.u64();
        s.rkey = rng.u32();
        uint32_t ds = 0;
        switch (i % 3) {
            case 0: {  // gather list
                const uint8_t ops[] = {MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_RDMA_READ,
                                       MLX5_OPCODE_SEND, MLX5_OPCODE_SEND_IMM};
                s.opcode = ops[rng.below(5)];
                s.imm_be = rng.u32();
                gv::Sge sg[4];
                const uint32_t n = rng.below(5);
                for (uint32_t j = 0; j < n; ++j) {
                    sg[j] = {rng.u64(), rng.below(4) ? rng.u32() & 0x1fffffffu : 0u, rng.u32()};  // 2 GiB in all at most
                    if (sg[j].length) s.data.push_back({sg[j].addr, sg[j].length, sg[j].lkey});  // 0: skipped
                }
                ds = gv::dev::build_sge_wqe(qp, pos, s.opcode, flags, s.imm_be, s.raddr, s.rkey, sg, n);
                break;
            }
            case 1: {  // inline
                s.opcode = rng.below(2) ? MLX5_OPCODE_RDMA_WRITE : MLX5_OPCODE_SEND;
                s.inline_data = true;
                s.payload.resize(rng.below(lim.max_inline + 1));
                rng.fill(s.payload.data(), s.payload.size());
                const uint32_t imm = rng.u32();
                s.imm_be = htobe32(imm);
                ds = gv::dev::inline_wqe_ds(s.opcode, uint32_t(s.payload.size()));
                if (gv::mlx5::ds_to_bbs(ds) > ring.bbs()) continue;  // does not fit this ring
                gv::dev::build_inline_wqe(qp, pos, s.opcode, s.payload.data(), uint32_t(s.payload.size()), s.raddr,
                                          s.rkey, imm, flags, ds);
                break;
            }
            default: {  // atomic
                s.opcode = rng.below(2) ? MLX5_OPCODE_ATOMIC_CS : MLX5_OPCODE_ATOMIC_FA;
                s.swap_add = rng.u64();
                s.compare = rng.u64();
                const uint64_t laddr = rng.u64();
                const uint32_t lkey = rng.u32();
                s.data.push_back({laddr, 8, lkey});
                gv::dev::build_atomic_wqe(qp, pos, s.opcode, reinterpret_cast<void*>(laddr), lkey, s.raddr, s.rkey,
                                          s.swap_add, s.compare, flags);
                ds = 4;
                break;
            }
        }
        ASSERT_TRUE(reads_as(ring, pos, s, lim, ds)) << "opcode " << int(s.opcode) << " pos " << pos;
        // And the builder's bytes are rdma-core's (an inline WQE's padding after the payload
        // is left as it was).
        const std::vector<uint8_t> want = oracle_bytes(s, pos);
        ASSERT_EQ(want.size(), ds * 16u);
        const size_t used = s.inline_data ? 16 * gv::mlx5::has_raddr(s.opcode) + 16 + 4 + s.payload.size() : want.size();
        std::vector<uint8_t> got(used);
        for (size_t b = 0; b < used; ++b) got[b] = ring.base[(pos * 64 + b) % ring.bytes()];
        ASSERT_TRUE(same_bytes(got.data(), want.data(), used));
    }
}

// The inline builder and reader share one layout: the payload's pieces end exactly at the
// ring's end and restart at its start, for every start offset and length around the wrap.
TEST(Mlx5Reader, InlineLayoutAroundTheRingEnd) {
    for (uint32_t log_bb = 0; log_bb <= 3; ++log_bb) {
        const uint64_t bytes = 64ull << log_bb;
        for (uint64_t pos = 0; pos < 3 * (1ull << log_bb); ++pos)
            for (uint32_t k = 0; k < 4u << log_bb; ++k)
                for (uint32_t len : {0u, 1u, 11u, 12u, 13u, 60u, 200u}) {
                    if (len + 4 > bytes) continue;
                    const gv::mlx5::InlineLayout l = gv::mlx5::inline_layout(log_bb, pos, k, len);
                    const uint64_t start = (pos * 64 + k * 16 + 4) % bytes;
                    ASSERT_EQ(l.offset, start) << "log_bb " << log_bb << " pos " << pos << " k " << k;
                    ASSERT_EQ(l.first + l.second, len);
                    ASSERT_EQ(l.first, std::min<uint64_t>(len, bytes - start));
                    ASSERT_LE(l.offset + l.first, bytes);
                }
    }
}

}  // namespace
