// The software device's own error cases, as a ConnectX reports them: keys of deregistered
// regions (also after the region table reuses their slot), corrupted WQEs, a peer QP in
// RESET. Each completes with the right mlx5 syndrome, moves the QP to ERROR, flushes what
// follows (WR_FLUSH_ERR) and leaves memory untouched. (Protection, access, atomics and
// receive errors that every backend reports alike are the traffic suite's: tests/traffic/.)
#include "soft_errors_util.hpp"

using namespace gv;
using gvtest::HostBuf;
using gvtest::Pair;

// ---- deregistered regions -------------------------------------------------------------

TEST(SoftErrors, StaleKeys) {
    {
        SCOPED_TRACE("stale lkey");
        Env e;
        uint32_t key;
        {
            MemoryRegion m(e.p.pd, e.src.data(), e.src.size(), kLocalWrite);
            key = m.lkey();
        }
        e.run(
            [&] {
                ASSERT_EQ(dev::write(e.a(), e.src.at(0), Env::kLen, key, e.dst.addr(Env::kTgt), e.dst.rkey()),
                          Status::Ok);
            },
            MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, MLX5_OPCODE_RDMA_WRITE);
    }
    {
        SCOPED_TRACE("stale rkey");
        Env e;
        uint32_t key;
        {
            MemoryRegion m(e.p.pd, e.dst.data(), e.dst.size(), kAllAccess);
            key = m.rkey();
        }
        e.run(
            [&] {
                ASSERT_EQ(dev::write(e.a(), e.src.at(0), Env::kLen, e.src.lkey(), e.dst.addr(Env::kTgt), key),
                          Status::Ok);
            },
            MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, MLX5_OPCODE_RDMA_WRITE);
    }
}

// A key stays dead after its slot in the region table is reused by a new registration.
TEST(SoftErrors, StaleRkeyAfterSlotReuse) {
    Env e;
    uint32_t stale;
    {
        MemoryRegion m(e.p.pd, e.dst.data(), e.dst.size(), kAllAccess);
        stale = m.rkey();
    }
    std::unique_ptr<MemoryRegion> reused;
    for (int i = 0; i < 20000 && !reused; ++i) {
        auto m = std::make_unique<MemoryRegion>(e.p.pd, e.dst.data(), e.dst.size(), kAllAccess);
        if ((m->rkey() >> 8) == (stale >> 8)) reused = std::move(m);
    }
    ASSERT_TRUE(reused) << "the region table never reused the slot";
    ASSERT_NE(reused->rkey(), stale);
    e.run(
        [&] {
            ASSERT_EQ(dev::write(e.a(), e.src.at(0), Env::kLen, e.src.lkey(), e.dst.addr(Env::kTgt), stale),
                      Status::Ok);
        },
        MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, MLX5_OPCODE_RDMA_WRITE);
}

// The executor guesses a drain's regions from the keys the QP's last drain used, and loads
// their entries before it has read the first WQE (QpContext::hint_lkey / hint_rkey). A key that
// worked in one drain and was deregistered before the next must fail there all the same, on the
// fast path (8 bytes) and through prepare() (256 bytes), and leave memory untouched.
TEST(SoftErrors, KeyDeregisteredBetweenDrains) {
    for (const bool remote : {false, true}) {
        for (const uint32_t len : {8u, 256u}) {
            SCOPED_TRACE(std::string(remote ? "rkey" : "lkey") + ", " + std::to_string(len) + " bytes");
            Env e;
            auto h = e.a();
            auto ml = std::make_unique<MemoryRegion>(e.p.pd, e.src.data(), e.src.size(), kLocalWrite);
            auto mr = std::make_unique<MemoryRegion>(e.p.pd, e.dst.data(), e.dst.size(), kAllAccess);
            const uint32_t lkey = ml->lkey(), rkey = mr->rkey();
            Completion c[2];
            // Drain 1: the keys work (and become the next drain's guesses).
            ASSERT_EQ(dev::write(h, e.src.at(0), len, lkey, e.dst.addr(0), rkey), Status::Ok);
            ASSERT_EQ(dev::commit(h), Status::Ok);
            ASSERT_EQ(dev::wait_send(h, 1, c, kTimeout), Status::Ok);
            ASSERT_EQ(gvtest::first_diff(e.src.at(0), e.dst.data(), len), -1) << "the first WRITE did not land";
            (remote ? mr : ml).reset();
            const std::vector<uint8_t> dst0 = e.dst.bytes;
            // Drain 2: its first WQE names the same keys, one of them dead now.
            ASSERT_EQ(dev::write(h, e.src.at(0), len, lkey, e.dst.addr(Env::kTgt), rkey), Status::Ok);
            EXPECT_EQ(dev::commit(h), Status::QpError);
            ASSERT_EQ(dev::wait_send(h, 1, c, kTimeout), Status::CompletionError);
            const uint8_t want = remote ? MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR : MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
            EXPECT_EQ(c[0].status, want) << "got " << mlx5::syndrome_name(c[0].status) << ", expected "
                                         << mlx5::syndrome_name(want);
            EXPECT_EQ(e.p.qp[0]->state(), QpState::Error);
            EXPECT_EQ(gvtest::first_diff(dst0.data(), e.dst.data(), Env::kSize), -1) << "remote memory changed";
        }
    }
}

