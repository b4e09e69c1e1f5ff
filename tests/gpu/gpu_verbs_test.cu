// The device-side verbs set driven from CUDA kernels: SEND / SEND_IMM / WRITE_IMM into receives
// posted by kernels or by the host, receive-side errors, the RNR rules, inline WRITE / SEND.
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
            pos += bbs_sge(uint8_t(m.opcode), nonzero);

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
// 2. WRITE_IMM consumes a posted receive: RESP_WR_IMM with the immediate and byte count; the
//    data lands at raddr, never in the receive's buffer.
// =============================================================================================

__global__ void write_imm_kernel(dev::QpHandle a, dev::QpHandle b, const uint8_t* src, uint32_t lkey, uint64_t dst,
                                 uint32_t rkey, uint8_t* rbuf, uint32_t rlkey, const uint32_t* lens, const uint64_t* offs,
                                 Completion* scqe, Completion* rcqe, DevErr* err) {
    const uint32_t t = threadIdx.x, n = blockDim.x;
    if (t == 0)
        for (uint32_t i = 0; i < n; ++i) DCHECK_EQ(dev::recv(b, rbuf + i * 64, 64, rlkey, kWait), Status::Ok);
    __syncthreads();
    DCHECK_EQ(dev::write_imm<Scope::Block>(a, src + offs[t], lens[t], lkey, dst + offs[t], rkey, 0xabc00000u + t,
                                           kSignaled, kWait),
              Status::Ok);
    DCHECK_EQ(dev::commit<Scope::Block>(a), Status::Ok);
    if (t == 0) {
        DCHECK_EQ(dev::wait_send(a, n, scqe, kWait), Status::Ok);
        DCHECK_EQ(dev::wait_recv(b, n, rcqe, kWait), Status::Ok);
        Completion c;
        DCHECK_EQ(dev::poll_cq(b.rcq, &c, 1), 0u);
    }
}

TEST(GpuVerbsTwoSided, WriteImmConsumesReceive) {
    GV_SKIP_WITHOUT_GPU();
    gvtest::Pair p(gvtest::gpu_ctx());
    auto a = p.h(0), b = p.h(1);
    constexpr uint32_t T = 64;
    const uint32_t table[8] = {0, 1, 100, 4096, 60000, 7, 513, 65536};
    std::vector<uint32_t> lens(T);
    std::vector<uint64_t> offs(T);
    uint64_t off = 0;
    for (uint32_t t = 0; t < T; ++t) {
        lens[t] = table[t % 8];
        offs[t] = off;
        off += lens[t] + 3;  // 3 guard bytes between targets
    }
    const size_t total = off + 64;
    DevBuf src(total), dst(total), rbuf(T * 64);
    std::vector<uint8_t> hsrc(total);
    gvtest::fill_random(hsrc.data(), total, 7);
    h2d(src.p, hsrc.data(), total);
    CUDA_OK(cudaMemset(dst.p, kGuard, total));
    CUDA_OK(cudaMemset(rbuf.p, kGuard, rbuf.n));
    MemoryRegion ms(p.pd, src.p, total, kLocalWrite), md(p.pd, dst.p, total, kAllAccess),
        mr(p.pd, rbuf.p, rbuf.n, kLocalWrite);
    auto dl = upload(lens);
    auto doff = upload(offs);
    DevBuf scqe(T * sizeof(Completion)), rcqe(T * sizeof(Completion));
    Err err;
    write_imm_kernel<<<1, T>>>(a, b, src.get(), ms.lkey(), addr_of(dst), md.rkey(), rbuf.get(), mr.lkey(),
                               dl->get<uint32_t>(), doff->get<uint64_t>(), scqe.get<Completion>(), rcqe.get<Completion>(),
                               err.get());
    LAUNCH_OK();
    err.expect_none();
    auto sc = d2h<Completion>(scqe.p, T), rc = d2h<Completion>(rcqe.p, T);
    auto hdst = d2h<uint8_t>(dst.p, total);
    for (uint32_t t = 0; t < T; ++t) {
        SCOPED_TRACE(testing::Message() << "WRITE_IMM " << t << " of " << lens[t] << " bytes");
        EXPECT_TRUE(sc[t].ok());
        EXPECT_EQ(sc[t].wqe_opcode, MLX5_OPCODE_RDMA_WRITE_IMM);
        EXPECT_EQ(sc[t].wqe_counter, uint16_t(t));
        EXPECT_TRUE(rc[t].ok()) << mlx5::syndrome_name(rc[t].status);
        EXPECT_EQ(rc[t].cqe_opcode, MLX5_CQE_RESP_WR_IMM);
        EXPECT_EQ(rc[t].imm, 0xabc00000u + t);
        EXPECT_EQ(rc[t].byte_len, lens[t]);
        EXPECT_EQ(rc[t].qpn, p.qp[1]->qpn());
        EXPECT_EQ(rc[t].wqe_counter, uint16_t(t));
        EXPECT_EQ(gvtest::first_diff(hsrc.data() + offs[t], hdst.data() + offs[t], lens[t]), -1);
        EXPECT_EQ(first_not(hdst.data() + offs[t] + lens[t], 3, kGuard), -1);
    }
    auto hr = d2h<uint8_t>(rbuf.p, rbuf.n);
    EXPECT_EQ(first_not(hr.data(), hr.size(), kGuard), -1) << "a WRITE_IMM wrote into a receive buffer";
}

