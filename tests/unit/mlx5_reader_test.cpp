// The mlx5 layer read back: WqeReader (gpuverbs/mlx5/wqe_reader.cuh) on WQEs that
// rdma-core's helpers build (mlx5dv_set_ctrl_seg, mlx5dv_set_data_seg, and raddr / atomic /
// inline segments assembled per mlx5dv.h's structs) at random and wrapped ring positions;
// the device API's builders round-tripped through the reader; every malformed WQE mapped
// to its syndrome; and write_cqe (gpuverbs/mlx5/cqe.cuh) against decode_cqe and
// rdma-core's mlx5_cqe64 / mlx5_err_cqe layouts, owner bit on both passes. Random cases use
// fixed seeds that every failure prints with the iteration.
#include <endian.h>

#include <algorithm>
#include <vector>

#include "gpuverbs/detail/soft/state.cuh"
#include "gpuverbs/device/queue_pair_device.cuh"
#include "gpuverbs/mlx5/cqe.cuh"
#include "gpuverbs/mlx5/wqe_reader.cuh"
#include "unit/mlx5_test_util.hpp"

namespace {

using gv::mlx5::Violation;
using gv::mlx5::WqeReader;
using mlx5test::pick_pos;
using mlx5test::Ring;
using mlx5test::Rng;
using mlx5test::same_bytes;

constexpr uint64_t kSeed = 0x6776'6d6c'7835'0002ull;
constexpr int kIters = 4000;

constexpr uint8_t kQpOp = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
constexpr uint8_t kLength = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;

// ---- WQEs as rdma-core builds them -------------------------------------------------------

struct DataSeg {
    uint64_t addr;
    uint32_t byte_count;
    uint32_t lkey;
};

/// One WQE's contents, from which the oracle lays out the bytes.
struct WqeSpec {
    uint8_t opcode = MLX5_OPCODE_NOP;
    uint8_t fm_ce_se = 0;
    uint32_t qpn = 0;
    uint32_t imm_be = 0;
    uint64_t raddr = 0;
    uint32_t rkey = 0;
    uint64_t swap_add = 0, compare = 0;
    std::vector<DataSeg> data;      // data segments (atomics: the one local segment)
    std::vector<uint8_t> payload;   // inline payload, when `inline_data`
    bool inline_data = false;
};

/// The WQE's bytes, linear, built with rdma-core's helpers and mlx5dv.h's structs.
std::vector<uint8_t> oracle_bytes(const WqeSpec& s, uint64_t pos) {
    std::vector<uint8_t> w(16 * 64, 0);
    uint32_t k = 1;
    if (gv::mlx5::has_raddr(s.opcode)) {
        auto* r = reinterpret_cast<mlx5_wqe_raddr_seg*>(&w[16 * k++]);
        r->raddr = htobe64(s.raddr);
        r->rkey = htobe32(s.rkey);
        r->reserved = 0;
    }
    if (gv::mlx5::is_atomic(s.opcode)) {
        auto* a = reinterpret_cast<mlx5_wqe_atomic_seg*>(&w[16 * k++]);
        a->swap_add = htobe64(s.swap_add);
        a->compare = htobe64(s.compare);
    }
    if (s.inline_data) {
        auto* h = reinterpret_cast<mlx5_wqe_inl_data_seg*>(&w[16 * k]);
        h->byte_count = htobe32(uint32_t(s.payload.size()) | MLX5_INLINE_SEG);
        std::copy(s.payload.begin(), s.payload.end(), w.begin() + 16 * k + sizeof(*h));
        k += (sizeof(*h) + s.payload.size() + 15) / 16;
    } else {
        for (const DataSeg& d : s.data)
            mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(&w[16 * k++]), d.byte_count, d.lkey,
                                uintptr_t(d.addr));
    }
    mlx5dv_set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(w.data()), uint16_t(pos), s.opcode, 0, s.qpn,
                        s.fm_ce_se, uint8_t(k), 0, s.imm_be);
    w.resize(16 * k);
    return w;
}

