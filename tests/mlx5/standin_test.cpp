// The mlx5 backend's own device path, end to end, against the software executor standing in
// for the ConnectX (tests/mlx5/standin_nic.hpp), driven by CPU threads: WQEs into the
// backend's send ring, the doorbell record, the 8-byte doorbell store (by the posting thread,
// or by the CPU proxy thread), the stand-in executing on each doorbell and writing mlx5 CQEs,
// CQ polling through the backend's CQ handles. Every byte moved is checked, and every doorbell
// the stand-in saw is checked against the record and the QP.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "gpuverbs/detail/mlx5/doorbell.cuh"
#include "gpuverbs/oob.hpp"
#include "mlx5/standin_nic.hpp"
#include "test_util.hpp"

using namespace gv;
using gvtest::HostBuf;
using gvtest::Pair;
using gv::test::StandinNic;
using gv::test::StandinOptions;

namespace {

constexpr uint64_t kTimeout = 10'000'000'000ull;  // 10 s

struct Handler {
    DoorbellHandler h;
    const char* name;
};
const Handler kHandlers[] = {{DoorbellHandler::Gpu, "direct"}, {DoorbellHandler::CpuProxy, "cpu-proxy"}};

Context make(DoorbellHandler h, std::shared_ptr<StandinNic::Log>* log, ReadFlush flush = ReadFlush::Auto) {
    Mlx5Options mo;
    mo.doorbell = h;
    mo.read_flush = flush;
    return gv::test::standin_context(-1, StandinOptions{}, mo, log);
}

void wait_ok(const dev::QpHandle& h, uint32_t n, Completion* out = nullptr) {
    std::vector<Completion> tmp(n);
    uint32_t got = 0;
    Status st = dev::wait_send(h, n, out ? out : tmp.data(), kTimeout, &got);
    ASSERT_EQ(st, Status::Ok) << status_name(st) << ", " << got << " of " << n;
    for (uint32_t i = 0; i < n; ++i) {
        const Completion& c = (out ? out : tmp.data())[i];
        EXPECT_TRUE(c.ok()) << "syndrome " << int(c.status) << " " << mlx5::syndrome_name(c.status);
    }
}

/// The doorbells the stand-in saw for one QP, after the problems check.
std::vector<test::SeenDoorbell> doorbells_of(const std::shared_ptr<StandinNic::Log>& log, uint32_t qpn) {
    std::lock_guard<std::mutex> lock(log->mu);
    for (const std::string& p : log->problems) ADD_FAILURE() << "stand-in NIC: " << p;
    std::vector<test::SeenDoorbell> out;
    for (const auto& d : log->doorbells)
        if (d.qpn == qpn) out.push_back(d);
    return out;
}

/// Waits until the stand-in saw a doorbell of qpn with index pi (its watcher runs on its own).
bool saw(const std::shared_ptr<StandinNic::Log>& log, uint32_t qpn, uint32_t pi) {
    for (int i = 0; i < 5000; ++i) {
        {
            std::lock_guard<std::mutex> lock(log->mu);
            for (const auto& d : log->doorbells)
                if (d.qpn == qpn && d.pi == pi) return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
}

}  // namespace

// gv::SharedBuffer on the mlx5 backend: plain memory of the context's kind (a CPU context here:
// zeroed, page-aligned anonymous pages), registered like any memory, and what a peer's WRITE
// lands in, so code written for the software device's shared arena runs unchanged on a NIC.
TEST(Mlx5StandIn, SharedBufferIsMemoryThePeerWrites) {
    std::shared_ptr<StandinNic::Log> log;
    Context ctx = make(DoorbellHandler::Gpu, &log);
    Pair p(ctx);
    const size_t n = 2 * 4096 + 100;
    SharedBuffer target(ctx, n);
    ASSERT_NE(target.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(target.data()) % 4096, 0u);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(target.as<uint8_t>()[i], 0) << "not zeroed at " << i;
    MemoryRegion mr(p.pd, target.data(), n, kAllAccess);
    HostBuf src(p.pd, n, kLocalWrite);
    gvtest::fill_random(src.data(), n, 7);
    ASSERT_EQ(dev::write(p.h(0), src.data(), uint32_t(n), src.lkey(), mr.remote().addr, mr.rkey()),
              Status::Ok);
    ASSERT_EQ(dev::commit(p.h(0)), Status::Ok);
    wait_ok(p.h(0), 1);
    EXPECT_EQ(gvtest::first_diff(src.data(), target.as<uint8_t>(), n), -1);
}

// Every verb the device API has, once per doorbell handler, byte-verified.
TEST(Mlx5StandIn, EveryOperationUnderEachHandler) {
    for (const Handler& hd : kHandlers) {
        SCOPED_TRACE(hd.name);
        std::shared_ptr<StandinNic::Log> log;
        Context ctx = make(hd.h, &log);
        EXPECT_EQ(ctx.backend(), Backend::Mlx5);
        EXPECT_EQ(ctx.name(), "standin-mlx5");
        EXPECT_NE(ctx.selection().find(std::string("doorbell: ") + (hd.h == DoorbellHandler::Gpu ? "gpu" : "cpu-proxy")),
                  std::string::npos)
            << ctx.selection();
        Pair p(ctx);
        const size_t n = 1 << 16;
        HostBuf src(p.pd, n, kLocalWrite), dst(p.pd, n, kAllAccess), back(p.pd, n, kLocalWrite);
        HostBuf recvbuf(p.pd, n, kLocalWrite), atom(p.pd, 64, kAllAccess, 0), old(p.pd, 64, kLocalWrite, 0);
        gvtest::fill_random(src.data(), n, 42);
        auto a = p.h(0), b = p.h(1);
        EXPECT_EQ(a.backend, Backend::Mlx5);
        EXPECT_EQ(a.q.qpn, p.qp[0]->qpn());
        EXPECT_EQ(a.q.sys, 1u);
        if (hd.h == DoorbellHandler::CpuProxy) {
            EXPECT_EQ(a.mlx5.uar, nullptr);
            EXPECT_EQ(a.mlx5.uar_host, nullptr);
        } else {
            EXPECT_NE(a.mlx5.uar_host, nullptr);
        }
        Completion c[4];
        // WRITE
        ASSERT_EQ(dev::write(a, src.data(), n, src.lkey(), dst.addr(), dst.rkey()), Status::Ok);
        ASSERT_EQ(dev::commit(a), Status::Ok);
        wait_ok(a, 1, c);
        EXPECT_EQ(c[0].wqe_opcode, MLX5_OPCODE_RDMA_WRITE);
        EXPECT_EQ(c[0].qpn, a.q.qpn);
        EXPECT_EQ(gvtest::first_diff(src.data(), dst.data(), n), -1);
        // READ
        ASSERT_EQ(dev::read(a, back.data(), n, back.lkey(), dst.addr(), dst.rkey()), Status::Ok);
        ASSERT_EQ(dev::commit(a), Status::Ok);
        wait_ok(a, 1, c);
        EXPECT_EQ(c[0].wqe_opcode, MLX5_OPCODE_RDMA_READ);
        EXPECT_EQ(gvtest::first_diff(src.data(), back.data(), n), -1);
        // SEND into a posted receive (the receive doorbell record: direct, or via the proxy)
        ASSERT_EQ(dev::recv(b, recvbuf.data(), n, recvbuf.lkey()), Status::Ok);
        ASSERT_EQ(dev::send_imm(a, src.data(), 1000, src.lkey(), 0xabcd), Status::Ok);
        ASSERT_EQ(dev::commit(a), Status::Ok);
        wait_ok(a, 1, c);
        ASSERT_EQ(dev::wait_recv(b, 1, c, kTimeout), Status::Ok);
        EXPECT_EQ(c[0].cqe_opcode, MLX5_CQE_RESP_SEND_IMM);
        EXPECT_EQ(c[0].byte_len, 1000u);
        EXPECT_EQ(c[0].imm, 0xabcdu);
        EXPECT_EQ(gvtest::first_diff(src.data(), recvbuf.data(), 1000), -1);
        // Inline WRITE
        const char msg[] = "inline through the mlx5 ring";
        ASSERT_EQ(dev::write_inline(a, msg, sizeof msg, dst.addr(100), dst.rkey()), Status::Ok);
        ASSERT_EQ(dev::commit(a), Status::Ok);
        wait_ok(a, 1, c);
        EXPECT_EQ(std::memcmp(dst.at(100), msg, sizeof msg), 0);
        // Atomics: fetch-add, compare-swap
        uint64_t* word = reinterpret_cast<uint64_t*>(atom.data());
        uint64_t* got = reinterpret_cast<uint64_t*>(old.data());
        *word = 40;
        ASSERT_EQ(dev::fetch_add(a, got, old.lkey(), atom.addr(), atom.rkey(), 2), Status::Ok);
        ASSERT_EQ(dev::commit(a), Status::Ok);
        wait_ok(a, 1, c);
        EXPECT_EQ(*got, 40u);
        EXPECT_EQ(*word, 42u);
        ASSERT_EQ(dev::compare_swap(a, got, old.lkey(), atom.addr(), atom.rkey(), 42, 7), Status::Ok);
        ASSERT_EQ(dev::commit(a), Status::Ok);
        wait_ok(a, 1, c);
        EXPECT_EQ(*got, 42u);
        EXPECT_EQ(*word, 7u);
        // Put with signal: the data, then the signal word (RC order).
        std::memset(dst.data(), 0, n);
        uint64_t* sig = reinterpret_cast<uint64_t*>(atom.at(8));
        *sig = 0;
        ASSERT_EQ(dev::put_signal(a, src.data(), 4096, src.lkey(), dst.addr(), dst.rkey(), got, old.lkey(),
                                  atom.addr(8), atom.rkey(), 1),
                  Status::Ok);
        ASSERT_EQ(dev::commit(a), Status::Ok);
        wait_ok(a, 1, c);
        EXPECT_EQ(*sig, 1u);
        EXPECT_EQ(gvtest::first_diff(src.data(), dst.data(), 4096), -1);

        // The doorbells: each names QP a, never goes backwards, never passes the record; the
        // last one carries the record's final value.
        const uint32_t final_pi = uint32_t(__atomic_load_n(&a.q.ctr->sq_ready, __ATOMIC_ACQUIRE)) & 0xffff;
        ASSERT_TRUE(saw(log, a.q.qpn, final_pi)) << "no doorbell with index " << final_pi;
        auto seen = doorbells_of(log, a.q.qpn);
        ASSERT_FALSE(seen.empty());
        EXPECT_EQ(seen.back().pi, final_pi);
        for (const auto& d : seen) EXPECT_EQ(d.raw, detail::mlx5db::doorbell_value(d.pi, a.q.qpn));
        EXPECT_EQ(p.qp[0]->state(), QpState::Rts);
    }
}

// One WQE per doorbell, each completion awaited: the stand-in sees every doorbell, so the exact
// sequence is checked: the 8 bytes (index and QP number, big-endian, no opcode or ds), the
// record holding the same index, and the WQE bytes in the backend's send ring.
TEST(Mlx5StandIn, ExactRingingSequence) {
    for (const Handler& hd : kHandlers) {
        SCOPED_TRACE(hd.name);
        std::shared_ptr<StandinNic::Log> log;
        Pair p(make(hd.h, &log));
        HostBuf src(p.pd, 4096, kLocalWrite), dst(p.pd, 4096, kAllAccess);
        auto a = p.h(0);
        for (uint32_t i = 0; i < 40; ++i) {
            ASSERT_EQ(dev::write(a, src.at(i), 8, src.lkey(), dst.addr(i * 8), dst.rkey()), Status::Ok);
            // The WQE as the NIC reads it, in the backend's send ring (one WQEBB: ctrl, raddr,
            // data): opcode, index, QP number, ds.
            mlx5::CtrlFields cf = mlx5::read_ctrl_seg(reinterpret_cast<const mlx5_wqe_ctrl_seg*>(
                mlx5::wqe_seg(a.q.sq, a.q.sq_log_bb, i, 0)));
            EXPECT_EQ(cf.opcode, MLX5_OPCODE_RDMA_WRITE);
            EXPECT_EQ(cf.wqe_index, i);
            EXPECT_EQ(cf.qpn, a.q.qpn);
            EXPECT_EQ(cf.ds, 3);
            ASSERT_EQ(dev::commit(a), Status::Ok);
            // The record kernels write: be32(i + 1) at [MLX5_SND_DBR] (the shadow under the proxy).
            EXPECT_EQ(a.q.dbrec[MLX5_SND_DBR], mlx5::to_be32(i + 1));
            wait_ok(a, 1);
            ASSERT_TRUE(saw(log, a.q.qpn, i + 1));
        }
        auto seen = doorbells_of(log, a.q.qpn);
        ASSERT_EQ(seen.size(), 40u);
        for (uint32_t i = 0; i < 40; ++i) {
            EXPECT_EQ(seen[i].pi, i + 1);
            EXPECT_EQ(seen[i].dbrec, i + 1);
            // Bytes in memory order: be32(pi << 8), then be32(qpn << 8).
            uint8_t bytes[8];
            std::memcpy(bytes, &seen[i].raw, 8);
            const uint32_t pi8 = (i + 1) << 8, q8 = a.q.qpn << 8;
            const uint8_t want[8] = {uint8_t(pi8 >> 24), uint8_t(pi8 >> 16), uint8_t(pi8 >> 8), uint8_t(pi8),
                                     uint8_t(q8 >> 24),  uint8_t(q8 >> 16),  uint8_t(q8 >> 8),  uint8_t(q8)};
            EXPECT_EQ(std::memcmp(bytes, want, 8), 0) << "doorbell " << i;
        }
    }
}

// Many CPU threads post and commit on one QP at once: every WQE executes, and the doorbells
// the NIC sees never go backwards (the doorbell lock orders them).
TEST(Mlx5StandIn, ManyThreadsOneQp) {
    for (const Handler& hd : kHandlers) {
        SCOPED_TRACE(hd.name);
        std::shared_ptr<StandinNic::Log> log;
        QpOptions o;
        o.sq_depth = 64;
        Pair p(make(hd.h, &log), o);
        constexpr int kThreads = 4, kEach = 300;
        HostBuf src(p.pd, kThreads * kEach * 8, kLocalWrite), dst(p.pd, kThreads * kEach * 8, kAllAccess, 0);
        gvtest::fill_random(src.data(), src.size(), 3);
        auto a = p.h(0);
        std::atomic<int> bad{0};
        std::vector<std::thread> ts;
        for (int t = 0; t < kThreads; ++t)
            ts.emplace_back([&, t] {
                for (int i = 0; i < kEach; ++i) {
                    size_t off = (size_t(t) * kEach + i) * 8;
                    uint32_t flags = (i % 8 == 7) ? kSignaled : 0;
                    // A full ring frees slots only when someone polls: with a short bound on
                    // the reservation, poll (any thread takes any completion) and try again.
                    Status st;
                    int tries = 0;
                    while ((st = dev::write(a, src.at(off), 8, src.lkey(), dst.addr(off), dst.rkey(), flags,
                                            1'000'000ull)) == Status::Timeout &&
                           ++tries < 10000) {
                        dev::commit(a);
                        Completion c[8];
                        dev::poll_cq(a.scq, c, 8);
                    }
                    if (st != Status::Ok) ++bad;
                    if (dev::commit(a) != Status::Ok) ++bad;
                    Completion c[8];
                    dev::poll_cq(a.scq, c, 8);
                }
            });
        for (auto& t : ts) t.join();
        EXPECT_EQ(bad.load(), 0);
        // Drain: a final signaled NOP completes after everything before it.
        ASSERT_EQ(dev::nop(a), Status::Ok);
        ASSERT_EQ(dev::commit(a), Status::Ok);
        for (int i = 0; i < 1000 && gvtest::first_diff(src.data(), dst.data(), src.size()) != -1; ++i) {
            Completion c[16];
            dev::poll_cq(a.scq, c, 16);
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        EXPECT_EQ(gvtest::first_diff(src.data(), dst.data(), src.size()), -1);
        auto seen = doorbells_of(log, a.q.qpn);  // includes the backwards check
        EXPECT_FALSE(seen.empty());
    }
}

// A SEND before the peer's receive: the stand-in retries it (as a NIC's RNR timer does) and it
// lands once the receive is posted; the receive doorbell record reaches the NIC through the
// proxy too.
TEST(Mlx5StandIn, SendWaitsForALateReceive) {
    for (const Handler& hd : kHandlers) {
        SCOPED_TRACE(hd.name);
        Pair p(make(hd.h, nullptr));
        HostBuf src(p.pd, 256, kLocalWrite), dst(p.pd, 256, kLocalWrite, 0);
        gvtest::fill_random(src.data(), 256, 9);
        auto a = p.h(0), b = p.h(1);
        ASSERT_EQ(dev::send(a, src.data(), 256, src.lkey()), Status::Ok);
        ASSERT_EQ(dev::commit(a), Status::Ok);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ASSERT_EQ(dev::recv(b, dst.data(), 256, dst.lkey()), Status::Ok);
        wait_ok(a, 1);
        Completion c;
        ASSERT_EQ(dev::wait_recv(b, 1, &c, kTimeout), Status::Ok);
        EXPECT_TRUE(c.ok());
        EXPECT_EQ(gvtest::first_diff(src.data(), dst.data(), 256), -1);
    }
}

// An error completion reaches the poller through the mlx5 CQ: a WRITE with a wrong rkey
// completes with REMOTE_ACCESS_ERR, the QP is in ERROR (as the NIC reports it), what follows
// is flushed, and a bounded wait returns instead of hanging.
TEST(Mlx5StandIn, ErrorCompletionIsDecodedAndTheQpFlushes) {
    for (const Handler& hd : kHandlers) {
        SCOPED_TRACE(hd.name);
        Pair p(make(hd.h, nullptr));
        HostBuf src(p.pd, 64, kLocalWrite), dst(p.pd, 64, kAllAccess);
        auto a = p.h(0);
        ASSERT_EQ(dev::write(a, src.data(), 64, src.lkey(), dst.addr(), dst.rkey() ^ 0x5500), Status::Ok);
        ASSERT_EQ(dev::write(a, src.data(), 64, src.lkey(), dst.addr(), dst.rkey()), Status::Ok);
        ASSERT_EQ(dev::commit(a), Status::Ok);
        Completion c[2];
        uint32_t got = 0;
        EXPECT_EQ(dev::wait_send(a, 2, c, kTimeout, &got), Status::CompletionError);
        ASSERT_EQ(got, 2u);
        EXPECT_EQ(c[0].cqe_opcode, MLX5_CQE_REQ_ERR);
        EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
        EXPECT_EQ(c[1].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
        EXPECT_EQ(p.qp[0]->state(), QpState::Error);
        // Nothing more comes: a bounded wait returns Timeout.
        EXPECT_EQ(dev::wait_send(a, 1, c, 50'000'000ull, &got), Status::Timeout);
        // On mlx5 the state lives in the NIC: kernels learn of ERROR from error completions.
        EXPECT_FALSE(dev::qp_in_error(a));
    }
}

// The flush READ (ReadFlush::Always, here on host memory): posted on the context's loopback
// QP, rung like any QP's, completed through its CQ.
TEST(Mlx5StandIn, FlushReadGoesThroughTheLoopbackQp) {
    for (const Handler& hd : kHandlers) {
        SCOPED_TRACE(hd.name);
        std::shared_ptr<StandinNic::Log> log;
        Pair p(make(hd.h, &log, ReadFlush::Always));
        auto a = p.h(0);
        ASSERT_NE(a.mlx5.flush, nullptr);
        const uint32_t fqpn = a.mlx5.flush->qp.q.qpn;
        EXPECT_NE(fqpn, a.q.qpn);
        for (int i = 0; i < 5; ++i) ASSERT_EQ(dev::flush_gpu_writes(a, kTimeout), Status::Ok);
        ASSERT_TRUE(saw(log, fqpn, 5));
        EXPECT_EQ(*a.mlx5.flush->failed, 0u);
        // Never: no flush QP at all.
        Pair q(make(hd.h, nullptr, ReadFlush::Never));
        EXPECT_EQ(q.h(0).mlx5.flush, nullptr);
        EXPECT_EQ(dev::flush_gpu_writes(q.h(0)), Status::Ok);
        // Auto on a CPU-only context: the NIC writes host memory, nothing to flush.
        Pair r(make(hd.h, nullptr, ReadFlush::Auto));
        EXPECT_EQ(r.h(0).mlx5.flush, nullptr);
    }
}

// Many QPs, one thread each, through one CPU proxy thread.
TEST(Mlx5StandIn, ManyQpsThroughOneProxy) {
    Context ctx = make(DoorbellHandler::CpuProxy, nullptr);
    constexpr int kPairs = 8;
    std::vector<std::unique_ptr<Pair>> pairs;
    for (int i = 0; i < kPairs; ++i) pairs.push_back(std::make_unique<Pair>(ctx));
    std::vector<std::unique_ptr<HostBuf>> src, dst;
    for (int i = 0; i < kPairs; ++i) {
        src.push_back(std::make_unique<HostBuf>(pairs[i]->pd, 1 << 16, kLocalWrite));
        dst.push_back(std::make_unique<HostBuf>(pairs[i]->pd, 1 << 16, kAllAccess, 0));
        gvtest::fill_random(src[i]->data(), 1 << 16, 50 + i);
    }
    std::vector<std::thread> ts;
    std::atomic<int> bad{0};
    for (int t = 0; t < kPairs; ++t)
        ts.emplace_back([&, t] {
            auto a = pairs[t]->h(0);
            for (int i = 0; i < 16; ++i) {
                size_t off = size_t(i) * 4096;
                if (dev::write(a, src[t]->at(off), 4096, src[t]->lkey(), dst[t]->addr(off), dst[t]->rkey()) != Status::Ok ||
                    dev::commit(a) != Status::Ok)
                    ++bad;
                Completion c;
                if (dev::wait_send(a, 1, &c, kTimeout) != Status::Ok) ++bad;
            }
        });
    for (auto& t : ts) t.join();
    EXPECT_EQ(bad.load(), 0);
    for (int i = 0; i < kPairs; ++i) EXPECT_EQ(gvtest::first_diff(src[i]->data(), dst[i]->data(), 1 << 16), -1) << i;
}

// reset() takes a QP back to RESET: its queues start over and it can be connected again.
TEST(Mlx5StandIn, ResetAndReconnect) {
    for (const Handler& hd : kHandlers) {
        SCOPED_TRACE(hd.name);
        Pair p(make(hd.h, nullptr));
        HostBuf src(p.pd, 64, kLocalWrite), dst(p.pd, 64, kAllAccess, 0);
        gvtest::fill_random(src.data(), 64, 1);
        auto a = p.h(0);
        ASSERT_EQ(dev::write(a, src.data(), 64, src.lkey(), dst.addr(), dst.rkey()), Status::Ok);
        ASSERT_EQ(dev::commit(a), Status::Ok);
        wait_ok(a, 1);
        p.qp[0]->reset();
        p.qp[1]->reset();
        EXPECT_EQ(p.qp[0]->state(), QpState::Reset);
        EXPECT_EQ(__atomic_load_n(&a.q.ctr->sq_reserved, __ATOMIC_ACQUIRE), 0u);
        p.qp[0]->connect(p.qp[1]->endpoint());
        p.qp[1]->connect(p.qp[0]->endpoint());
        std::memset(dst.data(), 0, 64);
        ASSERT_EQ(dev::write(a, src.data(), 64, src.lkey(), dst.addr(), dst.rkey()), Status::Ok);
        ASSERT_EQ(dev::commit(a), Status::Ok);
        wait_ok(a, 1);
        EXPECT_EQ(gvtest::first_diff(src.data(), dst.data(), 64), -1);
    }
}

// A CPU-only context: queues in host memory whatever the default, no GPU memory.
TEST(Mlx5StandIn, CpuContextChoices) {
    Context ctx = make(DoorbellHandler::Auto, nullptr);
    EXPECT_NE(ctx.selection().find("CPU-only"), std::string::npos) << ctx.selection();
    CompletionQueue cq(ctx);
    EXPECT_EQ(cq.memory(), MemoryKind::Host);
    EXPECT_THROW(CompletionQueue(ctx, CqOptions{64, MemoryKind::Device}), InvalidUsage);
}

// An mlx5 QP's endpoint travels in the out-of-band records unchanged (backend 2, no
// backend-specific bytes), and the peer connects from the parsed copy.
TEST(Mlx5StandIn, EndpointsTravelAsOobRecords) {
    Pair p(make(DoorbellHandler::Gpu, nullptr), QpOptions{}, MemoryKind::Default, 4096, /*connect=*/false);
    QpEndpoint e0 = p.qp[0]->endpoint(), e1 = p.qp[1]->endpoint();
    EXPECT_EQ(e0.backend, Backend::Mlx5);
    EXPECT_EQ(e0.extra.size, 0);
    QpEndpoint r0 = oob::QpRecord::parse(oob::QpRecord(e0).serialize()).endpoint;
    QpEndpoint r1 = oob::QpRecord::parse(oob::QpRecord(e1).serialize()).endpoint;
    EXPECT_EQ(r0.backend, Backend::Mlx5);
    EXPECT_EQ(r0.qpn, e0.qpn);
    EXPECT_EQ(r0.psn, e0.psn);
    EXPECT_EQ(r0.gid, e0.gid);
    EXPECT_EQ(r0.mtu, e0.mtu);
    EXPECT_EQ(r0.device, e0.device);
    // A backend-specific part on an mlx5 endpoint is refused.
    QpEndpoint bad = e0;
    bad.extra.size = 4;
    EXPECT_THROW(oob::QpRecord(bad).serialize(), InvalidUsage);
    p.qp[0]->connect(r1);
    p.qp[1]->connect(r0);
    HostBuf src(p.pd, 64, kLocalWrite), dst(p.pd, 64, kAllAccess, 0);
    gvtest::fill_random(src.data(), 64, 77);
    auto a = p.h(0);
    ASSERT_EQ(dev::write(a, src.data(), 64, src.lkey(), dst.addr(), dst.rkey()), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    wait_ok(a, 1);
    EXPECT_EQ(gvtest::first_diff(src.data(), dst.data(), 64), -1);
}