// =============================================================================================
// 3. SEND larger than the posted receive: REMOTE_INVAL_REQ_ERR on the requester,
//    RESP_ERR / LOCAL_LENGTH_ERR on the responder, both QPs in ERROR, nothing written.
// =============================================================================================

__global__ void send_too_large_kernel(dev::QpHandle a, dev::QpHandle b, const uint8_t* src, uint32_t slkey,
                                      uint8_t* rbuf, uint32_t rlkey, uint64_t dst, uint32_t drkey, uint64_t pre,
                                      uint32_t prkey, Completion* scqe, Completion* rcqe, unsigned long long* bad_pos,
                                      int* commit_st, DevErr* err) {
    if (threadIdx.x == 0) {
        DCHECK_EQ(dev::recv(b, rbuf + 4096, 64, rlkey, kWait), Status::Ok);
        DCHECK_EQ(dev::recv(b, rbuf + 4096 + 128, 4096, rlkey, kWait), Status::Ok);  // flushed later
        DCHECK_EQ(dev::write(a, src, 256, slkey, pre, prkey, kSignaled, kWait), Status::Ok);
        *bad_pos = atom::load_acquire(&a.q.ctr->sq_reserved);
        DCHECK_EQ(dev::send(a, src, 65, slkey, kSignaled, kWait), Status::Ok);
        DCHECK_EQ(dev::write(a, src, 256, slkey, dst + 1024, drkey, 0, kWait), Status::Ok);
        DCHECK_EQ(dev::nop(a, 0, kWait), Status::Ok);  // unsignaled: a flushed WQE completes anyway
    }
    Status cs = dev::commit<Scope::Block>(a);
    if (threadIdx.x == 0) {
        *commit_st = int(cs);
        uint32_t got = 0;
        DCHECK_EQ(dev::wait_send(a, 4, scqe, kWait, &got), Status::CompletionError);
        DCHECK_EQ(got, 4u);
        DCHECK_EQ(dev::wait_recv(b, 2, rcqe, kWait, &got), Status::CompletionError);
        DCHECK_EQ(got, 2u);
        Completion c;
        DCHECK_EQ(dev::poll_cq(a.scq, &c, 1), 0u);
        DCHECK_EQ(dev::poll_cq(b.rcq, &c, 1), 0u);
    }
}

