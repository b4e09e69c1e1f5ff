// The verbs backend's proxy over the sink, its error paths: malformed WQEs, an error the
// device reports, a receive too small, the user's to_error and reset, a CQ that overruns.
// What device code polls must be what the software device gives. Label cpu.
#include <atomic>
#include <chrono>
#include <thread>

#include "core/backend.hpp"
#include "verbs/proxy_sink_util.hpp"
#include "verbs/proxy_test_util.hpp"
#include "verbs/sink.hpp"
#include "verbs/status.hpp"
#include "verbs/translate.hpp"
#include "verbs/verbs_backend.hpp"

namespace {

using namespace gv;
using gvtest::HostBuf;
using gvtest::Pair;
using gvtest::proxy::describe;
using gvtest::proxy::eventually;
using gvtest::proxy::sink;
using gvtest::proxy::sink_ctx;
namespace v = gv::detail::verbs;

constexpr uint64_t kTimeout = gvtest::proxy::kTimeoutNs;

// Malformed WQEs: the proxy writes the error CQE with the reader's syndrome, moves the QP to
// ERROR and flushes everything after it (and the posted receives), never posting any of it;
// the completions are the software device's, field by field.
TEST(ProxySink, MalformedWqesAsOnTheSoftwareDevice) {
    struct Case {
        const char* what;
        std::function<void(const dev::QpHandle&, HostBuf&, HostBuf&)> post;
        uint8_t syndrome;
    };
    const Case cases[] = {
        {"wrong QP number", [](const dev::QpHandle& h, HostBuf&, HostBuf&) { gvtest::proxy::post_raw_ctrl(h, MLX5_OPCODE_RDMA_WRITE, h.q.qpn + 1, 3); },
         MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR},
        {"wrong index", [](const dev::QpHandle& h, HostBuf&, HostBuf&) { gvtest::proxy::post_raw_ctrl(h, MLX5_OPCODE_SEND, h.q.qpn, 2, 1); },
         MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR},
        {"unknown opcode", [](const dev::QpHandle& h, HostBuf&, HostBuf&) { gvtest::proxy::post_raw_ctrl(h, 0x1d, h.q.qpn, 1); },
         MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR},
        {"ds 0", [](const dev::QpHandle& h, HostBuf&, HostBuf&) { gvtest::proxy::post_raw_ctrl(h, MLX5_OPCODE_SEND, h.q.qpn, 0); },
         MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR},
        {"atomic of the wrong size",
         [](const dev::QpHandle& h, HostBuf& src, HostBuf& dst) {
             unsigned long long pos = 0;
             ASSERT_EQ(dev::sq_reserve(h, 1, &pos, kTimeout), Status::Ok);
             dev::build_atomic_wqe(h, pos, MLX5_OPCODE_ATOMIC_FA, src.at(0), src.lkey(), dst.addr(0), dst.rkey(), 1, 0,
                                   kSignaled);
             mlx5::set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(dev::sq_seg(h, pos, 3)), 4, src.lkey(), src.addr(0));
             dev::sq_publish(h, pos, 1);
         },
         MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR},
    };
    for (const Case& k : cases) {
        SCOPED_TRACE(k.what);
        Pair soft(gvtest::cpu_context());
        const gvtest::proxy::ErrorRun want = gvtest::proxy::run_error_case(soft, k.post);
        auto s = sink(true);
        Pair prox(sink_ctx(s));
        const gvtest::proxy::ErrorRun got = gvtest::proxy::run_error_case(prox, k.post);
        EXPECT_EQ(want.failure, "");
        EXPECT_EQ(got.failure, "");
        ASSERT_EQ(got.send.size(), 5u);
        ASSERT_EQ(want.send.size(), 5u);
        EXPECT_TRUE(got.send[0].ok());
        EXPECT_EQ(got.send[1].status, k.syndrome) << describe(got.send[1]);
        for (int i = 2; i < 5; ++i) EXPECT_EQ(got.send[size_t(i)].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
        for (size_t i = 0; i < 5; ++i) {
            EXPECT_EQ(describe(got.send[i]), describe(want.send[i])) << "send completion " << i;
        }
        ASSERT_EQ(got.recv.size(), 2u);
        for (size_t i = 0; i < 2; ++i) EXPECT_EQ(describe(got.recv[i]), describe(want.recv[i])) << "receive " << i;
        EXPECT_TRUE(got.in_error);
        EXPECT_EQ(got.state, QpState::Error);
        EXPECT_EQ(got.syndrome, k.syndrome);
        EXPECT_EQ(want.syndrome, k.syndrome);
        EXPECT_EQ(got.commit_after, Status::QpError);
        EXPECT_EQ(describe(got.after), describe(want.after));
        EXPECT_EQ(got.after.status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
        EXPECT_EQ(gvtest::first_diff(want.dst.data(), got.dst.data(), want.dst.size()), -1);
        // Only the WRITE before it reached the device.
        EXPECT_EQ(s->send_wrs(prox.qp[0]->qpn()), 1u);
    }
}

// A work request the device fails: its error CQE (the status's syndrome), the QP in ERROR,
// everything after it flushed, unsignaled ones included (errors always complete).
TEST(ProxySink, DeviceErrorFlushesTheRest) {
    for (ibv_wc_status st : {IBV_WC_REM_ACCESS_ERR, IBV_WC_RETRY_EXC_ERR, IBV_WC_GENERAL_ERR}) {
        auto s = sink(false);
        Pair p(sink_ctx(s));
        const dev::QpHandle a = p.h(0);
        const uint32_t qpn = p.qp[0]->qpn();
        HostBuf src(p.pd, 64, kLocalWrite), dst(p.pd, 4096, kAllAccess);
        s->fail_send(qpn, 2, st);
        for (int i = 0; i < 6; ++i)
            ASSERT_EQ(dev::write(a, src.at(0), 8, src.lkey(), dst.addr(8 * i), dst.rkey(), i == 0 ? kSignaled : 0), Status::Ok);
        ASSERT_TRUE(gvtest::proxy::commit_failing(a));
        Completion c[5];
        ASSERT_EQ(dev::wait_send(a, 5, c, kTimeout), Status::CompletionError);
        EXPECT_TRUE(c[0].ok());
        EXPECT_EQ(c[0].wqe_counter, 0u);
        // WQE 1 (unsignaled) succeeded with nothing to say; WQE 2 failed.
        EXPECT_EQ(c[1].cqe_opcode, MLX5_CQE_REQ_ERR);
        EXPECT_EQ(c[1].status, v::wc_status_to_syndrome(st)) << describe(c[1]);
        EXPECT_EQ(c[1].vendor_err, v::wc_status_exact(st) ? 0 : int(st));
        EXPECT_EQ(c[1].wqe_counter, 2u);
        EXPECT_EQ(c[1].wqe_opcode, MLX5_OPCODE_RDMA_WRITE);
        for (int i = 2; i < 5; ++i) {
            EXPECT_EQ(c[i].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
            EXPECT_EQ(c[i].wqe_counter, uint16_t(i + 1));
        }
        EXPECT_TRUE(dev::qp_in_error(a));
        EXPECT_EQ(p.qp[0]->state(), QpState::Error);
        EXPECT_EQ(p.qp[0]->error_syndrome(), v::wc_status_to_syndrome(st));
        EXPECT_EQ(dev::commit(a), Status::QpError);
        // Work posted in ERROR flushes without reaching the device.
        const uint64_t before = s->send_wrs(qpn);
        ASSERT_EQ(dev::write(a, src.at(0), 8, src.lkey(), dst.addr(0), dst.rkey()), Status::Ok);
        EXPECT_EQ(dev::commit(a), Status::QpError);
        ASSERT_EQ(dev::wait_send(a, 1, c, kTimeout), Status::CompletionError);
        EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
        EXPECT_EQ(s->send_wrs(qpn), before);
        // The receive side flushes too: one posted now completes flushed.
        HostBuf rb(p.pd, 64, kLocalWrite);
        ASSERT_EQ(dev::recv(a, rb.at(0), 64, rb.lkey()), Status::Ok);
        ASSERT_EQ(dev::wait_recv(a, 1, c, kTimeout), Status::CompletionError);
        EXPECT_EQ(c[0].cqe_opcode, MLX5_CQE_RESP_ERR);
        EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
    }
}

// A receive the device fails (here: too small for a SEND) reports its syndrome on the receive
// CQ and moves that QP to ERROR; the sender gets REMOTE_INVAL_REQ_ERR, as on the software device.
TEST(ProxySink, ReceiveTooSmall) {
    auto s = sink(true);
    Pair prox(sink_ctx(s));
    Pair soft(gvtest::cpu_context());
    for (Pair* p : {&soft, &prox}) {
        SCOPED_TRACE(p == &soft ? "soft" : "proxy");
        const dev::QpHandle a = p->h(0), b = p->h(1);
        HostBuf src(p->pd, 256, kLocalWrite), rb(p->pd, 64, kLocalWrite);
        ASSERT_EQ(dev::recv(b, rb.at(0), 16, rb.lkey()), Status::Ok);
        ASSERT_EQ(dev::send(a, src.at(0), 100, src.lkey()), Status::Ok);
        dev::commit(a);
        Completion c;
        ASSERT_EQ(dev::wait_recv(b, 1, &c, kTimeout), Status::CompletionError);
        EXPECT_EQ(c.cqe_opcode, MLX5_CQE_RESP_ERR);
        EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
        ASSERT_EQ(dev::wait_send(a, 1, &c, kTimeout), Status::CompletionError);
        EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
        EXPECT_TRUE(eventually([&] { return dev::qp_in_error(b); }));
        EXPECT_EQ(p->qp[1]->error_syndrome(), MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
        EXPECT_EQ(p->qp[0]->error_syndrome(), MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
    }
}

// QueuePair::to_error(): what the device holds and what waits in the rings flush, and device
// code sees ERROR; reset() and a new connection bring the QP back.
TEST(ProxySink, ToErrorThenReset) {
    auto s = sink(false);
    Pair p(sink_ctx(s));
    const dev::QpHandle a = p.h(0);
    HostBuf src(p.pd, 64, kLocalWrite), dst(p.pd, 4096, kAllAccess);
    s->hold(true);
    for (int i = 0; i < 5; ++i)
        ASSERT_EQ(dev::write(a, src.at(0), 8, src.lkey(), dst.addr(0), dst.rkey(), i == 4 ? kSignaled : 0), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    ASSERT_TRUE(eventually([&] { return s->send_wrs(p.qp[0]->qpn()) == 5; }));
    p.qp[0]->to_error();
    EXPECT_TRUE(dev::qp_in_error(a));
    Completion c[5];
    ASSERT_EQ(dev::wait_send(a, 5, c, kTimeout), Status::CompletionError);
    for (int i = 0; i < 5; ++i) {
        EXPECT_EQ(c[i].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
        EXPECT_EQ(c[i].wqe_counter, uint16_t(i));
    }
    EXPECT_EQ(p.qp[0]->error_syndrome(), 0);  // the user moved it there
    s->hold(false);
    p.qp[0]->reset();
    EXPECT_EQ(p.qp[0]->state(), QpState::Reset);
    EXPECT_FALSE(dev::qp_in_error(a));
    EXPECT_EQ(dev::commit(a), Status::QpNotReady);
    p.qp[0]->connect(p.qp[1]->endpoint());
    ASSERT_EQ(dev::write(a, src.at(0), 8, src.lkey(), dst.addr(0), dst.rkey()), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    ASSERT_EQ(dev::wait_send(a, 1, c, kTimeout), Status::Ok);
    EXPECT_EQ(c[0].wqe_counter, 0u);
}

// A CQ too small for what completes: the overrun flag, completions lost, the QP in ERROR, as
// on the software device.
TEST(ProxySink, CqOverrun) {
    auto s = sink(false);
    Pair p(sink_ctx(s), {}, MemoryKind::Default, 4);
    const dev::QpHandle a = p.h(0);
    HostBuf src(p.pd, 64, kLocalWrite), dst(p.pd, 64, kAllAccess);
    for (int i = 0; i < 6; ++i) ASSERT_EQ(dev::write(a, src.at(0), 8, src.lkey(), dst.addr(0), dst.rkey()), Status::Ok);
    ASSERT_TRUE(gvtest::proxy::commit_failing(a));
    ASSERT_TRUE(eventually([&] { return dev::cq_overrun(a.scq); }));
    Completion c[8];
    EXPECT_EQ(dev::wait_send(a, 8, c, kTimeout), Status::CqOverrun);
    EXPECT_TRUE(eventually([&] { return dev::qp_in_error(a); }));
    EXPECT_EQ(p.qp[0]->error_syndrome(), MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
}

}  // namespace
