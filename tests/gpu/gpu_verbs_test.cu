// The device-side verbs set driven from CUDA kernels: SEND / SEND_IMM with gather lists into
// receives that many threads of a kernel (or the host) post at once, and RNR retries that
// run out. (One thread's WRITE_IMM, SEND, inline, receive errors and the other RNR cases are
// the traffic suite's: tests/traffic/, run against every backend instance.)
// The software device executes everything on the GPU; the host checks every byte and every
// completion field. Every wait inside a kernel is bounded.
#include "gpu/gpu_verbs_util.cuh"

using namespace gv;
using gvtest::DevBuf;

namespace {

// =============================================================================================
// 1. SEND / SEND_IMM with up to 8 gather entries into receives of up to 8 scatter entries,
//    posted by kernels (thread scope, concurrently) or by the host before the launch.
// =============================================================================================

constexpr uint32_t kMsgs = 128;        // messages (threads) per launch
constexpr size_t kGPiece = 512;        // source slot of one gather entry
constexpr size_t kRPiece = 4096;       // receive slot of one scatter entry
constexpr uint32_t kLastEntry = 4000;  // every receive list ends with this: any message fits

struct Msg {
    uint32_t opcode;  // MLX5_OPCODE_SEND or MLX5_OPCODE_SEND_IMM
    uint32_t imm;
    uint32_t ns, nr;
    Sge gs[8];  // what message t gathers
    Sge rs[8];  // the receive list thread t posts (or the host posts t-th)
};

__global__ void two_sided_kernel(dev::QpHandle a, dev::QpHandle b, const Msg* msgs, bool post_recvs, bool poll_recvs,
                                 Completion* scqe, Completion* rcqe, DevErr* err) {
    const uint32_t t = threadIdx.x, n = blockDim.x;
    const Msg& m = msgs[t];
    // Every thread posts its receive at once (thread scope): the queue positions come out
    // in any order; the host reads the receive ring to see which list sits where.
    if (post_recvs) DCHECK_EQ(dev::post_recv(b, m.rs, m.nr, kWait), Status::Ok);
    __syncthreads();
    // Block scope: the SENDs take consecutive positions in thread order, so message t
    // consumes the t-th receive of this launch.
    DCHECK_EQ(dev::post_sge<Scope::Block>(a, uint8_t(m.opcode), m.gs, m.ns, 0, 0, m.imm, kSignaled, kWait), Status::Ok);
    DCHECK_EQ(dev::commit<Scope::Block>(a), Status::Ok);
    if (t == 0) {
        uint32_t got = 0;
        DCHECK_EQ(dev::wait_send(a, n, scqe, kWait, &got), Status::Ok);
        DCHECK_EQ(got, n);
        if (poll_recvs) {
            DCHECK_EQ(dev::wait_recv(b, n, rcqe, kWait, &got), Status::Ok);
            DCHECK_EQ(got, n);
        }
    }
}

/// qmem: where the queues live; host_posts: the host posts the receives (host queues only,
/// a CPU thread cannot touch device-memory queues) and polls the receive CQ.
void run_two_sided(MemoryKind qmem, bool host_posts, int rounds, uint64_t seed) {
    QpOptions o;
    o.max_send_sge = 8;
    o.max_recv_sge = 8;
    gvtest::Pair p(gvtest::gpu_ctx(), o, qmem);
    auto a = p.h(0), b = p.h(1);
    DevBuf src(kMsgs * 8 * kGPiece), rbuf(kMsgs * 8 * kRPiece);
    ASSERT_TRUE(src.p && rbuf.p);
    MemoryRegion ms(p.pd, src.p, src.n, kLocalWrite), mr(p.pd, rbuf.p, rbuf.n, kLocalWrite);
    DevBuf scqe(kMsgs * sizeof(Completion)), rcqe(kMsgs * sizeof(Completion)), dmsgs(kMsgs * sizeof(Msg));
    std::vector<uint8_t> hsrc(src.n);
    std::mt19937_64 rng(seed);
    const uint64_t s0 = addr_of(src), r0 = addr_of(rbuf);
    for (int round = 0; round < rounds; ++round) {
        SCOPED_TRACE(testing::Message() << "round " << round);
        Err err;
        gvtest::fill_random(hsrc.data(), hsrc.size(), seed * 1000 + round);
        h2d(src.p, hsrc.data(), hsrc.size());
        CUDA_OK(cudaMemset(rbuf.p, kGuard, rbuf.n));
        std::vector<Msg> msgs(kMsgs);
        for (uint32_t t = 0; t < kMsgs; ++t) {
            Msg& m = msgs[t];
            m.opcode = (t + round) % 2 ? MLX5_OPCODE_SEND_IMM : MLX5_OPCODE_SEND;
            m.imm = 0xC0DE0000u + uint32_t(round) * kMsgs + t;
            m.ns = 1 + uint32_t(rng() % 8);
            m.nr = 1 + uint32_t(rng() % 8);
            for (uint32_t i = 0; i < m.ns; ++i) {
                // Zero-length entries are legal (skipped); every 16th message is empty.
                uint32_t len = t % 16 == 5 ? 0 : uint32_t(rng() % 500);
                m.gs[i] = {s0 + (t * 8 + i) * kGPiece + rng() % 12, len, ms.lkey()};
            }
            for (uint32_t i = 0; i < m.nr; ++i) {
                uint32_t len = i + 1 == m.nr ? kLastEntry : 1 + uint32_t(rng() % 600);
                m.rs[i] = {r0 + (t * 8 + i) * kRPiece + rng() % 16, len, mr.lkey()};
            }
        }
        const unsigned long long sq0 = counters(a).sq_reserved, rq0 = counters(b).rq_reserved;
        if (host_posts)
            for (uint32_t t = 0; t < kMsgs; ++t) ASSERT_EQ(dev::post_recv(b, msgs[t].rs, msgs[t].nr), Status::Ok);
        h2d(dmsgs.p, msgs.data(), msgs.size() * sizeof(Msg));
        two_sided_kernel<<<1, kMsgs>>>(a, b, dmsgs.get<Msg>(), !host_posts, !host_posts, scqe.get<Completion>(),
                                       rcqe.get<Completion>(), err.get());
        LAUNCH_OK();
        err.expect_none();
        std::vector<Completion> rc(kMsgs);
        if (host_posts) {
            // A CPU thread polls the host-memory receive CQ the GPU executor completed into.
            uint32_t got = 0;
            ASSERT_EQ(dev::wait_recv(b, kMsgs, rc.data(), kWait, &got), Status::Ok) << got << " receive completions";
        } else {
            rc = d2h<Completion>(rcqe.p, kMsgs);
        }
        auto sc = d2h<Completion>(scqe.p, kMsgs);

        // Which receive list sits at each receive-queue index of this round.
        std::vector<uint32_t> owner(kMsgs);
        if (host_posts) {
            std::iota(owner.begin(), owner.end(), 0u);
        } else {
            const size_t stride = size_t(1) << b.q.rq_log_stride, cnt = size_t(1) << b.q.rq_log_cnt;
            auto ring = d2h<uint8_t>(b.q.rq, cnt * stride);
            std::vector<bool> seen(kMsgs, false);
            for (uint32_t k = 0; k < kMsgs; ++k) {
                const auto* ds = reinterpret_cast<const mlx5_wqe_data_seg*>(ring.data() + ((rq0 + k) & (cnt - 1)) * stride);
                uint64_t first = mlx5::from_be64(ds[0].addr);
                ASSERT_GE(first, r0);
                uint64_t who = (first - r0) / (8 * kRPiece);
                ASSERT_LT(who, kMsgs);
                ASSERT_FALSE(seen[who]) << "receive list of thread " << who << " posted twice";
                seen[who] = true;
                owner[k] = uint32_t(who);
                const Msg& m = msgs[who];
                for (uint32_t i = 0; i < m.nr; ++i) {
                    EXPECT_EQ(mlx5::from_be64(ds[i].addr), m.rs[i].addr) << "rq " << k << " entry " << i;
                    EXPECT_EQ(mlx5::from_be32(ds[i].byte_count), m.rs[i].length) << "rq " << k << " entry " << i;
                    EXPECT_EQ(mlx5::from_be32(ds[i].lkey), m.rs[i].lkey) << "rq " << k << " entry " << i;
                }
                if (m.nr < stride / 16) EXPECT_EQ(mlx5::from_be32(ds[m.nr].lkey), uint32_t(MLX5_INVALID_LKEY));
            }
        }

        std::vector<uint8_t> want(rbuf.n, kGuard);
        unsigned long long pos = sq0;
        for (uint32_t k = 0; k < kMsgs; ++k) {
            SCOPED_TRACE(testing::Message() << "message " << k);
            const Msg& m = msgs[k];
            std::vector<uint8_t> bytes;
            uint32_t nonzero = 0;
            for (uint32_t i = 0; i < m.ns; ++i) {
                const uint8_t* s = hsrc.data() + (m.gs[i].addr - s0);
                bytes.insert(bytes.end(), s, s + m.gs[i].length);
                nonzero += m.gs[i].length ? 1 : 0;
            }
            EXPECT_TRUE(sc[k].ok()) << mlx5::syndrome_name(sc[k].status);
            EXPECT_EQ(sc[k].cqe_opcode, MLX5_CQE_REQ);
            EXPECT_EQ(sc[k].wqe_opcode, m.opcode);
            EXPECT_EQ(sc[k].wqe_counter, uint16_t(pos));
            EXPECT_EQ(sc[k].qpn, p.qp[0]->qpn());
            pos += gvtest::bbs_sge(uint8_t(m.opcode), nonzero);

            EXPECT_TRUE(rc[k].ok()) << mlx5::syndrome_name(rc[k].status);
            EXPECT_TRUE(rc[k].is_recv());
            EXPECT_EQ(rc[k].cqe_opcode, m.opcode == MLX5_OPCODE_SEND_IMM ? MLX5_CQE_RESP_SEND_IMM : MLX5_CQE_RESP_SEND);
            EXPECT_EQ(rc[k].byte_len, bytes.size());
            if (m.opcode == MLX5_OPCODE_SEND_IMM) EXPECT_EQ(rc[k].imm, m.imm);
            EXPECT_EQ(rc[k].qpn, p.qp[1]->qpn());
            EXPECT_EQ(rc[k].wqe_counter, uint16_t(rq0 + k));
            // The bytes scatter in order over the list that sits at receive index k.
            const Msg& r = msgs[owner[k]];
            size_t off = 0;
            for (uint32_t i = 0; i < r.nr && off < bytes.size(); ++i) {
                size_t use = std::min<size_t>(r.rs[i].length, bytes.size() - off);
                std::memcpy(&want[r.rs[i].addr - r0], bytes.data() + off, use);
                off += use;
            }
            ASSERT_EQ(off, bytes.size());
        }
        EXPECT_EQ(counters(a).sq_reserved, pos);
        auto got = d2h<uint8_t>(rbuf.p, rbuf.n);
        long d = gvtest::first_diff(want.data(), got.data(), want.size());
        EXPECT_EQ(d, -1) << "receive buffer byte " << d << " (slot " << (d / (8 * kRPiece)) << ")";
        if (testing::Test::HasFailure()) return;
    }
}

TEST(GpuVerbsTwoSided, SendMultiSgeIntoKernelPostedReceives) {
    GV_SKIP_WITHOUT_GPU();
    run_two_sided(MemoryKind::Device, false, 3, 1);
}

TEST(GpuVerbsTwoSided, SendIntoHostPostedReceives) {
    GV_SKIP_WITHOUT_GPU();
    run_two_sided(MemoryKind::Host, true, 3, 2);
}

TEST(GpuVerbsTwoSided, HostMemoryQueuesKernelPostedReceives) {
    GV_SKIP_WITHOUT_GPU();
    run_two_sided(MemoryKind::Host, false, 2, 3);
}

// =============================================================================================
// 2. RNR retries that run out: a SEND with no receive posted, rnr_retry 2 and a 10 us timer,
//    retried by the kernel's wait_send until RNR_RETRY_EXC_ERR; the NOP behind it flushed.
//    A receive the peer block posts afterwards is not consumed. (rnr_retry 0 and a SEND
//    waiting for a late receive are the traffic suite's: tests/traffic/.)
// =============================================================================================

__global__ void rnr_retries_kernel(dev::QpHandle a, dev::QpHandle b, const uint8_t* src, uint32_t slkey, uint8_t* dst,
                                   uint32_t dlkey, unsigned* go, Completion* out, DevErr* err) {
    if (threadIdx.x != 0) return;
    if (blockIdx.x == 0) {  // requester
        DCHECK_EQ(dev::send_imm(a, src, 300, slkey, 0xfeed, kSignaled, kWait), Status::Ok);
        DCHECK_EQ(dev::nop(a, kSignaled, kWait), Status::Ok);
        dev::commit(a);
        uint32_t got = 0;
        DCHECK_EQ(dev::wait_send(a, 2, out, kWait, &got), Status::CompletionError);
        DCHECK_EQ(got, 2u);
        atom::store_release(go, 1u);
    } else {  // responder: posts its receive once the requester's SEND failed
        if (!gvtest::wait_at_least(go, 1u, kWait)) {
            dev_fail(err, __LINE__, 0, 1);
            return;
        }
        DCHECK_EQ(dev::recv(b, dst + 10, 1000, dlkey, kWait), Status::Ok);
        uint32_t got = 0;
        // After a failed SEND the receive stays posted: nothing consumes it.
        DCHECK_EQ(dev::wait_recv(b, 1, out + 2, 20 * kMs, &got), Status::Timeout);
    }
}

TEST(GpuVerbsRnr, RetriesExhausted) {
    GV_SKIP_WITHOUT_GPU();
    gvtest::Pair p(gvtest::gpu_ctx(), {}, MemoryKind::Default, 64, false);
    RtsAttr rts;
    rts.rnr_retry = 2;
    RtrAttr rtr;
    rtr.min_rnr_timer = 1;  // 10 us
    p.qp[0]->connect(p.qp[1]->endpoint(), {}, {}, rts);
    p.qp[1]->connect(p.qp[0]->endpoint(), {}, rtr);
    DevBuf src(4096), dst(4096), go(4), out(3 * sizeof(Completion));
    std::vector<uint8_t> hsrc(4096);
    gvtest::fill_random(hsrc.data(), 4096, 5);
    h2d(src.p, hsrc.data(), 4096);
    CUDA_OK(cudaMemset(dst.p, kGuard, 4096));
    CUDA_OK(cudaMemset(go.p, 0, 4));
    CUDA_OK(cudaMemset(out.p, 0, out.n));
    MemoryRegion ms(p.pd, src.p, 4096, kLocalWrite), md(p.pd, dst.p, 4096, kLocalWrite);
    Err err;
    rnr_retries_kernel<<<2, 32>>>(p.h(0), p.h(1), src.get(), ms.lkey(), dst.get(), md.lkey(), go.get<unsigned>(),
                                  out.get<Completion>(), err.get());
    LAUNCH_OK();
    err.expect_none();
    auto c = d2h<Completion>(out.p, 3);
    auto hd = d2h<uint8_t>(dst.p, 4096);
    EXPECT_EQ(c[0].cqe_opcode, MLX5_CQE_REQ_ERR);
    EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR) << mlx5::syndrome_name(c[0].status);
    EXPECT_EQ(c[0].wqe_opcode, MLX5_OPCODE_SEND_IMM);
    EXPECT_EQ(c[0].wqe_counter, 0u);
    EXPECT_EQ(c[1].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR) << mlx5::syndrome_name(c[1].status);
    EXPECT_EQ(c[1].wqe_opcode, MLX5_OPCODE_NOP);
    EXPECT_EQ(p.qp[0]->state(), QpState::Error);
    EXPECT_EQ(p.qp[0]->error_syndrome(), MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
    EXPECT_EQ(p.qp[1]->state(), QpState::Rts);  // an RNR NAK leaves the responder alone
    EXPECT_EQ(gvtest::first_not(hd.data(), 4096, kGuard), -1);
}

}  // namespace