/// Copies a WQE's 16-byte units to their ring positions (past the ring's end: its start).
void place(Ring& ring, uint64_t pos, const std::vector<uint8_t>& w) {
    for (size_t k = 0; k < w.size() / 16; ++k)
        std::memcpy(ring.base + (pos * 64 + k * 16) % ring.bytes(), &w[16 * k], 16);
}

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

// ---- 1. rdma-core's WQEs, read back --------------------------------------------------------

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

// ---- 2. the device API's builders, read back ------------------------------------------------

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

// ---- 3. malformed WQEs and their syndromes ---------------------------------------------------

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

// ---- 4. CQEs: writer, decoder and rdma-core's layout ------------------------------------------

struct alignas(64) CqeBytes {
    uint8_t b[64];
    mlx5_cqe64* cqe() { return reinterpret_cast<mlx5_cqe64*>(b); }
};

/// The CQE rdma-core's structs describe for f: every field the kind carries, the rest zero.
CqeBytes oracle_cqe(const gv::mlx5::CqeFields& f, uint8_t owner) {
    CqeBytes want{};
    if (f.cqe_opcode == MLX5_CQE_REQ_ERR || f.cqe_opcode == MLX5_CQE_RESP_ERR) {
        auto* e = reinterpret_cast<mlx5_err_cqe*>(want.b);
        e->syndrome = f.syndrome;
        e->vendor_err_synd = f.vendor_err;
        e->s_wqe_opcode_qpn = htobe32((uint32_t(f.wqe_opcode) << 24) | (f.qpn & 0xffffff));
        e->wqe_counter = htobe16(f.wqe_counter);
        e->op_own = uint8_t(f.cqe_opcode << 4) | owner;
    } else {
        auto* c = want.cqe();
        c->imm_inval_pkey = f.imm_be;
        c->byte_cnt = htobe32(f.byte_cnt);
        c->sop_drop_qpn = htobe32((uint32_t(f.wqe_opcode) << 24) | (f.qpn & 0xffffff));
        c->flags_rqpn = htobe32(f.rqpn & 0xffffff);
        c->wqe_counter = htobe16(f.wqe_counter);
        mlx5dv_set_cqe_owner(c, owner);
        c->op_own = uint8_t((c->op_own & 0x0f) | (f.cqe_opcode << 4));
    }
    return want;
}