// ---- corrupted WQEs -----------------------------------------------------------------------

TEST(SoftErrors, CorruptedWqe) {
    struct Case {
        const char* what;
        uint8_t opcode;
        bool wrong_qpn;
        uint8_t ds;
        int skew;
    } cases[] = {{"unknown opcode", 0x07, false, 1, 0},
                 {"opcode 0xff", 0xff, false, 3, 0},
                 {"QP number of another QP", MLX5_OPCODE_NOP, true, 1, 0},
                 {"ds = 0", MLX5_OPCODE_NOP, false, 0, 0},
                 {"WRITE with ds = 1 (no remote address)", MLX5_OPCODE_RDMA_WRITE, false, 1, 0},
                 {"WQE index not its position", MLX5_OPCODE_NOP, false, 1, 1}};
    for (const Case& k : cases) {
        SCOPED_TRACE(k.what);
        Env e;
        uint32_t qpn = k.wrong_qpn ? e.p.qp[1]->qpn() : e.p.qp[0]->qpn();
        e.run([&] { post_raw_ctrl(e.a(), k.opcode, qpn, k.ds, k.skew); }, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
              k.opcode);
    }
}

// ---- peer not ready ----------------------------------------------------------------------

TEST(SoftErrors, PeerInReset) {
    {
        SCOPED_TRACE("peer never connected");
        Env e({}, {}, false);
        ASSERT_EQ(e.p.qp[1]->state(), QpState::Reset);
        e.run(
            [&] {
                ASSERT_EQ(dev::write(e.a(), e.src.at(0), Env::kLen, e.src.lkey(), e.dst.addr(Env::kTgt),
                                     e.dst.rkey()),
                          Status::Ok);
            },
            MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR, MLX5_OPCODE_RDMA_WRITE, true);
    }
    {
        SCOPED_TRACE("peer reset after connecting");
        Env e;
        // The first WQE of run() must still succeed: reset the peer right after it executes.
        auto h = e.a();
        ASSERT_EQ(dev::nop(h), Status::Ok);
        ASSERT_EQ(dev::commit(h), Status::Ok);
        ASSERT_EQ(dev::wait_send(h, 1, nullptr, kTimeout), Status::Ok);
        e.p.qp[1]->reset();
        ASSERT_EQ(e.p.qp[1]->state(), QpState::Reset);
        // The good WRITE of run() now fails too: check the peer state alone.
        ASSERT_EQ(dev::write(h, e.src.at(0), Env::kLen, e.src.lkey(), e.dst.addr(Env::kTgt), e.dst.rkey()),
                  Status::Ok);
        EXPECT_EQ(dev::commit(h), Status::QpError);
        Completion c{};
        ASSERT_EQ(dev::wait_send(h, 1, &c, kTimeout), Status::CompletionError);
        EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
        EXPECT_EQ(e.p.qp[0]->state(), QpState::Error);
        EXPECT_EQ(gvtest::first_not(e.dst.data(), e.dst.size(), gvtest::kGuard), -1);
    }
}
