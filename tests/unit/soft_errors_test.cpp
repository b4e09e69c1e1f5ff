// The software device's error behaviour, as a ConnectX reports it: every violation completes
// with the right mlx5 syndrome, moves the QP to ERROR, flushes what follows (WR_FLUSH_ERR),
// and leaves memory untouched.
#include "soft_errors_util.hpp"

using namespace gv;
using gvtest::HostBuf;
using gvtest::Pair;

// ---- local protection ----------------------------------------------------------------

TEST(SoftErrors, BadLkey) {
    for (uint32_t key : {0u, 0x12345601u, uint32_t(MLX5_INVALID_LKEY)}) {
        SCOPED_TRACE(testing::Message() << "lkey " << key);
        Env e;
        e.run(
            [&] {
                ASSERT_EQ(dev::write(e.a(), e.src.at(0), Env::kLen, key, e.dst.addr(Env::kTgt), e.dst.rkey()),
                          Status::Ok);
            },
            MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, MLX5_OPCODE_RDMA_WRITE);
    }
}

TEST(SoftErrors, UnsignaledBadWqeStillCompletes) {
    Env e;
    e.run(
        [&] {
            ASSERT_EQ(
                dev::write(e.a(), e.src.at(0), Env::kLen, 0x7777701u, e.dst.addr(Env::kTgt), e.dst.rkey(), 0),
                Status::Ok);
        },
        MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, MLX5_OPCODE_RDMA_WRITE);
}

TEST(SoftErrors, LkeyOfAnotherPd) {
    Env e;
    ProtectionDomain other(e.p.ctx);
    MemoryRegion m(other, e.src.data(), e.src.size(), kLocalWrite);
    e.run(
        [&] {
            ASSERT_EQ(
                dev::write(e.a(), e.src.at(0), Env::kLen, m.lkey(), e.dst.addr(Env::kTgt), e.dst.rkey()),
                Status::Ok);
        },
        MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, MLX5_OPCODE_RDMA_WRITE);
}

TEST(SoftErrors, LocalRangeOutOfBounds) {
    // A region over src[64, 64+1024): one byte past its end, one byte before its start.
    for (int below : {0, 1}) {
        SCOPED_TRACE(below ? "before the start" : "past the end");
        Env e;
        MemoryRegion m(e.p.pd, e.src.at(64), 1024, kLocalWrite);
        uint8_t* from = below ? e.src.at(63) : e.src.at(64 + 1024 - Env::kLen + 1);
        e.run(
            [&] {
                ASSERT_EQ(dev::write(e.a(), from, Env::kLen, m.lkey(), e.dst.addr(Env::kTgt), e.dst.rkey()),
                          Status::Ok);
            },
            MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, MLX5_OPCODE_RDMA_WRITE);
    }
}

TEST(SoftErrors, ReadIntoRegionWithoutLocalWrite) {
    Env e;
    MemoryRegion ro(e.p.pd, e.back.data(), e.back.size(), kRemoteRead);  // local read only
    e.run(
        [&] {
            ASSERT_EQ(
                dev::read(e.a(), e.back.at(512), Env::kLen, ro.lkey(), e.dst.addr(Env::kTgt), e.dst.rkey()),
                Status::Ok);
        },
        MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, MLX5_OPCODE_RDMA_READ);
}

// ---- remote access ---------------------------------------------------------------------

TEST(SoftErrors, BadRkey) {
    {
        Env e;
        e.run(
            [&] {
                ASSERT_EQ(dev::write(e.a(), e.src.at(0), Env::kLen, e.src.lkey(), e.dst.addr(Env::kTgt),
                                     0x5555501u),
                          Status::Ok);
            },
            MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, MLX5_OPCODE_RDMA_WRITE);
    }
    {
        Env e;
        e.run(
            [&] {
                ASSERT_EQ(dev::read(e.a(), e.back.at(0), Env::kLen, e.back.lkey(), e.dst.addr(Env::kTgt), 0u),
                          Status::Ok);
            },
            MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, MLX5_OPCODE_RDMA_READ);
    }
}

TEST(SoftErrors, RemoteRangeOutOfBounds) {
    // A remote region over dst[1024, 1024+2048), inside guard bytes the error must not touch.
    struct Case {
        const char* what;
        size_t off;
        bool read;
    } cases[] = {{"write past the end", 1024 + 2048 - Env::kLen + 1, false},
                 {"write before the start", 1023, false},
                 {"read past the end", 1024 + 2048 - Env::kLen + 1, true},
                 {"read before the start", 1000, true}};
    for (const Case& k : cases) {
        SCOPED_TRACE(k.what);
        Env e;
        MemoryRegion m(e.p.pd, e.dst.at(1024), 2048, kAllAccess);
        e.run(
            [&] {
                if (k.read)
                    ASSERT_EQ(
                        dev::read(e.a(), e.back.at(0), Env::kLen, e.back.lkey(), e.dst.addr(k.off), m.rkey()),
                        Status::Ok);
                else
                    ASSERT_EQ(
                        dev::write(e.a(), e.src.at(0), Env::kLen, e.src.lkey(), e.dst.addr(k.off), m.rkey()),
                        Status::Ok);
            },
            MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, k.read ? MLX5_OPCODE_RDMA_READ : MLX5_OPCODE_RDMA_WRITE);
    }
}

