// The mlx5 layer's CQEs: write_cqe (gpuverbs/mlx5/cqe.cuh) against decode_cqe and
// rdma-core's mlx5_cqe64 / mlx5_err_cqe layouts, owner bit on both passes. WQEs read back:
// mlx5_reader_test.cpp. Random cases use fixed seeds that every failure prints with the
// iteration.
#include <endian.h>

#include <iterator>
#include <vector>

#include "gpuverbs/mlx5/cqe.cuh"
#include "unit/mlx5_reader_util.hpp"

namespace {

using mlx5test::kIters;
using mlx5test::kSeed;
using mlx5test::Rng;
using mlx5test::same_bytes;

// ---- CQEs: writer, decoder and rdma-core's layout ---------------------------------------------

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
