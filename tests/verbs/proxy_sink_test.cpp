// The verbs backend's proxy, whole, over the sink (src/verbs/sink.hpp): CPU threads post through
// the gv::dev calls into the pinned rings of a verbs context, the proxy thread reads, translates
// and posts them into the sink, and writes the completions back. What device code polls must be
// what the software device gives (the same script on both, compared field by field), and the
// work requests the sink records must be what was posted. Label cpu: no device needed.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
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

TEST(ProxySink, OpensAVerbsContext) {
    auto s = sink(false);
    Context ctx = sink_ctx(s);
    EXPECT_EQ(ctx.backend(), Backend::Verbs);
    EXPECT_EQ(ctx.name(), "sink");
    EXPECT_EQ(ctx.gpu(), -1);
    ASSERT_NE(v::proxy_of(ctx), nullptr);
    EXPECT_EQ(v::proxy_of(ctx)->threads(), 1u);
    Pair p(ctx);
    const dev::QpHandle h = p.h(0);
    EXPECT_EQ(h.backend, Backend::Verbs);
    EXPECT_EQ(h.q.sys, 1u);
    EXPECT_EQ(h.q.host_reachable, 1u);
    EXPECT_EQ(h.q.qpn, p.qp[0]->qpn());
    EXPECT_GE(h.q.qpn, 0x200u);  // the sink's QP numbers: the device's, not the library's
    EXPECT_NE(h.verbs.state, nullptr);
    EXPECT_EQ(p.qp[0]->state(), QpState::Rts);
    EXPECT_EQ(p.qp[0]->endpoint().backend, Backend::Verbs);
    // Queues in GPU memory cannot be read by a proxy thread.
    EXPECT_THROW(CompletionQueue(ctx, CqOptions{16, MemoryKind::Device}), NotSupported);
    QpOptions o;
    o.send_cq = p.scq[0].get();
    o.recv_cq = p.rcq[0].get();
    o.memory = MemoryKind::Device;
    EXPECT_THROW(QueuePair(p.pd, o), NotSupported);
    // Keys: the device's lkey and rkey, reported apart.
    HostBuf b(p.pd, 64, kAllAccess);
    EXPECT_NE(b.lkey(), b.rkey());
}

// VerbsOptions::cpu_posts_inline: a CPU thread that commits or waits steps the QP itself when
// the proxy thread does not hold it (counted in inline_steps); off, only the proxy thread does.
// Either way every WQE is posted once and completes.
TEST(ProxySink, CpuThreadsStepInlineUnlessTurnedOff) {
    for (bool inl : {true, false}) {
        SCOPED_TRACE(inl ? "cpu_posts_inline on" : "cpu_posts_inline off");
        auto s = sink(false);
        VerbsOptions o;
        o.cpu_posts_inline = inl;
        Pair p(v::open_sink_context(s, o));
        const dev::QpHandle a = p.h(0);
        HostBuf src(p.pd, 64, kLocalWrite), dst(p.pd, 64, kAllAccess);
        const uint32_t qpn = p.qp[0]->qpn();
        s->clear_records();
        uint32_t posted = 0;
        // Until a step ran inline (the proxy thread may hold the QP at any one attempt), at
        // most 5 s; with the option off, a fixed 200.
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (posted < 200 || (inl && v::proxy_of(p.ctx)->stats().inline_steps == 0 &&
                                std::chrono::steady_clock::now() < end)) {
            ASSERT_EQ(dev::write(a, src.at(0), 8, src.lkey(), dst.addr(0), dst.rkey(), kSignaled), Status::Ok);
            ASSERT_EQ(dev::commit(a), Status::Ok);
            Completion c;
            ASSERT_EQ(dev::wait_send(a, 1, &c, kTimeout), Status::Ok);
            ASSERT_TRUE(c.ok()) << describe(c);
            ++posted;
        }
        const v::ProxyStats st = v::proxy_of(p.ctx)->stats();
        if (inl) EXPECT_GT(st.inline_steps, 0u);
        else EXPECT_EQ(st.inline_steps, 0u);
        EXPECT_EQ(st.send_wrs, posted) << "every WQE posted once";
        EXPECT_EQ(s->records(qpn).size(), size_t(posted));
    }
}

