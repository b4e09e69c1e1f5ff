// Shared by the software-device error tests (soft_errors_test.cpp, soft_errors_rnr_test.cpp).
// (The error cases every backend shares, and their harness, are the traffic suite's:
// tests/traffic/traffic_suite.inc, ErrorCase.)
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include "test_util.hpp"

namespace {
constexpr uint64_t kTimeout = 5'000'000'000ull;  // 5 s
constexpr uint64_t kMs = 1'000'000ull;

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// A connected pair and the buffers of one error case: a local source, a remote region
/// whose target range lies among guard bytes, a local READ destination, and a region a
/// good WRITE posted before the bad WQE fills.
struct Env {
    static constexpr size_t kTgt = 4096, kLen = 256, kSize = 16384;
    gvtest::Pair p;
    gvtest::HostBuf src, dst, back, pre;
    std::vector<uint8_t> src0, dst0, back0;
    unsigned long long bad_pos = 0;

    explicit Env(gv::QpOptions o = {}, const gv::InitAttr& peer_init = {}, bool connect_peer = true)
        : p(gvtest::cpu_context(), o, gv::MemoryKind::Default, 64, false),
          src(p.pd, kSize, gv::kLocalWrite),
          dst(p.pd, kSize, gv::kAllAccess),
          back(p.pd, kSize, gv::kLocalWrite),
          pre(p.pd, kLen, gv::kAllAccess) {
        gvtest::fill_random(src.data(), src.size(), 99);
        p.qp[0]->connect(p.qp[1]->endpoint());
        if (connect_peer) p.qp[1]->connect(p.qp[0]->endpoint(), peer_init);
    }
    gv::dev::QpHandle a() const { return p.h(0); }
    gv::dev::QpHandle b() const { return p.h(1); }

    /// Runs one error case: a good signaled WRITE (a NOP when `pre_nop`: the case fails
    /// every WRITE), the bad WQE `post_bad` posts, then a WRITE, a READ and a NOP
    /// (unsignaled, signaled, unsignaled) that must be flushed without touching memory.
    /// Checks every completion, the QP state and all buffers.
    void run(const std::function<void()>& post_bad, uint8_t syndrome, uint8_t wqe_opcode,
             bool pre_nop = false) {
        auto h = a();
        const uint32_t qpn = p.qp[0]->qpn();
        if (pre_nop) {
            ASSERT_EQ(gv::dev::nop(h), gv::Status::Ok);
            std::memcpy(pre.data(), src.at(0), kLen);
        } else {
            ASSERT_EQ(gv::dev::write(h, src.at(0), kLen, src.lkey(), pre.addr(), pre.rkey()), gv::Status::Ok);
        }
        src0 = src.bytes;
        dst0 = dst.bytes;
        back0 = back.bytes;
        bad_pos = gvtest::sq_pos(h);
        post_bad();
        const unsigned long long after = gvtest::sq_pos(h);
        ASSERT_GT(after, bad_pos) << "the bad WQE was not posted";
        ASSERT_EQ(gv::dev::write(h, src.at(0), kLen, src.lkey(), dst.addr(kTgt + 1024), dst.rkey(), 0),
                  gv::Status::Ok);
        ASSERT_EQ(gv::dev::read(h, back.at(0), kLen, back.lkey(), dst.addr(0), dst.rkey()), gv::Status::Ok);
        ASSERT_EQ(gv::dev::nop(h, 0), gv::Status::Ok);
        EXPECT_EQ(gv::dev::commit(h), gv::Status::QpError);

        gv::Completion c[5];
        uint32_t got = 0;
        ASSERT_EQ(gv::dev::wait_send(h, 5, c, kTimeout, &got), gv::Status::CompletionError) << got << " completions";
        EXPECT_TRUE(c[0].ok()) << gv::mlx5::syndrome_name(c[0].status);
        EXPECT_EQ(c[0].wqe_counter, uint16_t(bad_pos - 1));
        EXPECT_EQ(c[1].cqe_opcode, MLX5_CQE_REQ_ERR);
        EXPECT_EQ(c[1].status, syndrome)
            << "got " << gv::mlx5::syndrome_name(c[1].status) << ", expected " << gv::mlx5::syndrome_name(syndrome);
        EXPECT_EQ(c[1].wqe_opcode, wqe_opcode);
        EXPECT_EQ(c[1].wqe_counter, uint16_t(bad_pos));
        EXPECT_EQ(c[1].qpn, qpn);
        const uint8_t ops[3] = {MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_NOP};
        for (int i = 0; i < 3; ++i) {
            EXPECT_EQ(c[2 + i].cqe_opcode, MLX5_CQE_REQ_ERR) << "follower " << i;
            EXPECT_EQ(c[2 + i].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR) << "follower " << i;
            EXPECT_EQ(c[2 + i].wqe_opcode, ops[i]) << "follower " << i;
            EXPECT_EQ(c[2 + i].wqe_counter, uint16_t(after + i)) << "follower " << i;
            EXPECT_EQ(c[2 + i].qpn, qpn);
        }
        EXPECT_EQ(p.qp[0]->state(), gv::QpState::Error);
        EXPECT_EQ(p.qp[0]->error_syndrome(), syndrome);
        // Nothing more, and work posted in ERROR is flushed as soon as it is committed.
        EXPECT_EQ(gv::dev::poll_cq(h.scq, c, 1), 0u);
        ASSERT_EQ(gv::dev::nop(h), gv::Status::Ok);
        EXPECT_EQ(gv::dev::commit(h), gv::Status::QpError);
        ASSERT_EQ(gv::dev::wait_send(h, 1, c, kTimeout), gv::Status::CompletionError);
        EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
        EXPECT_EQ(c[0].wqe_counter, uint16_t(after + 3));

        EXPECT_EQ(gvtest::first_diff(src.at(0), pre.data(), kLen), -1)
            << "the WQE before the error did not run";
        EXPECT_EQ(gvtest::first_diff(dst0.data(), dst.data(), kSize), -1) << "remote memory changed";
        EXPECT_EQ(gvtest::first_diff(back0.data(), back.data(), kSize), -1) << "local memory changed";
        EXPECT_EQ(gvtest::first_diff(src0.data(), src.data(), kSize), -1) << "local memory changed";
    }
};

/// Posts a WQE with only a ctrl segment (ds as given), as a corrupted or hostile poster.
void post_raw_ctrl(const gv::dev::QpHandle& h, uint8_t opcode, uint32_t qpn, uint8_t ds, int index_skew = 0) {
    unsigned long long pos = 0;
    ASSERT_EQ(gv::dev::sq_reserve(h, 1, &pos, kTimeout), gv::Status::Ok);
    std::memset(gv::dev::sq_seg(h, pos, 0), 0, 64);
    gv::mlx5::set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(gv::dev::sq_seg(h, pos, 0)),
                       uint16_t(pos + index_skew), opcode, 0, qpn, MLX5_WQE_CTRL_CQ_UPDATE, ds, 0, 0);
    gv::dev::sq_publish(h, pos, 1);
}
}  // namespace