TEST(SoftErrors, RemoteRegionLacksAccess) {
    {
        SCOPED_TRACE("WRITE into a region without remote write");
        Env e;
        MemoryRegion m(e.p.pd, e.dst.data(), e.dst.size(), kLocalWrite | kRemoteRead | kRemoteAtomic);
        e.run(
            [&] {
                ASSERT_EQ(
                    dev::write(e.a(), e.src.at(0), Env::kLen, e.src.lkey(), e.dst.addr(Env::kTgt), m.rkey()),
                    Status::Ok);
            },
            MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, MLX5_OPCODE_RDMA_WRITE);
    }
    {
        SCOPED_TRACE("READ from a region without remote read");
        Env e;
        MemoryRegion m(e.p.pd, e.dst.data(), e.dst.size(), kLocalWrite | kRemoteWrite | kRemoteAtomic);
        e.run(
            [&] {
                ASSERT_EQ(
                    dev::read(e.a(), e.back.at(0), Env::kLen, e.back.lkey(), e.dst.addr(Env::kTgt), m.rkey()),
                    Status::Ok);
            },
            MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, MLX5_OPCODE_RDMA_READ);
    }
    {
        SCOPED_TRACE("WRITE with the rkey of a region of another PD");
        Env e;
        ProtectionDomain other(e.p.ctx);
        MemoryRegion m(other, e.dst.data(), e.dst.size(), kAllAccess);
        e.run(
            [&] {
                ASSERT_EQ(
                    dev::write(e.a(), e.src.at(0), Env::kLen, e.src.lkey(), e.dst.addr(Env::kTgt), m.rkey()),
                    Status::Ok);
            },
            MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, MLX5_OPCODE_RDMA_WRITE);
    }
}

TEST(SoftErrors, PeerQpAccessFlags) {
    {
        SCOPED_TRACE("peer QP without remote write");
        Env e({}, InitAttr{kRemoteRead | kRemoteAtomic});
        e.run(
            [&] {
                ASSERT_EQ(dev::write(e.a(), e.src.at(0), Env::kLen, e.src.lkey(), e.dst.addr(Env::kTgt),
                                     e.dst.rkey()),
                          Status::Ok);
            },
            MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, MLX5_OPCODE_RDMA_WRITE, true);
    }
    {
        SCOPED_TRACE("peer QP without remote read");
        Env e({}, InitAttr{kRemoteWrite | kRemoteAtomic});
        e.run(
            [&] {
                ASSERT_EQ(dev::read(e.a(), e.back.at(0), Env::kLen, e.back.lkey(), e.dst.addr(Env::kTgt),
                                    e.dst.rkey()),
                          Status::Ok);
            },
            MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, MLX5_OPCODE_RDMA_READ);
    }
    {
        SCOPED_TRACE("peer QP without remote atomic");
        Env e({}, InitAttr{kRemoteWrite | kRemoteRead});
        e.run(
            [&] {
                ASSERT_EQ(dev::fetch_add(e.a(), reinterpret_cast<uint64_t*>(e.back.at(8)), e.back.lkey(),
                                         e.dst.addr(Env::kTgt), e.dst.rkey(), 1),
                          Status::Ok);
            },
            MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, MLX5_OPCODE_ATOMIC_FA);
    }
}

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

// ---- atomics ---------------------------------------------------------------------------

TEST(SoftErrors, MisalignedAtomic) {
    for (int off : {1, 4, 7}) {
        SCOPED_TRACE(testing::Message() << "offset " << off);
        Env e;
        e.run(
            [&] {
                ASSERT_EQ(
                    dev::compare_swap(e.a(), reinterpret_cast<uint64_t*>(e.back.at(8)), e.back.lkey(),
                                      e.dst.addr(Env::kTgt + off), e.dst.rkey(), 0xa5a5a5a5a5a5a5a5ull, 1),
                    Status::Ok);
            },
            MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR, MLX5_OPCODE_ATOMIC_CS);
    }
}

TEST(SoftErrors, AtomicResultIntoRegionWithoutLocalWrite) {
    Env e;
    MemoryRegion ro(e.p.pd, e.back.data(), e.back.size(), kRemoteRead);  // local read only
    e.run(
        [&] {
            ASSERT_EQ(dev::fetch_add(e.a(), reinterpret_cast<uint64_t*>(e.back.at(8)), ro.lkey(),
                                     e.dst.addr(Env::kTgt), e.dst.rkey(), 5),
                      Status::Ok);
        },
        MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, MLX5_OPCODE_ATOMIC_FA);
}