// A CPU thread that commits while the QP is held (its proxy thread mid-step, or another CPU
// thread stepping it) asks the holder for one more step (ProxyQp::again), and the holder posts
// the work before it lets go for good. Before, the work was left to the proxy thread's next
// turn, which came only after its idle sleep: up to max_idle_sleep_us (100 us by default) on a
// latency-critical path. Here the test is the holder: it takes the QP, a WRITE is committed,
// and letting go as every holder does (let_go_checked) must post it at once, while the proxy
// thread, idle for 300 ms before, sleeps for more than 100 ms at a time.
TEST(ProxySink, CommitOnAHeldQpIsPostedByTheHolder) {
    auto s = sink(false);
    Context ctx = sink_ctx(s, 1, 1000000);  // an idle proxy thread may sleep up to 1 s
    Pair p(ctx);
    const dev::QpHandle a = p.h(0);
    HostBuf src(p.pd, 64, kLocalWrite), dst(p.pd, 64, kAllAccess);
    const uint32_t qpn = p.qp[0]->qpn();
    v::ProxyQp* pq = v::proxy_qp_of(a);
    ASSERT_NE(pq, nullptr);
    s->clear_records();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // its sleeps grow past 100 ms
    v::ProxyScratch scratch;
    v::ProxyCounters ctr;
    v::ProxyStep stepper(scratch, ctr);
    for (uint32_t round = 0; round < 20; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        ASSERT_TRUE(eventually([&] { return pq->try_hold(); }));
        ASSERT_EQ(dev::write(a, src.at(0), 8, src.lkey(), dst.addr(0), dst.rkey(), kSignaled), Status::Ok);
        ASSERT_EQ(dev::commit(a), Status::Ok);  // its inline step finds the QP held
        EXPECT_EQ(s->records(qpn).size(), size_t(round)) << "posted while the test held the QP";
        v::let_go_checked(*pq, stepper);
        // Posted by the test's step; or, if the proxy thread took the QP between the test's
        // let-go and its taking it back, by the proxy thread's step, which was then running.
        EXPECT_TRUE(eventually([&] { return s->records(qpn).size() == size_t(round) + 1; }, 50))
            << "the WRITE waited for the proxy thread's next turn";
        Completion c;
        ASSERT_EQ(dev::wait_send(a, 1, &c, kTimeout), Status::Ok);
        ASSERT_TRUE(c.ok()) << describe(c);
    }
    EXPECT_GT(ctr.send_wrs.load(), 0u) << "the test's steps posted";
}

