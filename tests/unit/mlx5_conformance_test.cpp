// Conformance of the mlx5 queue layer (gpuverbs/mlx5/wqe.cuh, cqe.cuh) with rdma-core's
// <infiniband/mlx5dv.h>: segment bytes against mlx5dv_set_*_seg or manual big-endian
// encodings, CQE field offsets and decoding, owner-bit readiness across ring wraps,
// doorbell records and size arithmetic. Random cases use a fixed seed that every failure
// prints together with the iteration.
#include <endian.h>

#include <iterator>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gpuverbs/device/queue_pair_device.cuh"
#include "gpuverbs/mlx5/cqe.cuh"
#include "gpuverbs/mlx5/wqe.cuh"
#include "unit/mlx5_test_util.hpp"

namespace {

using mlx5test::pick_pos;
using mlx5test::Ring;
using mlx5test::Rng;
using mlx5test::same_bytes;

constexpr uint64_t kSeed = 0x6776'6d6c'7835'0001ull;
constexpr int kIters = 5000;

// A segment under test sits in the middle of a 48-byte window of garbage, so that stray
// writes before or after it are caught too.
struct Window {
    alignas(64) uint8_t b[48];
    template <class Seg>
    Seg* seg() {
        return reinterpret_cast<Seg*>(b + 16);
    }
};

void garbage_pair(Rng& rng, Window& a, Window& b) {
    rng.fill(a.b, sizeof a.b);
    std::memcpy(b.b, a.b, sizeof a.b);
}

// ---- 1. segment writers ------------------------------------------------------------------

TEST(Mlx5ConformanceSegments, CtrlSegMatchesRdmaCore) {
    Rng rng(kSeed);
    for (int i = 0; i < kIters; ++i) {
        TRACE_ITER(i);
        Window ours, oracle;
        garbage_pair(rng, ours, oracle);
        uint16_t pi = rng.u16();
        uint8_t opcode = rng.u8(), opmod = rng.u8(), fm = rng.u8(), ds = rng.u8(), sig = rng.u8();
        uint32_t qpn = rng.u32(), imm_be = rng.u32();
        gv::mlx5::set_ctrl_seg(ours.seg<mlx5_wqe_ctrl_seg>(), pi, opcode, opmod, qpn, fm, ds, sig, imm_be);
        auto* o = oracle.seg<mlx5_wqe_ctrl_seg>();
        mlx5dv_set_ctrl_seg(o, pi, opcode, opmod, qpn, fm, ds, sig, imm_be);
        // rdma-core leaves the reserved dci_stream_channel_id alone; ours zeroes it.
        o->dci_stream_channel_id = 0;
        ASSERT_TRUE(same_bytes(ours.b, oracle.b, sizeof ours.b));
    }
}

TEST(Mlx5ConformanceSegments, DataSegMatchesRdmaCore) {
    Rng rng(kSeed + 1);
    for (int i = 0; i < kIters; ++i) {
        TRACE_ITER(i);
        Window ours, oracle;
        garbage_pair(rng, ours, oracle);
        uint32_t len = rng.u32(), lkey = rng.u32();
        uint64_t addr = rng.u64();
        gv::mlx5::set_data_seg(ours.seg<mlx5_wqe_data_seg>(), len, lkey, addr);
        mlx5dv_set_data_seg(oracle.seg<mlx5_wqe_data_seg>(), len, lkey, uintptr_t(addr));
        ASSERT_TRUE(same_bytes(ours.b, oracle.b, sizeof ours.b));
    }
}

TEST(Mlx5ConformanceSegments, RaddrSegIsBigEndian) {
    Rng rng(kSeed + 2);
    for (int i = 0; i < kIters; ++i) {
        TRACE_ITER(i);
        Window ours, want;
        garbage_pair(rng, ours, want);
        uint64_t raddr = rng.u64();
        uint32_t rkey = rng.u32();
        gv::mlx5::set_raddr_seg(ours.seg<mlx5_wqe_raddr_seg>(), raddr, rkey);
        auto* w = want.seg<mlx5_wqe_raddr_seg>();
        w->raddr = htobe64(raddr);
        w->rkey = htobe32(rkey);
        w->reserved = 0;
        ASSERT_TRUE(same_bytes(ours.b, want.b, sizeof ours.b));
    }
}

TEST(Mlx5ConformanceSegments, AtomicSegIsBigEndian) {
    Rng rng(kSeed + 3);
    for (int i = 0; i < kIters; ++i) {
        TRACE_ITER(i);
        Window ours, want;
        garbage_pair(rng, ours, want);
        uint64_t swap_add = rng.u64(), compare = rng.u64();
        gv::mlx5::set_atomic_seg(ours.seg<mlx5_wqe_atomic_seg>(), swap_add, compare);
        auto* w = want.seg<mlx5_wqe_atomic_seg>();
        w->swap_add = htobe64(swap_add);
        w->compare = htobe64(compare);
        ASSERT_TRUE(same_bytes(ours.b, want.b, sizeof ours.b));
    }
}

TEST(Mlx5ConformanceSegments, InlineHeaderSetsInlineBit) {
    Rng rng(kSeed + 4);
    for (int i = 0; i < kIters; ++i) {
        TRACE_ITER(i);
        Window ours, want;
        garbage_pair(rng, ours, want);
        // Mostly realistic lengths, some arbitrary 31-bit ones.
        uint32_t len = (i % 4) ? rng.below(1024) : rng.u32() & 0x7fffffff;
        gv::mlx5::set_inline_hdr(ours.seg<mlx5_wqe_inl_data_seg>(), len);
        want.seg<mlx5_wqe_inl_data_seg>()->byte_count = htobe32(len | MLX5_INLINE_SEG);
        ASSERT_TRUE(same_bytes(ours.b, want.b, sizeof ours.b));  // payload bytes untouched
    }
}

// ---- 2. reading a ctrl segment back ------------------------------------------------------

TEST(Mlx5ConformanceSegments, ReadCtrlSegRoundTripsRdmaCoreFields) {
    Rng rng(kSeed + 5);
    for (int i = 0; i < kIters; ++i) {
        TRACE_ITER(i);
        Window w;
        rng.fill(w.b, sizeof w.b);  // the reserved field keeps garbage: it must be ignored
        // Wire widths: qpn is 24 bits, ds 6 bits (bits 7:6 of that byte are reserved).
        uint16_t pi = rng.u16();
        uint8_t opcode = rng.u8(), opmod = rng.u8(), fm = rng.u8(), sig = rng.u8();
        uint8_t ds = rng.u8() & 0x3f;
        uint32_t qpn = rng.u32() & 0xffffff, imm_be = rng.u32();
        auto* seg = w.seg<mlx5_wqe_ctrl_seg>();
        mlx5dv_set_ctrl_seg(seg, pi, opcode, opmod, qpn, fm, ds, sig, imm_be);
        gv::mlx5::CtrlFields c = gv::mlx5::read_ctrl_seg(seg);
        ASSERT_EQ(c.opcode, opcode);
        ASSERT_EQ(c.opmod, opmod);
        ASSERT_EQ(c.wqe_index, pi);
        ASSERT_EQ(c.qpn, qpn);
        ASSERT_EQ(c.ds, ds);
        ASSERT_EQ(c.fm_ce_se, fm);
        ASSERT_EQ(c.signature, sig);
        ASSERT_EQ(c.imm_be, imm_be);
    }
}

// ---- 3. CQE layout and decoding ----------------------------------------------------------

// Byte offsets, worked out by hand from the struct definitions in mlx5dv.h (and the mlx5
// PRM): 32 bytes of union, then srqn_uidx 32, imm_inval_pkey 36, app 40, app_op 41,
// app_info 42, byte_cnt 44, timestamp 48, sop_drop_qpn 56, wqe_counter 60, signature 62,
// op_own 63. Error CQE: 32 reserved, srqn 32, 18 reserved, vendor_err_synd 54, syndrome 55.
enum CqeOff : size_t {
    kImm = 36,
    kByteCnt = 44,
    kVendorSynd = 54,
    kSyndrome = 55,
    kSopDropQpn = 56,
    kWqeCounter = 60,
    kSignature = 62,
    kOpOwn = 63,
};

TEST(Mlx5ConformanceCqe, FieldOffsets) {
    EXPECT_EQ(offsetof(mlx5_cqe64, op_own), kOpOwn);
    EXPECT_EQ(offsetof(mlx5_cqe64, signature), kSignature);
    EXPECT_EQ(offsetof(mlx5_cqe64, wqe_counter), kWqeCounter);
    EXPECT_EQ(offsetof(mlx5_cqe64, sop_drop_qpn), kSopDropQpn);
    EXPECT_EQ(offsetof(mlx5_cqe64, byte_cnt), kByteCnt);
    EXPECT_EQ(offsetof(mlx5_cqe64, imm_inval_pkey), kImm);
    EXPECT_EQ(offsetof(mlx5_err_cqe, syndrome), kSyndrome);
    EXPECT_EQ(offsetof(mlx5_err_cqe, vendor_err_synd), kVendorSynd);
    EXPECT_EQ(offsetof(mlx5_err_cqe, s_wqe_opcode_qpn), kSopDropQpn);
    EXPECT_EQ(offsetof(mlx5_err_cqe, wqe_counter), kWqeCounter);
    EXPECT_EQ(offsetof(mlx5_err_cqe, op_own), kOpOwn);
    EXPECT_EQ(sizeof(mlx5_cqe64), gv::mlx5::kCqeSize);
    EXPECT_EQ(sizeof(mlx5_err_cqe), gv::mlx5::kCqeSize);
}

// A CQE assembled byte by byte (big-endian fields) over random garbage.
struct RawCqe {
    alignas(64) uint8_t b[64];
    void put8(size_t off, uint8_t v) { b[off] = v; }
    void put16(size_t off, uint16_t v) {
        b[off] = uint8_t(v >> 8);
        b[off + 1] = uint8_t(v);
    }
    void put32(size_t off, uint32_t v) {
        for (int i = 0; i < 4; ++i) b[off + i] = uint8_t(v >> (24 - 8 * i));
    }
    const mlx5_cqe64* cqe() const { return reinterpret_cast<const mlx5_cqe64*>(b); }
};

// Fields every CQE kind carries; `top` is the byte above the 24-bit QPN (the WQE opcode
// of requester and error CQEs, sop/drop bits of responder ones).
struct CqeCase {
    uint8_t cqe_op, top, low_nibble;
    uint32_t qpn;
    uint16_t wqe_counter;
};

CqeCase random_case(Rng& rng, uint8_t cqe_op, RawCqe& raw) {
    rng.fill(raw.b, sizeof raw.b);
    CqeCase c{cqe_op, rng.u8(), uint8_t(rng.u8() & 0xf), rng.u32() & 0xffffff, rng.u16()};
    raw.put32(kSopDropQpn, (uint32_t(c.top) << 24) | c.qpn);
    raw.put16(kWqeCounter, c.wqe_counter);
    raw.put8(kOpOwn, uint8_t(cqe_op << 4) | c.low_nibble);
    return c;
}

gv::Completion decode(const RawCqe& raw) { return gv::mlx5::decode_cqe(raw.cqe(), raw.b[kOpOwn]); }

TEST(Mlx5ConformanceCqe, DecodeRequesterSuccess) {
    Rng rng(kSeed + 6);
    for (int i = 0; i < kIters; ++i) {
        TRACE_ITER(i);
        RawCqe raw;
        CqeCase c = random_case(rng, MLX5_CQE_REQ, raw);
        gv::Completion got = decode(raw);
        ASSERT_TRUE(got.ok());
        ASSERT_FALSE(got.is_recv());
        ASSERT_EQ(got.status, 0);
        ASSERT_EQ(got.cqe_opcode, MLX5_CQE_REQ);
        ASSERT_EQ(got.wqe_opcode, c.top);
        ASSERT_EQ(got.qpn, c.qpn);
        ASSERT_EQ(got.wqe_counter, c.wqe_counter);
    }
}

TEST(Mlx5ConformanceCqe, DecodeResponderSuccess) {
    const uint8_t ops[] = {MLX5_CQE_RESP_SEND, MLX5_CQE_RESP_SEND_IMM, MLX5_CQE_RESP_WR_IMM};
    Rng rng(kSeed + 7);
    for (int i = 0; i < kIters; ++i) {
        TRACE_ITER(i);
        RawCqe raw;
        CqeCase c = random_case(rng, ops[i % 3], raw);
        uint32_t byte_len = rng.u32(), imm = rng.u32();
        raw.put32(kByteCnt, byte_len);
        raw.put32(kImm, imm);
        gv::Completion got = decode(raw);
        ASSERT_TRUE(got.ok());
        ASSERT_TRUE(got.is_recv());
        ASSERT_EQ(got.cqe_opcode, c.cqe_op);
        ASSERT_EQ(got.qpn, c.qpn);  // sop/drop bits above the QPN stay out of it
        ASSERT_EQ(got.wqe_counter, c.wqe_counter);
        ASSERT_EQ(got.byte_len, byte_len);
        if (c.cqe_op != MLX5_CQE_RESP_SEND) ASSERT_EQ(got.imm, imm);  // host order
    }
}

TEST(Mlx5ConformanceCqe, DecodeErrorCqes) {
    Rng rng(kSeed + 8);
    for (int i = 0; i < kIters; ++i) {
        TRACE_ITER(i);
        const uint8_t op = (i % 2) ? MLX5_CQE_RESP_ERR : MLX5_CQE_REQ_ERR;
        RawCqe raw;
        CqeCase c = random_case(rng, op, raw);
        uint8_t syndrome = uint8_t(1 + rng.below(255)), vendor = rng.u8();
        raw.put8(kSyndrome, syndrome);
        raw.put8(kVendorSynd, vendor);
        gv::Completion got = decode(raw);
        ASSERT_FALSE(got.ok());
        ASSERT_EQ(got.is_recv(), op == MLX5_CQE_RESP_ERR);
        ASSERT_EQ(got.cqe_opcode, op);
        ASSERT_EQ(got.status, syndrome);
        ASSERT_EQ(got.vendor_err, vendor);
        ASSERT_EQ(got.wqe_opcode, c.top);
        ASSERT_EQ(got.qpn, c.qpn);
        ASSERT_EQ(got.wqe_counter, c.wqe_counter);
    }
}

TEST(Mlx5ConformanceCqe, ErrorCqeWithZeroSyndromeIsNotSuccess) {
    Rng rng(kSeed + 9);
    for (uint8_t op : {uint8_t(MLX5_CQE_REQ_ERR), uint8_t(MLX5_CQE_RESP_ERR)}) {
        TRACE_ITER(int(op));
        RawCqe raw;
        random_case(rng, op, raw);
        raw.put8(kSyndrome, 0);
        EXPECT_FALSE(decode(raw).ok()) << "cqe opcode " << int(op);
    }
}

// ---- 4. owner-bit readiness ----------------------------------------------------------------

bool expected_ready(uint8_t op_own, uint32_t ci, uint32_t log_cnt) {
    return (op_own >> 4) != MLX5_CQE_INVALID && (op_own & 1u) == ((ci >> log_cnt) & 1u);
}

// Every opcode and owner value at every consumer index of several passes over the ring,
// also across the 32-bit wrap of the consumer index.
TEST(Mlx5ConformanceCqe, ReadyIffValidAndOwnerMatchesPass) {
    Rng rng(kSeed + 10);
    for (uint32_t k = 0; k <= 6; ++k) {
        TRACE_ITER(k);
        const uint32_t n = 1u << k;
        std::vector<RawCqe> ring(n);
        for (auto& e : ring) rng.fill(e.b, sizeof e.b);
        for (uint32_t start : {0u, 0u - 2 * n}) {
            for (uint32_t step = 0; step < 4 * n; ++step) {
                const uint32_t ci = start + step;
                RawCqe& e = ring[ci & (n - 1)];
                for (uint32_t v = 0; v < 32; ++v) {
                    uint8_t op_own = uint8_t(((v >> 1) << 4) | (rng.u8() & 0xe) | (v & 1));
                    e.put8(kOpOwn, op_own);
                    uint8_t seen = 0;
                    bool ready = gv::mlx5::cqe_ready(e.cqe(), ci, k, false, &seen);
                    ASSERT_EQ(ready, expected_ready(op_own, ci, k))
                        << "log_cnt=" << k << " ci=" << ci << " op_own=0x" << std::hex << int(op_own);
                    ASSERT_EQ(seen, op_own);
                }
            }
        }
    }
}

// A producer writes CQEs in random bursts with the owner bit of its pass; the consumer
// must see exactly the produced entries, in order, and never a stale one from a past pass.
TEST(Mlx5ConformanceCqe, ProducerConsumerAcrossWraps) {
    Rng rng(kSeed + 11);
    for (uint32_t k = 0; k <= 5; ++k) {
        TRACE_ITER(k);
        const uint32_t n = 1u << k;
        std::vector<RawCqe> ring(n);
        for (auto& e : ring) {
            rng.fill(e.b, sizeof e.b);
            e.put8(kOpOwn, uint8_t(MLX5_CQE_INVALID << 4));  // as a CQ is initialised
        }
        uint32_t produced = 0, ci = 0;
        while (ci < 8 * n) {
            SCOPED_TRACE(::testing::Message() << "log_cnt=" << k << " ci=" << ci);
            for (uint32_t b = rng.below(n - (produced - ci) + 1); b; --b, ++produced) {
                RawCqe& e = ring[produced & (n - 1)];
                e.put16(kWqeCounter, uint16_t(produced));
                e.put8(kOpOwn, uint8_t(MLX5_CQE_REQ << 4) | uint8_t((produced >> k) & 1));
            }
            uint8_t op_own;
            while (gv::mlx5::cqe_ready(ring[ci & (n - 1)].cqe(), ci, k, false, &op_own)) {
                ASSERT_LT(ci, produced) << "stale CQE read as ready";
                ASSERT_EQ(gv::mlx5::decode_cqe(ring[ci & (n - 1)].cqe(), op_own).wqe_counter, uint16_t(ci));
                ++ci;
            }
            ASSERT_EQ(ci, produced) << "a produced CQE was not seen as ready";
        }
    }
}

// ---- 5. syndrome names -------------------------------------------------------------------

TEST(Mlx5ConformanceCqe, SyndromeNames) {
#define GV_SYN(x) \
    { MLX5_CQE_SYNDROME_##x, #x }
    const std::pair<uint8_t, std::string> known[] = {
        GV_SYN(LOCAL_LENGTH_ERR),
        GV_SYN(LOCAL_QP_OP_ERR),
        GV_SYN(LOCAL_PROT_ERR),
        GV_SYN(WR_FLUSH_ERR),
        GV_SYN(MW_BIND_ERR),
        GV_SYN(BAD_RESP_ERR),
        GV_SYN(LOCAL_ACCESS_ERR),
        GV_SYN(REMOTE_INVAL_REQ_ERR),
        GV_SYN(REMOTE_ACCESS_ERR),
        GV_SYN(REMOTE_OP_ERR),
        GV_SYN(TRANSPORT_RETRY_EXC_ERR),
        GV_SYN(RNR_RETRY_EXC_ERR),
        GV_SYN(REMOTE_ABORTED_ERR),
    };
#undef GV_SYN
    std::set<std::string> names;
    std::set<uint8_t> codes;
    for (const auto& [code, name] : known) {
        EXPECT_EQ(gv::mlx5::syndrome_name(code), name) << "syndrome 0x" << std::hex << int(code);
        names.insert(gv::mlx5::syndrome_name(code));
        codes.insert(code);
    }
    EXPECT_EQ(names.size(), std::size(known));
    EXPECT_STREQ(gv::mlx5::syndrome_name(0), "SUCCESS");  // Completion::status of success
    for (int s = 1; s < 256; ++s)
        if (!codes.count(uint8_t(s)))
            EXPECT_STREQ(gv::mlx5::syndrome_name(uint8_t(s)), "UNKNOWN_SYNDROME") << "syndrome " << s;
}

// ---- 6. doorbell records and size arithmetic ---------------------------------------------

TEST(Mlx5ConformanceDoorbell, SendAndReceiveRecordsAreBigEndian16) {
    Rng rng(kSeed + 12);
    for (int i = 0; i < kIters; ++i) {
        TRACE_ITER(i);
        const uint32_t pi = (i < 0x100) ? uint32_t(0xff80 + i) : rng.u32();  // spans 2^16
        const uint32_t other = rng.u32();
        uint32_t rec[2];
        rec[MLX5_SND_DBR] = rng.u32();
        rec[MLX5_RCV_DBR] = other;
        gv::mlx5::update_sq_dbrec(rec, pi, false);
        ASSERT_EQ(rec[MLX5_SND_DBR], htobe32(pi & 0xffff));
        ASSERT_EQ(rec[MLX5_RCV_DBR], other);
        ASSERT_EQ(gv::mlx5::read_sq_dbrec(rec, false), pi & 0xffff);

        rec[MLX5_SND_DBR] = other;
        rec[MLX5_RCV_DBR] = rng.u32();
        gv::mlx5::update_rq_dbrec(rec, pi, false);
        ASSERT_EQ(rec[MLX5_RCV_DBR], htobe32(pi & 0xffff));
        ASSERT_EQ(rec[MLX5_SND_DBR], other);
        ASSERT_EQ(gv::mlx5::read_rq_dbrec(rec, false), pi & 0xffff);

        // CQ consumer index: 24 bits, big-endian, in word kCqSetCi; the arm word is left alone.
        rec[gv::mlx5::kCqArmDb] = other;
        gv::mlx5::update_cq_dbrec(rec, pi, false);
        ASSERT_EQ(rec[gv::mlx5::kCqSetCi], htobe32(pi & 0xffffff));
        ASSERT_EQ(rec[gv::mlx5::kCqArmDb], other);
    }
}

TEST(Mlx5ConformanceSizes, DsToBasicBlocks) {
    for (uint32_t ds = 1; ds <= gv::mlx5::kMaxDs; ++ds) {
        uint32_t bbs = gv::mlx5::ds_to_bbs(ds);
        // The fewest 64-byte blocks holding ds 16-byte units.
        EXPECT_GE(bbs * 64, ds * 16) << "ds=" << ds;
        EXPECT_LT((bbs - 1) * 64, ds * 16) << "ds=" << ds;
    }
    EXPECT_EQ(gv::mlx5::ds_to_bbs(gv::mlx5::kMaxDs), 16u);
}

TEST(Mlx5ConformanceSizes, InlineDs) {
    for (uint32_t len = 0; len <= 1000; ++len) {
        uint32_t ds = gv::mlx5::inline_ds(len);
        // The fewest 16-byte units holding the 4-byte header and the payload.
        EXPECT_GE(ds * 16, sizeof(mlx5_wqe_inl_data_seg) + len) << "len=" << len;
        EXPECT_LT((ds - 1) * 16, sizeof(mlx5_wqe_inl_data_seg) + len) << "len=" << len;
    }
}

// ---- 7. whole WQEs in a ring -------------------------------------------------------------

// The bytes rdma-core's helpers produce for one WQE, laid out linearly.
std::vector<uint8_t> oracle_wqe(uint64_t pos, uint8_t opcode, uint32_t flags, uint32_t imm_be, uint64_t raddr,
                                uint32_t rkey, const gv::Sge* sg, uint32_t n, uint32_t qpn) {
    const bool rdma = opcode != MLX5_OPCODE_SEND && opcode != MLX5_OPCODE_SEND_IMM;
    std::vector<uint8_t> w(16 * (2 + n), 0);
    uint32_t k = 1;
    if (rdma) {
        auto* r = reinterpret_cast<mlx5_wqe_raddr_seg*>(&w[16 * k++]);
        r->raddr = htobe64(raddr);
        r->rkey = htobe32(rkey);
        r->reserved = 0;
    }
    for (uint32_t i = 0; i < n; ++i)
        if (sg[i].length)
            mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(&w[16 * k++]), sg[i].length, sg[i].lkey,
                                uintptr_t(sg[i].addr));
    uint8_t fm = uint8_t(((flags & gv::kSignaled) ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
                         ((flags & gv::kFence) ? MLX5_WQE_CTRL_FENCE : 0) |
                         ((flags & gv::kSolicited) ? MLX5_WQE_CTRL_SOLICITED : 0));
    auto* c = reinterpret_cast<mlx5_wqe_ctrl_seg*>(w.data());
    mlx5dv_set_ctrl_seg(c, uint16_t(pos), opcode, 0, qpn, fm, uint8_t(k), 0, imm_be);
    c->dci_stream_channel_id = 0;
    w.resize(16 * k);
    return w;
}

// Segment k of the WQE at `pos` must be at ring byte (pos*64 + k*16) mod ring size, and
// every other byte of the ring must be as it was.
::testing::AssertionResult wqe_in_ring(const Ring& ring, uint64_t pos, const std::vector<uint8_t>& want,
                                       const std::vector<uint8_t>& before) {
    std::vector<bool> touched(ring.bytes(), false);
    for (size_t k = 0; k < want.size() / 16; ++k) {
        const size_t off = (pos * 64 + k * 16) % ring.bytes();
        auto r = same_bytes(ring.base + off, &want[16 * k], 16);
        if (!r) return r << "\n  segment " << k << " at ring byte " << off;
        for (size_t b = 0; b < 16; ++b) touched[off + b] = true;
    }
    for (size_t b = 0; b < ring.bytes(); ++b)
        if (!touched[b] && ring.base[b] != before[b])
            return ::testing::AssertionFailure() << "stray write at ring byte " << b;
    return ::testing::AssertionSuccess();
}

TEST(Mlx5ConformanceWqe, SgeWqesMatchRdmaCoreAtWrappedPositions) {
    const uint8_t ops[] = {MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_RDMA_READ,
                           MLX5_OPCODE_SEND, MLX5_OPCODE_SEND_IMM};
    Rng rng(kSeed + 13);
    int wrapped = 0;
    for (int i = 0; i < kIters; ++i) {
        TRACE_ITER(i);
        Ring ring(1 + rng.below(6));  // 2..64 WQEBBs: the largest WQE here (6 ds) takes 2
        gv::dev::QpHandle qp{};
        qp.q.sq = ring.base;
        qp.q.sq_log_bb = ring.log_bb;
        qp.q.qpn = rng.u32() & 0xffffff;
        const uint32_t n = (i % 2) ? 3 + rng.below(2) : 1 + rng.below(4);  // odd i: may wrap
        gv::Sge sg[4];
        for (uint32_t s = 0; s < n; ++s)  // some zero-length entries, which are skipped
            sg[s] = {rng.u64(), rng.below(8) ? rng.u32() | 1u : 0u, rng.u32()};
        const uint8_t op = ops[rng.below(5)];
        const uint32_t flags = rng.below(8), imm_be = rng.u32(), rkey = rng.u32();
        const uint64_t raddr = rng.u64();
        const uint64_t pos = pick_pos(rng, 1u << ring.log_bb, i);
        rng.fill(ring.base, ring.bytes());
        const std::vector<uint8_t> before(ring.base, ring.base + ring.bytes());

        uint32_t ds = gv::dev::build_sge_wqe(qp, pos, op, flags, imm_be, raddr, rkey, sg, n);
        const auto want = oracle_wqe(pos, op, flags, imm_be, raddr, rkey, sg, n, qp.q.qpn);
        ASSERT_EQ(ds * 16, want.size()) << "opcode " << int(op);
        ASSERT_EQ(ds, gv::dev::sge_wqe_ds(op, sg, n));
        ASSERT_TRUE(wqe_in_ring(ring, pos, want, before)) << "opcode " << int(op) << " pos " << pos;
        wrapped += (pos % (1u << ring.log_bb)) * 64 + ds * 16 > ring.bytes();
    }
    EXPECT_GT(wrapped, kIters / 20) << "too few WQEs crossed the end of the ring";
}

}  // namespace
