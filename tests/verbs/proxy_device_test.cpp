// The verbs backend on a real RDMA device (label rdma; in CI inside the Soft-RoCE VM, on rxe0):
// CPU threads post through the gv::dev calls, the proxy posts to the device, and what device
// code polls is compared with the software device (the same script, field by field and byte by
// byte), and the error cases give the syndromes device code sees. Skipped without a device
// (GV_REQUIRE_RDMA=1 makes that a failure).
#include <chrono>
#include <thread>

#include "core/backend.hpp"
#include "verbs/proxy_test_util.hpp"
#include "verbs/verbs_backend.hpp"
#include "verbs/verbs_test_util.hpp"

namespace {

using namespace gv;
using gvtest::HostBuf;
using gvtest::Pair;
using gvtest::proxy::describe;
namespace pv = gvtest::proxy;

constexpr uint64_t kTimeout = pv::kTimeoutNs;

Context device_ctx(uint32_t threads = 1) {
    ContextOptions o;
    o.backend = Backend::Verbs;
    o.gpu = -1;
    o.device = gvtest::verbs::device_name();
    o.verbs.gid_index = gvtest::verbs::gid_index();
    o.verbs.proxy_threads = threads;
    return Context(o);
}

TEST(ProxyDevice, OpensTheDevice) {
    GV_SKIP_WITHOUT_RDMA();
    Context ctx = device_ctx();
    EXPECT_EQ(ctx.backend(), Backend::Verbs);
    if (!gvtest::verbs::device_name().empty()) EXPECT_EQ(ctx.name(), gvtest::verbs::device_name());
    Pair p(ctx);
    EXPECT_EQ(p.qp[0]->state(), QpState::Rts);  // ibv_query_qp
    const QpEndpoint e = p.qp[0]->endpoint();
    EXPECT_EQ(e.backend, Backend::Verbs);
    EXPECT_EQ(e.qpn, p.h(0).q.qpn);  // the device's QP number is what ctrl segments carry
    EXPECT_EQ(e.device, ctx.name());
    // Backend::Auto picks verbs where a device exists (and no ConnectX kernels can drive).
    ContextOptions a;
    a.gpu = -1;
    a.device = gvtest::verbs::device_name();
    a.verbs.gid_index = gvtest::verbs::gid_index();
    Context automatic(a);
    EXPECT_EQ(automatic.backend(), Backend::Verbs) << automatic.selection();
    EXPECT_NE(automatic.selection().find("proxy"), std::string::npos) << automatic.selection();
}

// Every operation, through the proxy on the device, against the software device: the same
// completions (opcodes, indexes, byte counts, immediates) and the same bytes.
TEST(ProxyDevice, DataPathMatchesTheSoftwareDevice) {
    GV_SKIP_WITHOUT_RDMA();
    QpOptions o;
    o.sq_depth = 16;  // the unsignaled runs wrap the ring
    Pair soft(gvtest::cpu_context(), o);
    const pv::Transcript want = pv::run_data_script(soft);
    Pair dev(device_ctx(), o);
    const pv::Transcript got = pv::run_data_script(dev);
    pv::expect_same(want, got, "soft", "verbs proxy (device)");
}

// Long unsignaled runs that wrap the send ring many times, every byte checked.
TEST(ProxyDevice, UnsignaledRunsWrapTheRing) {
    GV_SKIP_WITHOUT_RDMA();
    QpOptions o;
    o.sq_depth = 32;
    Pair p(device_ctx(), o);
    const dev::QpHandle a = p.h(0);
    constexpr int kN = 1200, kEvery = 25, kLen = 64;
    HostBuf src(p.pd, size_t(kN) * kLen, kLocalWrite), dst(p.pd, size_t(kN) * kLen, kAllAccess, 0);
    gvtest::fill_random(src.data(), src.size(), 42);
    for (int i = 0; i < kN; ++i) {
        const uint32_t f = (i % kEvery == kEvery - 1) ? kSignaled : 0;
        ASSERT_EQ(dev::write(a, src.at(size_t(i) * kLen), kLen, src.lkey(), dst.addr(size_t(i) * kLen), dst.rkey(), f,
                             kTimeout),
                  Status::Ok);
        if (f) {
            ASSERT_EQ(dev::commit(a), Status::Ok);
            Completion c;
            ASSERT_EQ(dev::wait_send(a, 1, &c, kTimeout), Status::Ok) << gvtest::qp_debug(a);
            EXPECT_EQ(c.wqe_counter, uint16_t(i));
        }
    }
    EXPECT_EQ(gvtest::first_diff(src.data(), dst.data(), src.size()), -1);
    Completion extra;
    EXPECT_EQ(dev::poll_cq(a.scq, &extra, 1), 0u) << "an internal completion reached the CQ";
}

// Many WQEs published at once (several lists per commit, backpressure at the granted depth).
TEST(ProxyDevice, ManyAtOnce) {
    GV_SKIP_WITHOUT_RDMA();
    QpOptions o;
    o.sq_depth = 512;
    o.rq_depth = 512;
    Pair p(device_ctx(), o, MemoryKind::Default, 4096);
    const dev::QpHandle a = p.h(0), b = p.h(1);
    constexpr int kN = 400;
    HostBuf src(p.pd, kN * 16, kLocalWrite), dst(p.pd, kN * 16, kAllAccess, 0), rb(p.pd, kN * 16, kLocalWrite, 0);
    gvtest::fill_random(src.data(), src.size(), 7);
    for (int i = 0; i < kN / 2; ++i) ASSERT_EQ(dev::recv(b, rb.at(size_t(i) * 16), 16, rb.lkey(), kTimeout), Status::Ok);
    for (int i = 0; i < kN; ++i) {
        if (i % 2) ASSERT_EQ(dev::write(a, src.at(size_t(i) * 16), 16, src.lkey(), dst.addr(size_t(i) * 16), dst.rkey()), Status::Ok);
        else ASSERT_EQ(dev::send_imm(a, src.at(size_t(i) * 16), 16, src.lkey(), uint32_t(i)), Status::Ok);
    }
    ASSERT_EQ(dev::commit(a), Status::Ok);
    std::vector<Completion> c(kN);
    ASSERT_EQ(dev::wait_send(a, kN, c.data(), kTimeout), Status::Ok);
    for (int i = 0; i < kN; ++i) EXPECT_EQ(c[size_t(i)].wqe_counter, uint16_t(i));
    ASSERT_EQ(dev::wait_recv(b, kN / 2, c.data(), kTimeout), Status::Ok);
    for (int k = 0; k < kN / 2; ++k) {
        EXPECT_EQ(c[size_t(k)].cqe_opcode, MLX5_CQE_RESP_SEND_IMM);
        EXPECT_EQ(c[size_t(k)].imm, uint32_t(2 * k));
        EXPECT_EQ(c[size_t(k)].wqe_counter, uint16_t(k));
        EXPECT_EQ(gvtest::first_diff(rb.at(size_t(k) * 16), src.at(size_t(2 * k) * 16), 16), -1);
    }
    for (int i = 1; i < kN; i += 2) EXPECT_EQ(gvtest::first_diff(dst.at(size_t(i) * 16), src.at(size_t(i) * 16), 16), -1);
}

/// Checks one error case's run: the WRITE before it succeeded, the bad WQE failed with
/// `syndrome`, what followed flushed, the QP is in ERROR (device and device code), and work
/// posted afterwards flushes.
void expect_error_run(const pv::ErrorRun& r, uint8_t syndrome, uint8_t wqe_opcode) {
    EXPECT_EQ(r.failure, "");
    ASSERT_EQ(r.send.size(), 5u);
    EXPECT_TRUE(r.send[0].ok()) << describe(r.send[0]);
    EXPECT_EQ(r.send[1].cqe_opcode, MLX5_CQE_REQ_ERR);
    EXPECT_EQ(r.send[1].status, syndrome) << describe(r.send[1]) << ", expected " << mlx5::syndrome_name(syndrome);
    EXPECT_EQ(r.send[1].wqe_opcode, wqe_opcode);
    for (int i = 2; i < 5; ++i) EXPECT_EQ(r.send[size_t(i)].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR) << describe(r.send[size_t(i)]);
    ASSERT_EQ(r.recv.size(), 2u);
    for (const Completion& c : r.recv) EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR) << describe(c);
    EXPECT_TRUE(r.in_error);
    EXPECT_EQ(r.state, QpState::Error);
    EXPECT_EQ(r.syndrome, syndrome);
    EXPECT_EQ(r.commit_after, Status::QpError);
    EXPECT_EQ(r.after.status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
}

TEST(ProxyDeviceErrors, WrongRkey) {
    GV_SKIP_WITHOUT_RDMA();
    Pair p(device_ctx());
    const pv::ErrorRun r = pv::run_error_case(p, [](const dev::QpHandle& h, HostBuf& src, HostBuf& dst) {
        ASSERT_EQ(dev::write(h, src.at(0), 64, src.lkey(), dst.addr(0), dst.rkey() ^ 0x1000), Status::Ok);
    });
    expect_error_run(r, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, MLX5_OPCODE_RDMA_WRITE);
}

TEST(ProxyDeviceErrors, OutOfBounds) {
    GV_SKIP_WITHOUT_RDMA();
    Pair p(device_ctx());
    const pv::ErrorRun r = pv::run_error_case(p, [](const dev::QpHandle& h, HostBuf& src, HostBuf& dst) {
        ASSERT_EQ(dev::read(h, src.at(0), 128, src.lkey(), dst.addr(dst.size() - 64), dst.rkey()), Status::Ok);
    });
    expect_error_run(r, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, MLX5_OPCODE_RDMA_READ);
}

TEST(ProxyDeviceErrors, MissingRemoteAccess) {
    GV_SKIP_WITHOUT_RDMA();
    Pair p(device_ctx());
    HostBuf ro(p.pd, 256, kLocalWrite | kRemoteRead);  // no remote write
    const pv::ErrorRun r = pv::run_error_case(p, [&](const dev::QpHandle& h, HostBuf& src, HostBuf&) {
        ASSERT_EQ(dev::write(h, src.at(0), 64, src.lkey(), ro.addr(0), ro.rkey()), Status::Ok);
    });
    expect_error_run(r, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, MLX5_OPCODE_RDMA_WRITE);
}

// A malformed WQE on a real device: the proxy's own error CQE, and the device QP moved to ERROR.
TEST(ProxyDeviceErrors, MalformedWqe) {
    GV_SKIP_WITHOUT_RDMA();
    Pair p(device_ctx());
    const pv::ErrorRun r = pv::run_error_case(p, [](const dev::QpHandle& h, HostBuf&, HostBuf&) {
        pv::post_raw_ctrl(h, MLX5_OPCODE_RDMA_WRITE, h.q.qpn ^ 1, 3);
    });
    expect_error_run(r, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, MLX5_OPCODE_RDMA_WRITE);
}

// SEND with no receive posted and rnr_retry 0: RNR_RETRY_EXC_ERR at once.
TEST(ProxyDeviceErrors, RnrWithoutRetries) {
    GV_SKIP_WITHOUT_RDMA();
    Pair p(device_ctx(), {}, MemoryKind::Default, 64, false);
    RtsAttr rts;
    rts.rnr_retry = 0;
    p.qp[1]->connect(p.qp[0]->endpoint());
    p.qp[0]->connect(p.qp[1]->endpoint(), {}, {}, rts);
    const dev::QpHandle a = p.h(0);
    HostBuf src(p.pd, 64, kLocalWrite);
    ASSERT_EQ(dev::send(a, src.at(0), 32, src.lkey()), Status::Ok);
    ASSERT_EQ(dev::write(a, src.at(0), 8, src.lkey(), 0, 0, 0), Status::Ok);
    ASSERT_TRUE(pv::commit_failing(a));
    Completion c[2];
    ASSERT_EQ(dev::wait_send(a, 2, c, kTimeout), Status::CompletionError);
    EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR) << describe(c[0]);
    EXPECT_EQ(c[0].wqe_opcode, MLX5_OPCODE_SEND);
    EXPECT_EQ(c[1].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR) << describe(c[1]);
    EXPECT_TRUE(dev::qp_in_error(a));
    EXPECT_EQ(p.qp[0]->state(), QpState::Error);
    EXPECT_EQ(p.qp[0]->error_syndrome(), MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
}

// A receive too small for the SEND: both QPs end in ERROR, each with its completion's syndrome
// as the cause. The syndromes are the device's: a ConnectX (and the software device) says
// LOCAL_LENGTH_ERR at the receiver and REMOTE_INVAL_REQ_ERR at the sender; rxe (Linux 6.1)
// says LOC_QP_OP_ERR and REM_OP_ERR (docs/verbs.md). The proxy carries either unchanged.
TEST(ProxyDeviceErrors, ReceiveTooSmall) {
    GV_SKIP_WITHOUT_RDMA();
    Pair p(device_ctx());
    const dev::QpHandle a = p.h(0), b = p.h(1);
    HostBuf src(p.pd, 256, kLocalWrite), rb(p.pd, 64, kLocalWrite);
    ASSERT_EQ(dev::recv(b, rb.at(0), 16, rb.lkey()), Status::Ok);
    ASSERT_EQ(dev::send(a, src.at(0), 100, src.lkey()), Status::Ok);
    ASSERT_TRUE(pv::commit_failing(a));
    Completion r, s;
    ASSERT_EQ(dev::wait_recv(b, 1, &r, kTimeout), Status::CompletionError);
    EXPECT_EQ(r.cqe_opcode, MLX5_CQE_RESP_ERR);
    EXPECT_TRUE(r.status == MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR || r.status == MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR)
        << describe(r);
    EXPECT_EQ(r.wqe_counter, 0u);
    ASSERT_EQ(dev::wait_send(a, 1, &s, kTimeout), Status::CompletionError);
    EXPECT_TRUE(s.status == MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR || s.status == MLX5_CQE_SYNDROME_REMOTE_OP_ERR)
        << describe(s);
    EXPECT_EQ(s.wqe_opcode, MLX5_OPCODE_SEND);
    std::printf("receive too small on %s: receiver %s, sender %s\n", p.ctx.name().c_str(), mlx5::syndrome_name(r.status),
                mlx5::syndrome_name(s.status));
    EXPECT_TRUE(dev::qp_in_error(a));
    EXPECT_TRUE(dev::qp_in_error(b));
    EXPECT_EQ(p.qp[1]->state(), QpState::Error);
    EXPECT_EQ(p.qp[0]->state(), QpState::Error);
    EXPECT_EQ(p.qp[1]->error_syndrome(), r.status);
    EXPECT_EQ(p.qp[0]->error_syndrome(), s.status);
}

// Work committed before RTS is held (commit says QpNotReady; the device would refuse it) and
// runs once the QP is connected.
TEST(ProxyDeviceErrors, QpNotReady) {
    GV_SKIP_WITHOUT_RDMA();
    Pair p(device_ctx(), {}, MemoryKind::Default, 64, false);
    const dev::QpHandle a = p.h(0);
    HostBuf src(p.pd, 64, kLocalWrite), dst(p.pd, 64, kAllAccess, 0);
    gvtest::fill_random(src.data(), 64, 3);
    ASSERT_EQ(dev::write(a, src.at(0), 64, src.lkey(), dst.addr(0), dst.rkey()), Status::Ok);
    EXPECT_EQ(dev::commit(a), Status::QpNotReady);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    Completion c;
    EXPECT_EQ(dev::poll_cq(a.scq, &c, 1), 0u);
    EXPECT_EQ(p.qp[0]->state(), QpState::Reset);
    p.qp[1]->connect(p.qp[0]->endpoint());
    p.qp[0]->connect(p.qp[1]->endpoint());
    ASSERT_EQ(dev::wait_send(a, 1, &c, kTimeout), Status::Ok) << describe(c);
    EXPECT_EQ(gvtest::first_diff(src.data(), dst.data(), 64), -1);
}

// QueuePair::to_error() with receives posted: they flush; reset() and a new connection bring
// the pair back to work.
TEST(ProxyDeviceErrors, ToErrorResetReconnect) {
    GV_SKIP_WITHOUT_RDMA();
    Pair p(device_ctx());
    const dev::QpHandle a = p.h(0), b = p.h(1);
    HostBuf rb(p.pd, 256, kLocalWrite), src(p.pd, 64, kLocalWrite), dst(p.pd, 64, kAllAccess, 0);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(dev::recv(b, rb.at(64 * i), 64, rb.lkey()), Status::Ok);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    p.qp[1]->to_error();
    EXPECT_TRUE(dev::qp_in_error(b));
    Completion c[3];
    ASSERT_EQ(dev::wait_recv(b, 3, c, kTimeout), Status::CompletionError);
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(c[i].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
        EXPECT_EQ(c[i].wqe_counter, uint16_t(i));
    }
    EXPECT_EQ(p.qp[1]->error_syndrome(), 0);
    p.qp[0]->reset();
    p.qp[1]->reset();
    p.qp[0]->connect(p.qp[1]->endpoint());
    p.qp[1]->connect(p.qp[0]->endpoint());
    gvtest::fill_random(src.data(), 64, 11);
    ASSERT_EQ(dev::write(a, src.at(0), 64, src.lkey(), dst.addr(0), dst.rkey()), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    ASSERT_EQ(dev::wait_send(a, 1, c, kTimeout), Status::Ok) << describe(c[0]);
    EXPECT_EQ(c[0].wqe_counter, 0u);
    EXPECT_EQ(gvtest::first_diff(src.data(), dst.data(), 64), -1);
}

}  // namespace