// A CPU context never flushes GPUDirect writes (there is no GPU whose kernels could see stale
// data), whatever VerbsOptions::gpudirect_flush says; the GPU side is
// GpuVerbsProxy.GpuDirectFlushesOnlyForWorkThatWroteLocalMemory.
TEST(ProxySink, NoGpuDirectFlushOnACpuContext) {
    using F = VerbsOptions::GpuDirectFlush;
    for (F m : {F::Auto, F::Always, F::Never}) EXPECT_EQ(v::decide_gpudirect_flush(-1, m), -1);
    auto s = sink(false);
    VerbsOptions o;
    o.gpudirect_flush = F::Always;
    Pair p(v::open_sink_context(s, o));
    const dev::QpHandle a = p.h(0);
    HostBuf src(p.pd, 64, kLocalWrite), dst(p.pd, 64, kAllAccess);
    ASSERT_EQ(dev::read(a, src.at(0), 64, src.lkey(), dst.addr(0), dst.rkey(), kSignaled), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    Completion c;
    ASSERT_EQ(dev::wait_send(a, 1, &c, kTimeout), Status::Ok);
    EXPECT_EQ(v::proxy_of(p.ctx)->stats().gpudirect_flushes, 0u);
}

// Every operation through the proxy into the sink: the recorded work requests carry exactly
// what the WQEs said, and the completions are those the software device writes.
TEST(ProxySink, EveryOperationRecorded) {
    auto s = sink(false);
    Pair p(sink_ctx(s));
    const dev::QpHandle a = p.h(0);
    HostBuf src(p.pd, 4096, kLocalWrite), dst(p.pd, 4096, kAllAccess), atom(p.pd, 64, kAllAccess, 0);
    uint8_t inl[40];
    for (int i = 0; i < 40; ++i) inl[i] = uint8_t(i * 3);
    auto* olds = reinterpret_cast<uint64_t*>(atom.data());
    const uint32_t qpn = p.qp[0]->qpn();
    s->clear_records();  // (nothing before: the receives of the pair's peer are not posted)

    ASSERT_EQ(dev::write(a, src.at(0), 100, src.lkey(), dst.addr(8), dst.rkey(), kSignaled | kFence), Status::Ok);
    ASSERT_EQ(dev::write_imm(a, src.at(100), 50, src.lkey(), dst.addr(200), dst.rkey(), 0x01020304), Status::Ok);
    ASSERT_EQ(dev::read(a, src.at(300), 64, src.lkey(), dst.addr(400), dst.rkey(), kSignaled | kSolicited), Status::Ok);
    ASSERT_EQ(dev::send(a, src.at(500), 10, src.lkey(), 0), Status::Ok);
    ASSERT_EQ(dev::send_imm(a, src.at(600), 20, src.lkey(), 0xcafe), Status::Ok);
    ASSERT_EQ(dev::write_inline(a, inl, 40, dst.addr(1000), dst.rkey()), Status::Ok);
    ASSERT_EQ(dev::send_inline(a, inl, 12), Status::Ok);
    ASSERT_EQ(dev::fetch_add(a, &olds[0], atom.lkey(), atom.addr(8), atom.rkey(), 9), Status::Ok);
    ASSERT_EQ(dev::compare_swap(a, &olds[1], atom.lkey(), atom.addr(16), atom.rkey(), 3, 4), Status::Ok);
    ASSERT_EQ(dev::put_signal(a, src.at(700), 32, src.lkey(), dst.addr(2000), dst.rkey(), &olds[2], atom.lkey(),
                              atom.addr(24), atom.rkey(), 1),
              Status::Ok);
    ASSERT_EQ(dev::nop(a), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    // Signaled: all but the unsignaled SEND and put-with-signal's WRITE.
    Completion c[10];
    ASSERT_EQ(dev::wait_send(a, 10, c, kTimeout), Status::Ok);
    const uint8_t ops[10] = {MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_RDMA_READ,
                             MLX5_OPCODE_SEND_IMM,   MLX5_OPCODE_RDMA_WRITE,     MLX5_OPCODE_SEND,
                             MLX5_OPCODE_ATOMIC_FA,  MLX5_OPCODE_ATOMIC_CS,      MLX5_OPCODE_ATOMIC_FA,
                             MLX5_OPCODE_NOP};
    const uint32_t bytes[10] = {100, 50, 64, 20, 40, 12, 8, 8, 8, 0};
    for (int i = 0; i < 10; ++i) {
        EXPECT_EQ(c[i].cqe_opcode, MLX5_CQE_REQ) << i;
        EXPECT_EQ(c[i].wqe_opcode, ops[i]) << i << " " << describe(c[i]);
        EXPECT_EQ(c[i].byte_len, bytes[i]) << i;
        EXPECT_EQ(c[i].qpn, qpn);
        if (i) EXPECT_GT(uint16_t(c[i].wqe_counter - c[i - 1].wqe_counter), 0) << "in order";
    }

    const std::vector<v::SinkWr> r = s->records(qpn);
    ASSERT_EQ(r.size(), 11u);  // the NOP is completed by the proxy: no work request
    auto user_flags = [](const v::SinkWr& w) {
        unsigned f = w.send_flags & ~unsigned(IBV_SEND_SIGNALED);
        if (v::wr_user_signaled(w.wr_id)) f |= IBV_SEND_SIGNALED;
        return f;
    };
    EXPECT_EQ(r[0].opcode, IBV_WR_RDMA_WRITE);
    EXPECT_EQ(user_flags(r[0]), unsigned(IBV_SEND_SIGNALED | IBV_SEND_FENCE));
    EXPECT_EQ(r[0].remote_addr, dst.addr(8));
    EXPECT_EQ(r[0].rkey, dst.rkey());
    ASSERT_EQ(r[0].sge.size(), 1u);
    EXPECT_EQ(r[0].sge[0].addr, src.addr(0));
    EXPECT_EQ(r[0].sge[0].length, 100u);
    EXPECT_EQ(r[0].sge[0].lkey, src.lkey());
    EXPECT_EQ(r[1].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
    EXPECT_EQ(r[1].imm_data, mlx5::to_be32(0x01020304));
    EXPECT_EQ(r[2].opcode, IBV_WR_RDMA_READ);
    EXPECT_EQ(user_flags(r[2]), unsigned(IBV_SEND_SIGNALED | IBV_SEND_SOLICITED));
    EXPECT_EQ(r[2].sge[0].addr, src.addr(300));
    EXPECT_EQ(r[3].opcode, IBV_WR_SEND);
    EXPECT_FALSE(v::wr_user_signaled(r[3].wr_id));
    EXPECT_EQ(r[4].opcode, IBV_WR_SEND_WITH_IMM);
    EXPECT_EQ(r[4].imm_data, mlx5::to_be32(0xcafe));
    EXPECT_EQ(r[5].opcode, IBV_WR_RDMA_WRITE);
    EXPECT_TRUE(r[5].send_flags & IBV_SEND_INLINE);
    EXPECT_EQ(r[5].inline_data, std::vector<uint8_t>(inl, inl + 40));
    EXPECT_EQ(r[5].remote_addr, dst.addr(1000));
    EXPECT_EQ(r[6].opcode, IBV_WR_SEND);
    EXPECT_EQ(r[6].inline_data, std::vector<uint8_t>(inl, inl + 12));
    EXPECT_EQ(r[7].opcode, IBV_WR_ATOMIC_FETCH_AND_ADD);
    EXPECT_EQ(r[7].compare_add, 9u);
    EXPECT_EQ(r[7].remote_addr, atom.addr(8));
    EXPECT_EQ(r[7].rkey, atom.rkey());
    EXPECT_EQ(r[7].sge[0].addr, reinterpret_cast<uint64_t>(&olds[0]));
    EXPECT_EQ(r[7].sge[0].lkey, atom.lkey());
    EXPECT_EQ(r[8].opcode, IBV_WR_ATOMIC_CMP_AND_SWP);
    EXPECT_EQ(r[8].compare_add, 3u);
    EXPECT_EQ(r[8].swap, 4u);
    // put-with-signal: an unsignaled WRITE chained with the signaled fetch-add, in one list.
    EXPECT_EQ(r[9].opcode, IBV_WR_RDMA_WRITE);
    EXPECT_FALSE(v::wr_user_signaled(r[9].wr_id));
    EXPECT_EQ(r[9].remote_addr, dst.addr(2000));
    EXPECT_EQ(r[10].opcode, IBV_WR_ATOMIC_FETCH_AND_ADD);
    EXPECT_TRUE(v::wr_user_signaled(r[10].wr_id));
    EXPECT_EQ(r[10].remote_addr, atom.addr(24));
    EXPECT_EQ(r[9].call, r[10].call) << "put-with-signal's two work requests were posted in one list";
    EXPECT_EQ(v::wr_pos(r[10].wr_id), v::wr_pos(r[9].wr_id) + 1);
    // All of it was published by one commit: the proxy posted one list.
    EXPECT_EQ(r[0].call, r[10].call);
}

// gv::SharedBuffer on a NIC backend is plain memory of the context's kind (here host memory:
// a CPU context): zeroed, page-aligned, registered like any other memory, and what a peer's
// WRITE lands in and its READ takes from. Code written against the software device's shared
// arena runs unchanged.
TEST(ProxySink, SharedBufferIsMemoryAPeerReaches) {
    Pair p(sink_ctx(sink(true)));
    const dev::QpHandle a = p.h(0);
    const size_t n = 3 * 4096 + 1;
    SharedBuffer target(p.ctx, n), source(p.ctx, 4096);
    ASSERT_NE(target.data(), nullptr);
    EXPECT_EQ(target.size(), n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(target.data()) % 4096, 0u) << "page-aligned";
    EXPECT_EQ(std::count(target.as<uint8_t>(), target.as<uint8_t>() + n, 0), std::ptrdiff_t(n)) << "zeroed";
    MemoryRegion mt(p.pd, target.data(), n, kAllAccess), ms(p.pd, source.data(), 4096, kLocalWrite);
    for (size_t i = 0; i < 4096; ++i) source.as<uint8_t>()[i] = uint8_t(i * 7 + 1);
    // A WRITE of the buffer's last 4096 bytes (its odd tail byte included), then a READ back.
    const uint64_t at = mt.remote().addr + n - 4096;
    ASSERT_EQ(dev::write(a, source.data(), 4096, ms.lkey(), at, mt.rkey(), kSignaled), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    Completion c;
    ASSERT_EQ(dev::wait_send(a, 1, &c, kTimeout), Status::Ok) << describe(c);
    EXPECT_EQ(std::memcmp(target.as<uint8_t>() + n - 4096, source.data(), 4096), 0);
    EXPECT_EQ(target.as<uint8_t>()[n - 4097], 0) << "nothing before the WRITE's first byte";
    std::memset(source.data(), 0, 4096);
    ASSERT_EQ(dev::read(a, source.data(), 512, ms.lkey(), at, mt.rkey(), kSignaled), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    ASSERT_EQ(dev::wait_send(a, 1, &c, kTimeout), Status::Ok) << describe(c);
    EXPECT_EQ(std::memcmp(source.data(), target.as<uint8_t>() + n - 4096, 512), 0);
    // Moves and the bad size, as on the software device.
    SharedBuffer moved(std::move(source));
    EXPECT_EQ(source.data(), nullptr);
    EXPECT_EQ(moved.size(), 4096u);
    EXPECT_THROW(SharedBuffer(p.ctx, 0), InvalidUsage);
}

// The same script of every operation on the software device and through the proxy (sink in
// loopback, which moves the bytes between the two QPs): same completions, same bytes.
TEST(ProxySink, MatchesTheSoftwareDevice) {
    QpOptions o;
    o.sq_depth = 16;  // the unsignaled runs wrap the ring
    Pair soft(gvtest::cpu_context(), o);
    const gvtest::proxy::Transcript want = gvtest::proxy::run_data_script(soft);
    Pair prox(sink_ctx(sink(true)), o);
    const gvtest::proxy::Transcript got = gvtest::proxy::run_data_script(prox);
    gvtest::proxy::expect_same(want, got, "soft", "verbs proxy (sink)");
    EXPECT_EQ(want.send.size(), 17u);
    EXPECT_EQ(want.recv.size(), 4u);
}

// Unsignaled runs longer than the granted depth: the proxy signals internally (no CQE for
// those), never holds more work requests than granted, and the ring wraps many times.
TEST(ProxySink, UnsignaledRunsSignaledInternally) {
    v::SinkOptions so;
    so.max_send_wr = 8;
    auto s = sink(false, so);
    QpOptions o;
    o.sq_depth = 32;
    Pair p(sink_ctx(s), o);
    const dev::QpHandle a = p.h(0);
    HostBuf src(p.pd, 64, kLocalWrite), dst(p.pd, 64, kAllAccess);
    const int kRuns = 200, kRun = 20;
    for (int r = 0; r < kRuns; ++r) {
        for (int i = 0; i < kRun - 1; ++i)
            ASSERT_EQ(dev::write(a, src.at(0), 8, src.lkey(), dst.addr(0), dst.rkey(), 0), Status::Ok);
        ASSERT_EQ(dev::write(a, src.at(0), 8, src.lkey(), dst.addr(0), dst.rkey()), Status::Ok);
        ASSERT_EQ(dev::commit(a), Status::Ok);
        Completion c;
        ASSERT_EQ(dev::wait_send(a, 1, &c, kTimeout), Status::Ok) << gvtest::qp_debug(a);
        EXPECT_EQ(c.wqe_counter, uint16_t((r + 1) * kRun - 1));
    }
    EXPECT_EQ(dev::poll_cq(a.scq, nullptr, 0), 0u);
    Completion extra;
    EXPECT_EQ(dev::poll_cq(a.scq, &extra, 1), 0u) << "an internal completion reached the CQ: " << describe(extra);
    const uint32_t qpn = p.qp[0]->qpn();
    EXPECT_EQ(s->send_wrs(qpn), uint64_t(kRuns * kRun));
    EXPECT_LE(s->max_outstanding(qpn), 8u);
    int internal = 0;
    for (const v::SinkWr& w : s->records(qpn))
        internal += (w.send_flags & IBV_SEND_SIGNALED) && !v::wr_user_signaled(w.wr_id);
    EXPECT_GT(internal, kRuns);  // at least one per run: 19 unsignaled > sig_interval 4
}

// Backpressure: the device grants 4 work requests; 40 are posted while it holds them. The
// proxy posts 4, holds the rest back (never drops one), and posts them as room frees.
TEST(ProxySink, BackpressureHoldsBackNeverDrops) {
    v::SinkOptions so;
    so.max_send_wr = 4;
    auto s = sink(false, so);
    QpOptions o;
    o.sq_depth = 64;
    Pair p(sink_ctx(s), o);
    const dev::QpHandle a = p.h(0);
    const uint32_t qpn = p.qp[0]->qpn();
    HostBuf src(p.pd, 64, kLocalWrite), dst(p.pd, 4096, kAllAccess);
    s->hold(true);
    for (int i = 0; i < 40; ++i)
        ASSERT_EQ(dev::write(a, src.at(0), 8, src.lkey(), dst.addr(8 * i), dst.rkey()), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    ASSERT_TRUE(eventually([&] { return s->send_wrs(qpn) == 4; })) << s->send_wrs(qpn);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(s->send_wrs(qpn), 4u) << "more work requests than granted were posted";
    EXPECT_EQ(v::proxy_of(p.ctx)->stats().send_wrs, 4u);
    EXPECT_GT(v::proxy_of(p.ctx)->stats().backpressure, 0u);
    s->hold(false);
    std::vector<Completion> c(40);
    ASSERT_EQ(dev::wait_send(a, 40, c.data(), kTimeout), Status::Ok);
    for (int i = 0; i < 40; ++i) EXPECT_EQ(c[size_t(i)].wqe_counter, uint16_t(i));
    EXPECT_EQ(s->send_wrs(qpn), 40u);
    EXPECT_LE(s->max_outstanding(qpn), 4u);
    const std::vector<v::SinkWr> r = s->records(qpn);
    ASSERT_EQ(r.size(), 40u);
    for (int i = 0; i < 40; ++i) EXPECT_EQ(r[size_t(i)].remote_addr, dst.addr(8 * i)) << "posted in order, once";
}

// Receives beyond what the device grants wait in the ring and are posted as earlier ones
// are consumed.
TEST(ProxySink, ReceiveBackpressure) {
    v::SinkOptions so;
    so.max_recv_wr = 2;
    auto s = sink(true, so);
    Pair p(sink_ctx(s));
    const dev::QpHandle a = p.h(0), b = p.h(1);
    HostBuf src(p.pd, 64, kLocalWrite), rb(p.pd, 8 * 64, kLocalWrite, 0);
    gvtest::fill_random(src.data(), 64, 5);
    for (int i = 0; i < 8; ++i) ASSERT_EQ(dev::recv(b, rb.at(64 * i), 64, rb.lkey()), Status::Ok);
    ASSERT_TRUE(eventually([&] { return s->recv_wrs(p.qp[1]->qpn()) == 2; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(s->recv_wrs(p.qp[1]->qpn()), 2u);
    for (int i = 0; i < 8; ++i) ASSERT_EQ(dev::send(a, src.at(0), uint32_t(8 + i), src.lkey()), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    std::vector<Completion> c(8);
    ASSERT_EQ(dev::wait_send(a, 8, c.data(), kTimeout), Status::Ok);
    ASSERT_EQ(dev::wait_recv(b, 8, c.data(), kTimeout), Status::Ok);
    for (int i = 0; i < 8; ++i) {
        EXPECT_EQ(c[size_t(i)].cqe_opcode, MLX5_CQE_RESP_SEND);
        EXPECT_EQ(c[size_t(i)].wqe_counter, uint16_t(i));
        EXPECT_EQ(c[size_t(i)].byte_len, uint32_t(8 + i));
        EXPECT_EQ(gvtest::first_diff(rb.at(64 * i), src.data(), 8 + i), -1);
    }
}

// Before RTS: commit says QpNotReady and the work waits in the ring; at RTS it runs.
TEST(ProxySink, HeldUntilRts) {
    auto s = sink(true);
    Pair p(sink_ctx(s), {}, MemoryKind::Default, 64, false);
    const dev::QpHandle a = p.h(0);
    HostBuf src(p.pd, 64, kLocalWrite), dst(p.pd, 64, kAllAccess, 0);
    gvtest::fill_random(src.data(), 64, 9);
    ASSERT_EQ(dev::write(a, src.at(0), 64, src.lkey(), dst.addr(0), dst.rkey()), Status::Ok);
    EXPECT_EQ(dev::commit(a), Status::QpNotReady);
    EXPECT_FALSE(dev::qp_in_error(a));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(s->send_wrs(p.qp[0]->qpn()), 0u);
    p.qp[1]->connect(p.qp[0]->endpoint());
    p.qp[0]->connect(p.qp[1]->endpoint());
    Completion c;
    ASSERT_EQ(dev::wait_send(a, 1, &c, kTimeout), Status::Ok);
    EXPECT_EQ(gvtest::first_diff(src.data(), dst.data(), 64), -1);
    EXPECT_EQ(dev::commit(a), Status::Ok);
}

// Several proxy threads, QPs spread over them, one CQ shared by QPs of different threads, and
// several posting threads: every completion arrives once and in order per QP.
TEST(ProxySink, ThreadsQpsAndASharedCq) {
    auto s = sink(false);
    Context ctx = sink_ctx(s, 3, 20);
    ASSERT_EQ(v::proxy_of(ctx)->threads(), 3u);
    ProtectionDomain pd(ctx);
    CompletionQueue shared(ctx, CqOptions{8192});
    constexpr int kQps = 6, kPerQp = 3000;
    std::vector<std::unique_ptr<CompletionQueue>> rcq;
    std::vector<std::unique_ptr<QueuePair>> qp;
    for (int i = 0; i < kQps; ++i) {
        rcq.push_back(std::make_unique<CompletionQueue>(ctx, CqOptions{64}));
        QpOptions o;
        o.send_cq = &shared;
        o.recv_cq = rcq.back().get();
        o.sq_depth = 64;
        qp.push_back(std::make_unique<QueuePair>(pd, o));
    }
    for (int i = 0; i < kQps; ++i) qp[size_t(i)]->connect(qp[size_t(i ^ 1)]->endpoint());
    HostBuf src(pd, 64, kLocalWrite), dst(pd, 64, kAllAccess);
    std::atomic<int> failures{0};
    std::vector<std::thread> posters;
    for (int i = 0; i < kQps; ++i)
        posters.emplace_back([&, i] {
            const dev::QpHandle h = qp[size_t(i)]->device_handle();
            for (int k = 0; k < kPerQp; ++k) {
                const uint32_t f = (k % 4 == 3) ? kSignaled : 0;  // a quarter signaled
                if (dev::write(h, src.at(0), 8, src.lkey(), dst.addr(0), dst.rkey(), f, kTimeout) != Status::Ok) ++failures;
                if (f && dev::commit(h) != Status::Ok) ++failures;
            }
        });
    // This thread polls the shared CQ for everyone (pollers free the posters' slots).
    const dev::CqHandle cq = shared.device_handle();
    std::vector<int> last(kQps, -1);
    int got = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (got < kQps * kPerQp / 4 && std::chrono::steady_clock::now() < end) {
        Completion c[64];
        const uint32_t n = dev::poll_cq(cq, c, 64);
        for (uint32_t k = 0; k < n; ++k) {
            int q = -1;
            for (int i = 0; i < kQps; ++i)
                if (qp[size_t(i)]->qpn() == c[k].qpn) q = i;
            ASSERT_GE(q, 0);
            EXPECT_TRUE(c[k].ok()) << describe(c[k]);
            EXPECT_EQ(c[k].wqe_counter, uint16_t(last[size_t(q)] + 4)) << "QP " << q << " out of order";
            last[size_t(q)] = c[k].wqe_counter;
        }
        got += int(n);
        if (!n) std::this_thread::yield();
    }
    for (auto& t : posters) t.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(got, kQps * kPerQp / 4);
    EXPECT_EQ(s->total_send_wrs(), uint64_t(kQps * kPerQp));
    const v::ProxyStats st = v::proxy_of(ctx)->stats();
    EXPECT_EQ(st.send_wqes, uint64_t(kQps * kPerQp));
    EXPECT_EQ(st.send_wrs, uint64_t(kQps * kPerQp));
}

// A proxy thread passes a QP whose last step left nothing to do, and whose doorbell records have
// not moved since, with a few loads (ProxyQp::quiet) instead of taking and stepping it; work
// published on any such QP is still served. 32 QPs on one proxy thread, inline steps off (only
// the thread posts and polls): one pair after another gets a receive, a SEND into it and a
// WRITE; every message lands, completes and is posted once, and the thread passed idle QPs.
TEST(ProxySink, QuietQpsPassedPublishedWorkServed) {
    auto s = sink(true);
    VerbsOptions vo;
    vo.proxy_threads = 1;
    vo.max_idle_sleep_us = 50;
    vo.cpu_posts_inline = false;
    Context ctx = v::open_sink_context(s, vo);
    ProtectionDomain pd(ctx);
    constexpr int kPairs = 16, kRounds = 3;
    std::vector<std::unique_ptr<CompletionQueue>> cq;
    std::vector<std::unique_ptr<QueuePair>> qp;
    for (int i = 0; i < 2 * kPairs; ++i) {
        cq.push_back(std::make_unique<CompletionQueue>(ctx, CqOptions{64}));
        QpOptions o;
        o.send_cq = o.recv_cq = cq.back().get();
        qp.push_back(std::make_unique<QueuePair>(pd, o));
    }
    for (int i = 0; i < 2 * kPairs; ++i) qp[size_t(i)]->connect(qp[size_t(i ^ 1)]->endpoint());
    HostBuf src(pd, 64, kLocalWrite), dst(pd, 64 * 2 * kPairs, kAllAccess, 0);
    const uint64_t passed0 = v::proxy_of(ctx)->stats().quiet_passes;
    for (int r = 0; r < kRounds; ++r)
        for (int i = 0; i < kPairs; ++i) {
            SCOPED_TRACE("round " + std::to_string(r) + " pair " + std::to_string(i));
            gvtest::fill_random(src.data(), 64, uint64_t(r * kPairs + i));
            const dev::QpHandle a = qp[size_t(2 * i)]->device_handle(), b = qp[size_t(2 * i + 1)]->device_handle();
            uint8_t* into = dst.data() + 64 * 2 * i;
            ASSERT_EQ(dev::recv(b, into, 32, dst.lkey()), Status::Ok);
            ASSERT_EQ(dev::send(a, src.at(0), 32, src.lkey()), Status::Ok);
            ASSERT_EQ(dev::write(a, src.at(32), 32, src.lkey(), dst.addr(64 * 2 * i + 32), dst.rkey()), Status::Ok);
            ASSERT_EQ(dev::commit(a), Status::Ok);
            Completion c[3];
            ASSERT_EQ(dev::wait_cq(a, cq[size_t(2 * i)]->device_handle(), 2, c, kTimeout), Status::Ok);
            ASSERT_EQ(dev::wait_cq(b, cq[size_t(2 * i + 1)]->device_handle(), 1, c + 2, kTimeout), Status::Ok);
            for (const Completion& x : c) EXPECT_TRUE(x.ok()) << describe(x);
            EXPECT_EQ(gvtest::first_diff(into, src.data(), 64), -1) << "the SEND's 32 bytes, then the WRITE's";
        }
    const v::ProxyStats st = v::proxy_of(ctx)->stats();
    EXPECT_EQ(st.inline_steps, 0u);
    EXPECT_EQ(st.send_wrs, uint64_t(2 * kPairs * kRounds)) << "every WQE posted once";
    EXPECT_EQ(st.recv_wrs, uint64_t(kPairs * kRounds));
    EXPECT_GT(st.quiet_passes - passed0, uint64_t(kPairs * kRounds)) << "idle QPs were stepped, not passed";
}

// Shutdown with work outstanding: QPs and the context go away while the device holds work
// and posters have more in the rings; nothing hangs, nothing is touched after (ASan).
TEST(ProxySink, ShutdownWithWorkOutstanding) {
    for (bool hold : {true, false}) {
        auto s = sink(false);
        {
            Pair p(sink_ctx(s, 2, 0));
            s->hold(hold);
            HostBuf src(p.pd, 64, kLocalWrite), dst(p.pd, 64, kAllAccess);
            for (int side = 0; side < 2; ++side) {
                const dev::QpHandle h = p.h(side);
                for (int i = 0; i < 100; ++i)
                    ASSERT_EQ(dev::write(h, src.at(0), 8, src.lkey(), dst.addr(0), dst.rkey(), i % 10 == 9 ? kSignaled : 0),
                              Status::Ok);
                ASSERT_EQ(dev::commit(h), Status::Ok);
            }
            if (hold) ASSERT_TRUE(eventually([&] { return s->total_send_wrs() > 0; }));
        }  // QPs, CQs, MRs, PD and the context (its proxy threads) are destroyed here
        if (hold) EXPECT_GT(s->records().size(), 0u);  // the device held work when it all went
    }
}

// A QP destroyed while its proxy thread is busy with others: detaching is synchronous.
TEST(ProxySink, DestroyWhileOthersRun) {
    auto s = sink(true);
    Context ctx = sink_ctx(s, 1, 0);
    Pair keep(ctx);
    HostBuf src(keep.pd, 64, kLocalWrite), dst(keep.pd, 64, kAllAccess);
    std::atomic<bool> stop{false};
    std::thread t([&] {
        const dev::QpHandle h = keep.h(0);
        while (!stop.load()) {
            if (dev::write(h, src.at(0), 8, src.lkey(), dst.addr(0), dst.rkey()) != Status::Ok) break;
            dev::commit(h);
            Completion c;
            if (dev::wait_send(h, 1, &c, kTimeout) != Status::Ok) break;
        }
    });
    for (int i = 0; i < 50; ++i) {
        // Its work may still run when it goes: the buffers it names outlive it (as with any
        // RDMA device, memory must outlive the work requests that name it).
        Pair p(ctx);
        const dev::QpHandle h = p.h(0);
        ASSERT_EQ(dev::write(h, src.at(0), 8, src.lkey(), dst.addr(0), dst.rkey()), Status::Ok);
        dev::commit(h);
    }
    stop = true;
    t.join();
}

}  // namespace