TEST(GpuVerbsTwoSided, SendLargerThanReceive) {
    GV_SKIP_WITHOUT_GPU();
    gvtest::Pair p(gvtest::gpu_ctx());
    auto a = p.h(0), b = p.h(1);
    constexpr size_t kSize = 16384;
    DevBuf src(kSize), rbuf(kSize), dst(kSize), pre(256), pos(8), cst(4);
    std::vector<uint8_t> hsrc(kSize);
    gvtest::fill_random(hsrc.data(), kSize, 11);
    h2d(src.p, hsrc.data(), kSize);
    for (DevBuf* d : {&rbuf, &dst, &pre}) CUDA_OK(cudaMemset(d->p, kGuard, d->n));
    MemoryRegion ms(p.pd, src.p, kSize, kLocalWrite), mr(p.pd, rbuf.p, kSize, kLocalWrite),
        md(p.pd, dst.p, kSize, kAllAccess), mp(p.pd, pre.p, 256, kAllAccess);
    DevBuf scqe(4 * sizeof(Completion)), rcqe(2 * sizeof(Completion));
    Err err;
    send_too_large_kernel<<<1, 64>>>(a, b, src.get(), ms.lkey(), rbuf.get(), mr.lkey(), addr_of(dst), md.rkey(),
                                     addr_of(pre), mp.rkey(), scqe.get<Completion>(), rcqe.get<Completion>(),
                                     pos.get<unsigned long long>(), cst.get<int>(), err.get());
    LAUNCH_OK();
    err.expect_none();
    auto c = d2h<Completion>(scqe.p, 4), r = d2h<Completion>(rcqe.p, 2);
    const unsigned long long bad = d2h<unsigned long long>(pos.p, 1)[0];
    EXPECT_EQ(d2h<int>(cst.p, 1)[0], int(Status::QpError));
    EXPECT_TRUE(c[0].ok());
    EXPECT_EQ(c[0].wqe_opcode, MLX5_OPCODE_RDMA_WRITE);
    EXPECT_EQ(c[1].cqe_opcode, MLX5_CQE_REQ_ERR);
    EXPECT_EQ(c[1].status, MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR) << mlx5::syndrome_name(c[1].status);
    EXPECT_EQ(c[1].wqe_opcode, MLX5_OPCODE_SEND);
    EXPECT_EQ(c[1].wqe_counter, uint16_t(bad));
    EXPECT_EQ(c[1].qpn, p.qp[0]->qpn());
    const uint8_t follow[2] = {MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_NOP};
    for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(c[2 + i].cqe_opcode, MLX5_CQE_REQ_ERR);
        EXPECT_EQ(c[2 + i].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR) << mlx5::syndrome_name(c[2 + i].status);
        EXPECT_EQ(c[2 + i].wqe_opcode, follow[i]);
        EXPECT_EQ(c[2 + i].wqe_counter, uint16_t(bad + 1 + i));
    }
    EXPECT_EQ(r[0].cqe_opcode, MLX5_CQE_RESP_ERR);
    EXPECT_EQ(r[0].status, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR) << mlx5::syndrome_name(r[0].status);
    EXPECT_EQ(r[0].wqe_counter, 0u);
    EXPECT_EQ(r[0].qpn, p.qp[1]->qpn());
    EXPECT_EQ(r[1].cqe_opcode, MLX5_CQE_RESP_ERR);
    EXPECT_EQ(r[1].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR) << mlx5::syndrome_name(r[1].status);
    EXPECT_EQ(r[1].wqe_counter, 1u);
    EXPECT_EQ(p.qp[0]->state(), QpState::Error);
    EXPECT_EQ(p.qp[0]->error_syndrome(), MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
    EXPECT_EQ(p.qp[1]->state(), QpState::Error);
    EXPECT_EQ(p.qp[1]->error_syndrome(), MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
    auto hr = d2h<uint8_t>(rbuf.p, kSize), hd = d2h<uint8_t>(dst.p, kSize), hp = d2h<uint8_t>(pre.p, 256);
    EXPECT_EQ(first_not(hr.data(), kSize, kGuard), -1) << "the too-large SEND wrote into a receive buffer";
    EXPECT_EQ(first_not(hd.data(), kSize, kGuard), -1) << "a flushed WRITE wrote";
    EXPECT_EQ(gvtest::first_diff(hsrc.data(), hp.data(), 256), -1) << "the WRITE before the error did not run";
}

// =============================================================================================
// 4. RNR: a SEND with no receive posted waits (rnr_retry 7) until the peer block posts one
//    ~50 us later; with rnr_retry 0 (or retries that run out) it fails RNR_RETRY_EXC_ERR.
// =============================================================================================

__global__ void rnr_kernel(dev::QpHandle a, dev::QpHandle b, const uint8_t* src, uint32_t slkey, uint8_t* dst,
                           uint32_t dlkey, bool expect_ok, unsigned* go, Completion* out, unsigned long long* waited_ns,
                           DevErr* err) {
    if (threadIdx.x != 0) return;
    if (blockIdx.x == 0) {  // requester
        DCHECK_EQ(dev::send_imm(a, src, 300, slkey, 0xfeed, kSignaled, kWait), Status::Ok);
        if (!expect_ok) DCHECK_EQ(dev::nop(a, kSignaled, kWait), Status::Ok);
        Status cs = dev::commit(a);
        if (expect_ok) {
            DCHECK_EQ(cs, Status::Ok);  // waiting for a receive is not an error
            Completion c;
            DCHECK_EQ(dev::poll_cq(a.scq, &c, 1), 0u);  // no receive exists before `go`
            const uint64_t t0 = atom::now_ns();
            atom::store_release(go, 1u);
            uint32_t got = 0;
            DCHECK_EQ(dev::wait_send(a, 1, out, kWait, &got), Status::Ok);
            *waited_ns = atom::now_ns() - t0;
        } else {
            uint32_t got = 0;
            DCHECK_EQ(dev::wait_send(a, 2, out, kWait, &got), Status::CompletionError);
            DCHECK_EQ(got, 2u);
            atom::store_release(go, 1u);
        }
    } else {  // responder: posts its receive ~50 us after the requester found none
        const uint64_t t0 = atom::now_ns();
        while (atom::load_acquire(go) == 0u) {
            if (atom::now_ns() - t0 > kWait) {
                dev_fail(err, __LINE__, 0, 1);
                return;
            }
        }
        const uint64_t t1 = atom::now_ns();
        while (atom::now_ns() - t1 < 50 * kUs) {
        }
        DCHECK_EQ(dev::recv(b, dst + 10, 1000, dlkey, kWait), Status::Ok);
        uint32_t got = 0;
        // After a failed SEND the receive stays posted: nothing consumes it.
        DCHECK_EQ(dev::wait_recv(b, 1, out + 2, expect_ok ? kWait : 20 * kMs, &got),
                  expect_ok ? Status::Ok : Status::Timeout);
    }
}

void run_rnr(uint32_t rnr_retry, uint32_t timer_code) {
    const bool ok = rnr_retry == 7;
    gvtest::Pair p(gvtest::gpu_ctx(), {}, MemoryKind::Default, 64, false);
    RtsAttr rts;
    rts.rnr_retry = rnr_retry;
    RtrAttr rtr;
    rtr.min_rnr_timer = timer_code;
    p.qp[0]->connect(p.qp[1]->endpoint(), {}, {}, rts);
    p.qp[1]->connect(p.qp[0]->endpoint(), {}, rtr);
    DevBuf src(4096), dst(4096), go(4), out(3 * sizeof(Completion)), waited(8);
    std::vector<uint8_t> hsrc(4096);
    gvtest::fill_random(hsrc.data(), 4096, 5);
    h2d(src.p, hsrc.data(), 4096);
    CUDA_OK(cudaMemset(dst.p, kGuard, 4096));
    CUDA_OK(cudaMemset(go.p, 0, 4));
    CUDA_OK(cudaMemset(out.p, 0, out.n));
    CUDA_OK(cudaMemset(waited.p, 0, 8));
    MemoryRegion ms(p.pd, src.p, 4096, kLocalWrite), md(p.pd, dst.p, 4096, kLocalWrite);
    Err err;
    rnr_kernel<<<2, 32>>>(p.h(0), p.h(1), src.get(), ms.lkey(), dst.get(), md.lkey(), ok, go.get<unsigned>(),
                          out.get<Completion>(), waited.get<unsigned long long>(), err.get());
    LAUNCH_OK();
    err.expect_none();
    auto c = d2h<Completion>(out.p, 3);
    auto hd = d2h<uint8_t>(dst.p, 4096);
    if (ok) {
        EXPECT_TRUE(c[0].ok()) << mlx5::syndrome_name(c[0].status);
        EXPECT_EQ(c[0].wqe_opcode, MLX5_OPCODE_SEND_IMM);
        EXPECT_GE(d2h<unsigned long long>(waited.p, 1)[0], 50 * kUs) << "the SEND completed before the receive existed";
        EXPECT_TRUE(c[2].ok()) << mlx5::syndrome_name(c[2].status);
        EXPECT_EQ(c[2].cqe_opcode, MLX5_CQE_RESP_SEND_IMM);
        EXPECT_EQ(c[2].byte_len, 300u);
        EXPECT_EQ(c[2].imm, 0xfeedu);
        EXPECT_EQ(c[2].qpn, p.qp[1]->qpn());
        EXPECT_EQ(gvtest::first_diff(hsrc.data(), hd.data() + 10, 300), -1);
        EXPECT_EQ(first_not(hd.data(), 10, kGuard), -1);
        EXPECT_EQ(first_not(hd.data() + 310, 4096 - 310, kGuard), -1);
        EXPECT_EQ(p.qp[0]->state(), QpState::Rts);
    } else {
        EXPECT_EQ(c[0].cqe_opcode, MLX5_CQE_REQ_ERR);
        EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR) << mlx5::syndrome_name(c[0].status);
        EXPECT_EQ(c[0].wqe_opcode, MLX5_OPCODE_SEND_IMM);
        EXPECT_EQ(c[0].wqe_counter, 0u);
        EXPECT_EQ(c[1].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR) << mlx5::syndrome_name(c[1].status);
        EXPECT_EQ(c[1].wqe_opcode, MLX5_OPCODE_NOP);
        EXPECT_EQ(p.qp[0]->state(), QpState::Error);
        EXPECT_EQ(p.qp[0]->error_syndrome(), MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
        EXPECT_EQ(p.qp[1]->state(), QpState::Rts);  // an RNR NAK leaves the responder alone
        EXPECT_EQ(first_not(hd.data(), 4096, kGuard), -1);
    }
}

TEST(GpuVerbsRnr, SendWaitsForLateReceive) {
    GV_SKIP_WITHOUT_GPU();
    run_rnr(7, 12);
}

TEST(GpuVerbsRnr, NoRetriesFailsAtOnce) {
    GV_SKIP_WITHOUT_GPU();
    run_rnr(0, 12);
}

TEST(GpuVerbsRnr, RetriesExhausted) {
    GV_SKIP_WITHOUT_GPU();
    run_rnr(2, 1);  // 2 retries of 10 us each, driven by the kernel's wait_send
}

// =============================================================================================
// 5. Inline WRITE and SEND of every length 0..max_inline from a block; longer is refused at
//    post time (InvalidArgument) and posts nothing.
// =============================================================================================

constexpr uint32_t kInlMax = 256, kInlSlot = 264, kInlLens = 320;

GV_HOST_DEVICE uint8_t inl_pat(uint32_t len, uint32_t j) { return uint8_t(len * 7 + j * 13 + 1); }

__global__ void inline_kernel(dev::QpHandle a, dev::QpHandle b, uint8_t* pay, uint64_t dst, uint32_t rkey,
                              uint8_t* rbuf, uint32_t rlkey, Completion* rcqe, unsigned long long* sq_end, DevErr* err) {
    const uint32_t t = threadIdx.x, n = blockDim.x;
    if (t == 0)
        for (uint32_t len = 0; len <= kInlMax; ++len)
            DCHECK_EQ(dev::recv(b, rbuf + len * kInlSlot, kInlSlot, rlkey, kWait), Status::Ok);
    __syncthreads();
    uint8_t* mine = pay + t * kInlLens;
    for (uint32_t base = 0; base < kInlLens; base += n) {
        const uint32_t len = base + t;
        for (uint32_t j = 0; j < len; ++j) mine[j] = inl_pat(len, j);
        const Status want = len <= kInlMax ? Status::Ok : Status::InvalidArgument;
        DCHECK_EQ(dev::write_inline<Scope::Block>(a, mine, len, dst + len * kInlSlot, rkey, kSignaled, kWait), want);
        DCHECK_EQ(dev::send_inline<Scope::Block>(a, mine, len, kSignaled, kWait), want);
        for (uint32_t j = 0; j < len; ++j) mine[j] = 0;  // inline: the payload is in the WQE already
        DCHECK_EQ(dev::commit<Scope::Block>(a), Status::Ok);
        if (t == 0) {
            const uint32_t valid = base > kInlMax ? 0u : min(n, kInlMax + 1 - base);
            DCHECK_EQ(dev::wait_send(a, 2 * valid, nullptr, kWait), Status::Ok);
        }
        __syncthreads();
    }
    if (t == 0) {
        uint32_t got = 0;
        DCHECK_EQ(dev::wait_recv(b, kInlMax + 1, rcqe, kWait, &got), Status::Ok);
        // Too long at thread scope, and a weak inline WQE that does not fit one WQEBB.
        const unsigned long long before = atom::load_acquire(&a.q.ctr->sq_reserved);
        DCHECK_EQ(dev::write_inline(a, mine, kInlMax + 1, dst, rkey, kSignaled, kWait), Status::InvalidArgument);
        DCHECK_EQ(dev::send_inline(a, mine, 1000, kSignaled, kWait), Status::InvalidArgument);
        // 16 (ctrl) + 16 (raddr) + 4 (header) + 29 bytes > 64: does not fit one WQEBB.
        DCHECK_EQ(dev::write_inline_weak(a, before, mine, 29, dst, rkey), Status::InvalidArgument);
        DCHECK_EQ(atom::load_acquire(&a.q.ctr->sq_reserved), before);
        DCHECK_EQ(atom::load_acquire(&a.q.ctr->sq_ready), before);
        *sq_end = before;
    }
}

TEST(GpuVerbsInline, WriteAndSendEveryLength) {
    GV_SKIP_WITHOUT_GPU();
    QpOptions o;
    o.max_inline = kInlMax;
    o.sq_depth = 128;  // 5 WQEBBs per WQE budget: a 1024-WQEBB ring that the lengths wrap
    o.rq_depth = 512;
    gvtest::Pair p(gvtest::gpu_ctx(), o);
    auto a = p.h(0), b = p.h(1);
    constexpr uint32_t T = 64;
    const size_t span = (kInlMax + 1) * kInlSlot;
    DevBuf pay(T * kInlLens), dst(span), rbuf(span), rcqe((kInlMax + 1) * sizeof(Completion)), end(8);
    CUDA_OK(cudaMemset(dst.p, kGuard, span));
    CUDA_OK(cudaMemset(rbuf.p, kGuard, span));
    MemoryRegion md(p.pd, dst.p, span, kAllAccess), mr(p.pd, rbuf.p, span, kLocalWrite);
    Err err;
    inline_kernel<<<1, T>>>(a, b, pay.get(), addr_of(dst), md.rkey(), rbuf.get(), mr.lkey(), rcqe.get<Completion>(),
                            end.get<unsigned long long>(), err.get());
    LAUNCH_OK();
    err.expect_none();
    unsigned long long want_end = 0;
    for (uint32_t len = 0; len <= kInlMax; ++len) want_end += bbs_inline(true, len) + bbs_inline(false, len);
    EXPECT_EQ(d2h<unsigned long long>(end.p, 1)[0], want_end) << "WQEBBs posted: an over-long post reserved room";
    EXPECT_GT(want_end, 1024u) << "the ring did not wrap";
    auto rc = d2h<Completion>(rcqe.p, kInlMax + 1);
    auto hd = d2h<uint8_t>(dst.p, span), hr = d2h<uint8_t>(rbuf.p, span);
    std::vector<uint8_t> want(kInlSlot);
    for (uint32_t len = 0; len <= kInlMax; ++len) {
        SCOPED_TRACE(testing::Message() << "length " << len);
        for (uint32_t j = 0; j < kInlSlot; ++j) want[j] = j < len ? inl_pat(len, j) : kGuard;
        EXPECT_TRUE(rc[len].ok()) << mlx5::syndrome_name(rc[len].status);
        EXPECT_EQ(rc[len].cqe_opcode, MLX5_CQE_RESP_SEND);
        EXPECT_EQ(rc[len].byte_len, len);
        EXPECT_EQ(rc[len].wqe_counter, uint16_t(len));
        EXPECT_EQ(gvtest::first_diff(want.data(), hd.data() + len * kInlSlot, kInlSlot), -1) << "WRITE target";
        EXPECT_EQ(gvtest::first_diff(want.data(), hr.data() + len * kInlSlot, kInlSlot), -1) << "receive buffer";
        if (testing::Test::HasFailure()) break;
    }
}

}  // namespace