TEST(SoftErrors, AtomicWithoutRemoteAtomicAccess) {
    Env e;
    MemoryRegion m(e.p.pd, e.dst.data(), e.dst.size(), kLocalWrite | kRemoteWrite | kRemoteRead);
    e.run(
        [&] {
            ASSERT_EQ(dev::fetch_add(e.a(), reinterpret_cast<uint64_t*>(e.back.at(8)), e.back.lkey(),
                                     e.dst.addr(Env::kTgt), m.rkey(), 5),
                      Status::Ok);
        },
        MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, MLX5_OPCODE_ATOMIC_FA);
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

// ---- receive-side errors -------------------------------------------------------------

// A SEND larger than the receive: the requester gets REMOTE_INVAL_REQ_ERR, the responder
// a LOCAL_LENGTH_ERR receive completion, and both QPs end in ERROR; nothing is written.
TEST(SoftErrors, SendLargerThanReceive) {
    Env e;
    auto a = e.a(), b = e.b();
    ASSERT_EQ(dev::recv(b, e.back.at(Env::kTgt), 64, e.back.lkey()), Status::Ok);
    ASSERT_EQ(dev::recv(b, e.back.at(Env::kTgt + 128), 4096, e.back.lkey()), Status::Ok);  // flushed later
    e.run([&] { ASSERT_EQ(dev::send(a, e.src.at(0), 65, e.src.lkey()), Status::Ok); },
          MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR, MLX5_OPCODE_SEND);
    Completion c[2];
    ASSERT_EQ(dev::wait_recv(b, 2, c, kTimeout), Status::CompletionError);
    EXPECT_EQ(c[0].cqe_opcode, MLX5_CQE_RESP_ERR);
    EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
    EXPECT_EQ(c[0].wqe_counter, 0u);
    EXPECT_EQ(c[0].qpn, e.p.qp[1]->qpn());
    EXPECT_EQ(c[1].cqe_opcode, MLX5_CQE_RESP_ERR);
    EXPECT_EQ(c[1].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
    EXPECT_EQ(c[1].wqe_counter, 1u);
    EXPECT_EQ(e.p.qp[1]->state(), QpState::Error);
    EXPECT_EQ(e.p.qp[1]->error_syndrome(), MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
}

// Multi-entry receive lists: the sum of the entries is what counts.
TEST(SoftErrors, SendLargerThanScatterList) {
    QpOptions o;
    o.max_send_sge = 2;
    o.max_recv_sge = 4;
    Env e(o);
    auto a = e.a(), b = e.b();
    Sge rs[3] = {{e.back.addr(Env::kTgt), 100, e.back.lkey()},
                 {e.back.addr(Env::kTgt + 200), 50, e.back.lkey()},
                 {e.back.addr(Env::kTgt + 300), 10, e.back.lkey()}};
    ASSERT_EQ(dev::post_recv(b, rs, 3), Status::Ok);
    Sge gs[2] = {{e.src.addr(0), 80, e.src.lkey()}, {e.src.addr(100), 81, e.src.lkey()}};  // 161 > 160
    e.run([&] { ASSERT_EQ(dev::post_sge(a, MLX5_OPCODE_SEND, gs, 2, 0, 0, 0, kSignaled), Status::Ok); },
          MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR, MLX5_OPCODE_SEND);
    Completion c{};
    ASSERT_EQ(dev::wait_recv(b, 1, &c, kTimeout), Status::CompletionError);
    EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
    EXPECT_EQ(e.p.qp[1]->state(), QpState::Error);
}

// A receive whose buffer key is invalid: the responder reports LOCAL_PROT_ERR on its
// receive, the requester REMOTE_OP_ERR (a NAK "remote operational error"); both QPs end in
// ERROR.
TEST(SoftErrors, ReceiveWithBadLkey) {
    Env e;
    auto a = e.a(), b = e.b();
    ASSERT_EQ(dev::recv(b, e.back.at(Env::kTgt), 1024, 0x4444401u), Status::Ok);
    e.run([&] { ASSERT_EQ(dev::send(a, e.src.at(0), 100, e.src.lkey()), Status::Ok); },
          MLX5_CQE_SYNDROME_REMOTE_OP_ERR, MLX5_OPCODE_SEND);
    Completion c{};
    ASSERT_EQ(dev::wait_recv(b, 1, &c, kTimeout), Status::CompletionError);
    EXPECT_EQ(c.cqe_opcode, MLX5_CQE_RESP_ERR);
    EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
    EXPECT_EQ(c.qpn, e.p.qp[1]->qpn());
    EXPECT_EQ(e.p.qp[1]->state(), QpState::Error);
    EXPECT_EQ(e.p.qp[1]->error_syndrome(), MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
}