TEST(Mlx5ReaderCqe, WrittenCqesMatchRdmaCoreAndDecodeBack) {
    const uint8_t wqe_ops[] = {MLX5_OPCODE_NOP,  MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_RDMA_WRITE_IMM,
                               MLX5_OPCODE_SEND, MLX5_OPCODE_SEND_IMM,   MLX5_OPCODE_RDMA_READ,
                               MLX5_OPCODE_ATOMIC_CS, MLX5_OPCODE_ATOMIC_FA};
    const uint8_t cqe_ops[] = {MLX5_CQE_REQ, MLX5_CQE_RESP_WR_IMM, MLX5_CQE_RESP_SEND, MLX5_CQE_RESP_SEND_IMM,
                               MLX5_CQE_REQ_ERR, MLX5_CQE_RESP_ERR};
    Rng rng(kSeed + 3);
    for (int i = 0; i < kIters; ++i) {
        TRACE_ITER(i);
        const uint8_t op = cqe_ops[i % std::size(cqe_ops)];
        const bool err = op == MLX5_CQE_REQ_ERR || op == MLX5_CQE_RESP_ERR;
        const bool req = op == MLX5_CQE_REQ || op == MLX5_CQE_REQ_ERR;
        gv::mlx5::CqeFields f{};
        f.cqe_opcode = op;
        f.wqe_counter = rng.u16();
        f.qpn = rng.u32() & 0xffffff;
        if (req) f.wqe_opcode = wqe_ops[rng.below(std::size(wqe_ops))];
        if (err) {
            f.syndrome = uint8_t(1 + rng.below(0x22));
            f.vendor_err = rng.u8();
        } else {
            f.byte_cnt = rng.u32();
            f.imm_be = rng.u32();
            if (!req) f.rqpn = rng.u32() & 0xffffff;
        }
        // Consumer indices of both passes over a ring of 2^log_cnt entries.
        const uint32_t log_cnt = rng.below(8);
        const uint32_t ci = rng.u32();
        const uint8_t owner = gv::mlx5::sw_owner(ci, log_cnt);

        CqeBytes got;
        rng.fill(got.b, sizeof got.b);  // a previous pass's garbage
        gv::mlx5::write_cqe(got.cqe(), f, owner, false);
        const CqeBytes want = oracle_cqe(f, owner);
        ASSERT_TRUE(same_bytes(got.b, want.b, 64)) << "cqe opcode " << int(op);

        uint8_t op_own = 0;
        ASSERT_TRUE(gv::mlx5::cqe_ready(got.cqe(), ci, log_cnt, false, &op_own));
        // The same slot one pass earlier or later reads as not (yet) written.
        ASSERT_FALSE(gv::mlx5::cqe_ready(got.cqe(), ci + (1u << log_cnt), log_cnt, false, &op_own));
        ASSERT_TRUE(gv::mlx5::cqe_ready(got.cqe(), ci, log_cnt, false, &op_own));
        const gv::Completion c = gv::mlx5::decode_cqe(got.cqe(), op_own);
        ASSERT_EQ(c.cqe_opcode, op);
        ASSERT_EQ(c.ok(), !err);
        ASSERT_EQ(c.is_recv(), !req);
        ASSERT_EQ(c.qpn, f.qpn);
        ASSERT_EQ(c.wqe_counter, f.wqe_counter);
        if (req) ASSERT_EQ(c.wqe_opcode, f.wqe_opcode);
        if (err) {
            ASSERT_EQ(c.status, f.syndrome);
            ASSERT_EQ(c.vendor_err, f.vendor_err);
        } else {
            ASSERT_EQ(c.status, 0);
            ASSERT_EQ(c.byte_len, f.byte_cnt);
            ASSERT_EQ(c.imm, be32toh(f.imm_be));
        }
    }
}

// A ring written by write_cqe over several passes: the poller sees exactly the entries of
// the current pass, whatever the previous pass left.
TEST(Mlx5ReaderCqe, OwnerBitOverPasses) {
    Rng rng(kSeed + 4);
    for (uint32_t log_cnt = 0; log_cnt <= 4; ++log_cnt) {
        TRACE_ITER(log_cnt);
        const uint32_t n = 1u << log_cnt;
        std::vector<CqeBytes> ring(n);
        for (auto& e : ring) {
            rng.fill(e.b, 64);
            e.b[63] = uint8_t(MLX5_CQE_INVALID << 4);
        }
        uint32_t ci = 0;
        for (uint32_t prod = 0; prod < 6 * n; ++prod) {
            gv::mlx5::CqeFields f{};
            f.cqe_opcode = (prod % 3) ? MLX5_CQE_REQ : MLX5_CQE_REQ_ERR;
            f.syndrome = MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
            f.wqe_counter = uint16_t(prod);
            f.qpn = 7;
            uint8_t op_own;
            // Before: the slot still holds the previous pass (or nothing).
            ASSERT_FALSE(gv::mlx5::cqe_ready(ring[prod & (n - 1)].cqe(), prod, log_cnt, false, &op_own));
            gv::mlx5::write_cqe(ring[prod & (n - 1)].cqe(), f, gv::mlx5::sw_owner(prod, log_cnt), false);
            ASSERT_TRUE(gv::mlx5::cqe_ready(ring[ci & (n - 1)].cqe(), ci, log_cnt, false, &op_own));
            const gv::Completion c = gv::mlx5::decode_cqe(ring[ci & (n - 1)].cqe(), op_own);
            ASSERT_EQ(c.wqe_counter, uint16_t(ci));
            ASSERT_EQ(c.ok(), (ci % 3) != 0);
            ++ci;
        }
    }
}

}  // namespace
