// The full device-side verbs set driven from CUDA kernels (issue 3): SEND / SEND_IMM /
// WRITE_IMM into receives posted by kernels or by the host, the receive-side errors and
// the RNR rules, inline WRITE / SEND, atomics and put-with-signal, warp and block scopes,
// the weak (caller-positioned) form, ring wrap and backpressure, error CQEs with flushing,
// and selective signaling. The software device executes everything on the GPU; the host
// checks every byte and every completion field. Every wait inside a kernel is bounded, and
// kernels report failures through a DevErr record instead of hanging.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_util.cuh"

using namespace gv;
using gvtest::DevBuf;

namespace {

constexpr uint64_t kUs = 1'000ull;
constexpr uint64_t kMs = 1'000'000ull;
constexpr uint64_t kWait = 5'000 * kMs;  // bound of every wait inside a kernel
constexpr uint8_t kGuard = gvtest::kGuard;

// ---- failures reported by kernels -------------------------------------------------------

struct DevErr {
    int count;
    int line;
    long long got, want;
};

__device__ void dev_fail(DevErr* e, int line, long long got, long long want) {
    if (atomicAdd(&e->count, 1) == 0) {
        e->line = line;
        e->got = got;
        e->want = want;
    }
}

// Device-side checks; the kernel's DevErr* is named `err`. Enums and pointers compare as
// integers.
#define DCHECK_EQ(x, y)                                                  \
    do {                                                                 \
        long long dx_ = (long long)(x), dy_ = (long long)(y);            \
        if (dx_ != dy_) dev_fail(err, __LINE__, dx_, dy_);               \
    } while (0)
#define DCHECK(c)                                                        \
    do {                                                                 \
        if (!(c)) dev_fail(err, __LINE__, 0, 1);                         \
    } while (0)

/// Host side of a DevErr: zeroed on creation, checked after the kernel.
struct Err {
    DevBuf buf{sizeof(DevErr)};
    Err() { cudaMemset(buf.p, 0, sizeof(DevErr)); }
    DevErr* get() const { return buf.get<DevErr>(); }
    void expect_none(const std::string& what = "") const {
        DevErr e{};
        ASSERT_EQ(cudaMemcpy(&e, buf.p, sizeof e, cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_EQ(e.count, 0) << what << ": " << e.count << " device checks failed, the first at "
                              << __FILE__ << ":" << e.line << " (got " << e.got << ", expected " << e.want
                              << ")";
    }
};

#define LAUNCH_OK()                            \
    do {                                       \
        CUDA_OK(cudaGetLastError());           \
        CUDA_OK(cudaDeviceSynchronize());      \
    } while (0)

// ---- host helpers ---------------------------------------------------------------------------

template <typename T = uint8_t>
std::vector<T> d2h(const void* p, size_t count) {
    std::vector<T> v(count);
    if (count) {
        cudaError_t e = cudaMemcpy(v.data(), p, count * sizeof(T), cudaMemcpyDefault);
        if (e != cudaSuccess) ADD_FAILURE() << "cudaMemcpy to host: " << cudaGetErrorString(e);
    }
    return v;
}

void h2d(void* d, const void* s, size_t n) {
    cudaError_t e = cudaMemcpy(d, s, n, cudaMemcpyDefault);
    if (e != cudaSuccess) ADD_FAILURE() << "cudaMemcpy to device: " << cudaGetErrorString(e);
}

template <typename T>
std::unique_ptr<DevBuf> upload(const std::vector<T>& v) {
    auto b = std::make_unique<DevBuf>(std::max<size_t>(16, v.size() * sizeof(T)));
    if (!v.empty()) h2d(b->p, v.data(), v.size() * sizeof(T));
    return b;
}

/// The posting counters of a QP (device or host queue memory).
dev::QpCounters counters(const dev::QpHandle& h) {
    dev::QpCounters c{};
    cudaError_t e = cudaMemcpy(&c, h.ctr, sizeof c, cudaMemcpyDefault);
    if (e != cudaSuccess) ADD_FAILURE() << "reading QP counters: " << cudaGetErrorString(e);
    return c;
}

uint64_t addr_of(const DevBuf& b, size_t off = 0) { return reinterpret_cast<uint64_t>(b.get() + off); }

long first_not(const uint8_t* p, size_t n, uint8_t v) {
    for (size_t i = 0; i < n; ++i)
        if (p[i] != v) return long(i);
    return -1;
}

/// n connected pairs of QPs (2i sends to 2i+1) on one context and protection domain, each
/// QP with its own CQ (send and receive).
struct Pairs {
    Context ctx;
    ProtectionDomain pd;
    std::vector<std::unique_ptr<CompletionQueue>> cqs;
    std::vector<std::unique_ptr<QueuePair>> qps;
    Pairs(uint32_t n, QpOptions o = {}, uint32_t cq_depth = 1024) : ctx(gvtest::gpu_ctx()), pd(ctx) {
        for (uint32_t i = 0; i < 2 * n; ++i) {
            cqs.push_back(std::make_unique<CompletionQueue>(ctx, CqOptions{cq_depth}));
            o.send_cq = o.recv_cq = cqs.back().get();
            qps.push_back(std::make_unique<QueuePair>(pd, o));
        }
        for (uint32_t i = 0; i < n; ++i) {
            qps[2 * i]->connect(qps[2 * i + 1]->endpoint());
            qps[2 * i + 1]->connect(qps[2 * i]->endpoint());
        }
    }
    std::unique_ptr<DevBuf> sender_handles() const {
        std::vector<dev::QpHandle> h;
        for (size_t i = 0; i < qps.size(); i += 2) h.push_back(qps[i]->device_handle());
        return upload(h);
    }
};

uint32_t bbs_sge(uint8_t opcode, uint32_t nonzero_entries) {
    bool send = opcode == MLX5_OPCODE_SEND || opcode == MLX5_OPCODE_SEND_IMM;
    return mlx5::ds_to_bbs((send ? 1 : 2) + nonzero_entries);
}
GV_HOST_DEVICE uint32_t bbs_inline(bool rdma, uint32_t len) {
    return mlx5::ds_to_bbs((rdma ? 2 : 1) + mlx5::inline_ds(len));
}

/// 32-bit data word w of round r (differs from every other round's word w).
GV_HOST_DEVICE uint32_t word_pat(uint32_t r, uint32_t w) { return r * 0x9E3779B1u ^ (w * 0x85EBCA77u + 0x1234567u); }

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
            const size_t stride = size_t(1) << b.rq_log_stride, cnt = size_t(1) << b.rq_log_cnt;
            auto ring = d2h<uint8_t>(b.rq, cnt * stride);
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
        *bad_pos = atom::load_acquire(&a.ctr->sq_reserved);
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
        const unsigned long long before = atom::load_acquire(&a.ctr->sq_reserved);
        DCHECK_EQ(dev::write_inline(a, mine, kInlMax + 1, dst, rkey, kSignaled, kWait), Status::InvalidArgument);
        DCHECK_EQ(dev::send_inline(a, mine, 1000, kSignaled, kWait), Status::InvalidArgument);
        // 16 (ctrl) + 16 (raddr) + 4 (header) + 29 bytes > 64: does not fit one WQEBB.
        DCHECK_EQ(dev::write_inline_weak(a, before, mine, 29, dst, rkey), Status::InvalidArgument);
        DCHECK_EQ(atom::load_acquire(&a.ctr->sq_reserved), before);
        DCHECK_EQ(atom::load_acquire(&a.ctr->sq_ready), before);
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

// =============================================================================================
// 6. Atomics: fetch-add from many blocks and threads on one remote counter (exact sum, old
//    values a permutation of the prefix sums), compare-and-swap semantics and contention.
// =============================================================================================

__global__ void fetch_add_kernel(const dev::QpHandle* qps, uint64_t counter, uint32_t rkey, uint64_t* olds,
                                 uint32_t olkey, uint32_t rounds, uint32_t add_mod, DevErr* err) {
    const dev::QpHandle qp = qps[blockIdx.x];
    const uint32_t t = threadIdx.x, n = blockDim.x;
    for (uint32_t r = 0; r < rounds; ++r) {
        const uint64_t id = (uint64_t(blockIdx.x) * rounds + r) * n + t;
        const uint64_t add = add_mod ? 1 + id % add_mod : 1;
        Status st;
        __syncwarp();
        switch (r % 3) {  // the three posting scopes in turn
            case 0: st = dev::fetch_add(qp, olds + id, olkey, counter, rkey, add, kSignaled, kWait); break;
            case 1: st = dev::fetch_add<Scope::Warp>(qp, olds + id, olkey, counter, rkey, add, kSignaled, kWait); break;
            default: st = dev::fetch_add<Scope::Block>(qp, olds + id, olkey, counter, rkey, add, kSignaled, kWait); break;
        }
        DCHECK_EQ(st, Status::Ok);
        DCHECK_EQ(dev::commit<Scope::Block>(qp), Status::Ok);
        if (t == 0) {
            uint32_t got = 0;
            DCHECK_EQ(dev::wait_send(qp, n, nullptr, kWait, &got), Status::Ok);
        }
        __syncthreads();
    }
}

void run_fetch_add(uint32_t add_mod) {
    constexpr uint32_t B = 16, T = 128, R = 6;
    constexpr uint64_t N = uint64_t(B) * T * R, kInit = 1000;
    Pairs net(B);
    DevBuf target(64), olds(N * 8);
    std::vector<uint64_t> t0(8, 0xa5a5a5a5a5a5a5a5ull);
    t0[1] = kInit;
    h2d(target.p, t0.data(), 64);
    CUDA_OK(cudaMemset(olds.p, 0xee, olds.n));
    MemoryRegion mt(net.pd, target.p, 64, kAllAccess), mo(net.pd, olds.p, olds.n, kLocalWrite);
    auto hs = net.sender_handles();
    Err err;
    fetch_add_kernel<<<B, T>>>(hs->get<dev::QpHandle>(), addr_of(target, 8), mt.rkey(), olds.get<uint64_t>(),
                               mo.lkey(), R, add_mod, err.get());
    LAUNCH_OK();
    err.expect_none();
    auto ho = d2h<uint64_t>(olds.p, N);
    auto ht = d2h<uint64_t>(target.p, 8);
    // Sorted by old value, each operation's old value is the previous one's plus its add.
    std::vector<std::pair<uint64_t, uint64_t>> ops(N);  // (old, add)
    for (uint64_t id = 0; id < N; ++id) ops[id] = {ho[id], add_mod ? 1 + id % add_mod : 1};
    std::sort(ops.begin(), ops.end());
    uint64_t expect = kInit;
    for (uint64_t i = 0; i < N; ++i) {
        ASSERT_EQ(ops[i].first, expect) << "sorted old value " << i << " of " << N;
        expect += ops[i].second;
    }
    EXPECT_EQ(ht[1], expect) << "final counter";
    for (int w : {0, 2, 3, 4, 5, 6, 7}) EXPECT_EQ(ht[w], 0xa5a5a5a5a5a5a5a5ull) << "word " << w << " next to the counter";
}

TEST(GpuVerbsAtomics, FetchAddManyBlocksOneCounter) {
    GV_SKIP_WITHOUT_GPU();
    run_fetch_add(0);
}

TEST(GpuVerbsAtomics, FetchAddVariedAddsChainExactly) {
    GV_SKIP_WITHOUT_GPU();
    run_fetch_add(7);
}

__global__ void cas_sequence_kernel(dev::QpHandle a, uint64_t target, uint32_t rkey, uint64_t* out, uint32_t olkey,
                                    Completion* c, DevErr* err) {
    if (threadIdx.x != 0) return;
    DCHECK_EQ(dev::fetch_add(a, &out[0], olkey, target, rkey, 2), Status::Ok);
    DCHECK_EQ(dev::fetch_add(a, &out[1], olkey, target, rkey, ~0ull), Status::Ok);  // -1
    DCHECK_EQ(dev::compare_swap(a, &out[2], olkey, target, rkey, 41, 1000), Status::Ok);
    DCHECK_EQ(dev::compare_swap(a, &out[3], olkey, target, rkey, 41, 2000), Status::Ok);  // mismatch
    DCHECK_EQ(dev::compare_swap(a, &out[4], olkey, target, rkey, 1000, 0x123456789abcdef0ull), Status::Ok);
    DCHECK_EQ(dev::commit(a), Status::Ok);
    DCHECK_EQ(dev::wait_send(a, 5, c, kWait), Status::Ok);
}

TEST(GpuVerbsAtomics, CompareSwapSemantics) {
    GV_SKIP_WITHOUT_GPU();
    gvtest::Pair p(gvtest::gpu_ctx());
    DevBuf target(64), out(64), cq(5 * sizeof(Completion));
    std::vector<uint64_t> t0(8, 0);
    t0[1] = 40;
    h2d(target.p, t0.data(), 64);
    CUDA_OK(cudaMemset(out.p, 0xee, 64));
    MemoryRegion mt(p.pd, target.p, 64, kAllAccess), mo(p.pd, out.p, 64, kLocalWrite);
    Err err;
    cas_sequence_kernel<<<1, 32>>>(p.h(0), addr_of(target, 8), mt.rkey(), out.get<uint64_t>(), mo.lkey(),
                                   cq.get<Completion>(), err.get());
    LAUNCH_OK();
    err.expect_none();
    auto c = d2h<Completion>(cq.p, 5);
    auto r = d2h<uint64_t>(out.p, 8);
    auto t = d2h<uint64_t>(target.p, 8);
    const uint8_t ops[5] = {MLX5_OPCODE_ATOMIC_FA, MLX5_OPCODE_ATOMIC_FA, MLX5_OPCODE_ATOMIC_CS, MLX5_OPCODE_ATOMIC_CS,
                            MLX5_OPCODE_ATOMIC_CS};
    for (int i = 0; i < 5; ++i) {
        EXPECT_TRUE(c[i].ok());
        EXPECT_EQ(c[i].wqe_opcode, ops[i]);
        EXPECT_EQ(c[i].wqe_counter, uint16_t(i));
    }
    EXPECT_EQ(r[0], 40u);
    EXPECT_EQ(r[1], 42u);
    EXPECT_EQ(r[2], 41u);
    EXPECT_EQ(r[3], 1000u);  // no swap: 1000 stays
    EXPECT_EQ(r[4], 1000u);
    EXPECT_EQ(t[1], 0x123456789abcdef0ull);
    for (int w : {0, 2, 3, 4, 5, 6, 7}) EXPECT_EQ(t[w], 0u) << "target word " << w;
    for (int w : {5, 6, 7}) EXPECT_EQ(r[w], 0xeeeeeeeeeeeeeeeeull) << "result word " << w;
}

__global__ void cas_contention_kernel(const dev::QpHandle* qps, uint64_t word, uint32_t rkey, uint64_t* olds,
                                      uint32_t olkey, DevErr* err) {
    const dev::QpHandle qp = qps[blockIdx.x];
    const uint64_t id = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    DCHECK_EQ(dev::compare_swap(qp, olds + id, olkey, word, rkey, 0, id + 1, kSignaled, kWait), Status::Ok);
    DCHECK_EQ(dev::commit<Scope::Block>(qp), Status::Ok);
    if (threadIdx.x == 0) DCHECK_EQ(dev::wait_send(qp, blockDim.x, nullptr, kWait), Status::Ok);
}

// Every thread of 8 blocks (8 QPs) swaps 0 -> its id + 1: exactly one wins, and everyone
// else reads the winner's value.
TEST(GpuVerbsAtomics, CompareSwapContention) {
    GV_SKIP_WITHOUT_GPU();
    constexpr uint32_t B = 8, T = 256, N = B * T;
    Pairs net(B);
    DevBuf word(8), olds(N * 8);
    CUDA_OK(cudaMemset(word.p, 0, 8));
    CUDA_OK(cudaMemset(olds.p, 0xee, olds.n));
    MemoryRegion mw(net.pd, word.p, 8, kAllAccess), mo(net.pd, olds.p, olds.n, kLocalWrite);
    auto hs = net.sender_handles();
    Err err;
    cas_contention_kernel<<<B, T>>>(hs->get<dev::QpHandle>(), addr_of(word), mw.rkey(), olds.get<uint64_t>(), mo.lkey(),
                                    err.get());
    LAUNCH_OK();
    err.expect_none();
    auto ho = d2h<uint64_t>(olds.p, N);
    const uint64_t final_v = d2h<uint64_t>(word.p, 1)[0];
    uint32_t winners = 0;
    for (uint32_t id = 0; id < N; ++id) {
        if (ho[id] == 0) {
            ++winners;
            EXPECT_EQ(final_v, id + 1ull) << "the winner's value is not in the word";
        } else {
            EXPECT_EQ(ho[id], final_v) << "loser " << id;
        }
    }
    EXPECT_EQ(winners, 1u);
}

// =============================================================================================
// 7. put_signal: N writes then a fetch-add on the peer's signal word, in order. A consumer
//    block polls the signal with acquire loads and checks the data written before it.
// =============================================================================================

template <Scope S>
__global__ void put_signal_kernel(dev::QpHandle a, uint32_t* src, uint32_t slkey, uint32_t* dst, uint32_t drkey,
                                  uint64_t* olds, uint32_t olkey, uint64_t* signal, uint32_t sig_rkey, unsigned* ack,
                                  uint32_t rounds, uint32_t chunk, DevErr* err) {
    const uint32_t t = threadIdx.x, n = blockDim.x;
    const uint32_t bytes = n * chunk, words = bytes / 4;
    const uint64_t adds = S == Scope::Block ? n : 1;  // signal increments per round
    __shared__ int stop;
    if (t == 0) stop = 0;
    __syncthreads();
    if (blockIdx.x == 0) {  // producer
        for (uint32_t r = 1; r <= rounds; ++r) {
            uint32_t* s = src + size_t(r & 1) * words;
            for (uint32_t w = t; w < words; w += n) s[w] = word_pat(r, w);
            __syncthreads();
            const uint64_t d = reinterpret_cast<uint64_t>(dst), sig = reinterpret_cast<uint64_t>(signal);
            if constexpr (S == Scope::Block) {
                // All n WRITEs, then all n fetch-adds (each a block-scope post).
                DCHECK_EQ(dev::put_signal<Scope::Block>(a, reinterpret_cast<uint8_t*>(s) + t * chunk, chunk, slkey,
                                                        d + t * chunk, drkey, olds + size_t(r - 1) * n + t, olkey, sig,
                                                        sig_rkey, 1, t == n - 1 ? kSignaled : 0u, kWait),
                          Status::Ok);
            } else if (t == 0) {
                DCHECK_EQ(dev::put_signal(a, s, bytes, slkey, d, drkey, olds + (r - 1), olkey, sig, sig_rkey, 1,
                                          kSignaled, kWait),
                          Status::Ok);
            }
            DCHECK_EQ(dev::commit<Scope::Block>(a), Status::Ok);
            if (t == 0) {
                DCHECK_EQ(dev::wait_send(a, 1, nullptr, kWait), Status::Ok);
                // The consumer checked round r before we overwrite the target.
                const uint64_t t0 = atom::now_ns();
                while (atom::load_acquire(ack) < r) {
                    if (atom::now_ns() - t0 > kWait) {
                        dev_fail(err, __LINE__, atom::load_acquire(ack), r);
                        stop = 1;
                        break;
                    }
                }
            }
            __syncthreads();
            if (stop) return;
        }
    } else if (blockIdx.x == 1) {  // consumer
        for (uint32_t r = 1; r <= rounds; ++r) {
            if (t == 0) {
                const uint64_t t0 = atom::now_ns();
                unsigned long long v;
                // The first fetch-add of round r: every WRITE of round r precedes it.
                while ((v = atom::load_acquire(signal)) <= (r - 1) * adds) {
                    if (atom::now_ns() - t0 > kWait) {
                        dev_fail(err, __LINE__, v, (r - 1) * adds + 1);
                        stop = 1;
                        break;
                    }
                }
            }
            __syncthreads();
            if (stop) return;
            for (uint32_t w = t; w < words; w += n) {
                uint32_t got = atom::load_relaxed(dst + w);
                if (got != word_pat(r, w)) {
                    dev_fail(err, __LINE__, got, word_pat(r, w));
                    break;
                }
            }
            __syncthreads();
            if (t == 0) atom::store_release(ack, r);
        }
    }
}

template <Scope S>
void run_put_signal(uint32_t rounds) {
    constexpr uint32_t T = 128, kChunk = 1024;
    constexpr size_t bytes = size_t(T) * kChunk;
    const uint64_t adds = S == Scope::Block ? T : 1;
    gvtest::Pair p(gvtest::gpu_ctx());
    DevBuf src(2 * bytes), dst(bytes), olds(size_t(rounds) * adds * 8), sig(64), ack(4);
    CUDA_OK(cudaMemset(dst.p, 0, bytes));
    CUDA_OK(cudaMemset(olds.p, 0xee, olds.n));
    CUDA_OK(cudaMemset(sig.p, 0, 64));
    CUDA_OK(cudaMemset(ack.p, 0, 4));
    MemoryRegion ms(p.pd, src.p, src.n, kLocalWrite), md(p.pd, dst.p, bytes, kAllAccess),
        mo(p.pd, olds.p, olds.n, kLocalWrite), mg(p.pd, sig.p, 64, kAllAccess);
    Err err;
    put_signal_kernel<S><<<2, T>>>(p.h(0), src.get<uint32_t>(), ms.lkey(), dst.get<uint32_t>(), md.rkey(),
                                   olds.get<uint64_t>(), mo.lkey(), sig.get<uint64_t>() + 1, mg.rkey(),
                                   ack.get<unsigned>(), rounds, kChunk, err.get());
    LAUNCH_OK();
    err.expect_none();
    auto ho = d2h<uint64_t>(olds.p, size_t(rounds) * adds);
    for (uint64_t i = 0; i < ho.size(); ++i) ASSERT_EQ(ho[i], i) << "old signal value of fetch-add " << i;
    auto hs = d2h<uint64_t>(sig.p, 8);
    EXPECT_EQ(hs[1], rounds * adds);
    for (int w : {0, 2, 3, 4, 5, 6, 7}) EXPECT_EQ(hs[w], 0u) << "word " << w << " next to the signal";
}

TEST(GpuVerbsAtomics, PutSignalOneThread) {
    GV_SKIP_WITHOUT_GPU();
    run_put_signal<Scope::Thread>(300);
}

TEST(GpuVerbsAtomics, PutSignalBlockScope) {
    GV_SKIP_WITHOUT_GPU();
    run_put_signal<Scope::Block>(300);
}

// =============================================================================================
// 8. Scopes: the same WRITE workload posted by every lane (warp scope) or every thread
//    (block scope), and inline WRITEs of mixed sizes in one collective post (prefix sums).
//    The send ring shows the positions: consecutive, in lane / thread order.
// =============================================================================================

constexpr size_t kScopeSlot = 256;

template <Scope S, bool Inline>
__global__ void scopes_kernel(dev::QpHandle a, const uint8_t* src, uint32_t slkey, uint64_t dst, uint32_t drkey,
                              const uint32_t* lens, uint32_t rounds, Completion* cqes, DevErr* err) {
    const uint32_t t = threadIdx.x, n = blockDim.x;
    for (uint32_t r = 0; r < rounds; ++r) {
        const uint32_t id = r * n + t;
        const uint8_t* s = src + size_t(id) * kScopeSlot;
        const uint64_t d = dst + uint64_t(id) * kScopeSlot;
        __syncwarp();
        Status st;
        if constexpr (Inline) st = dev::write_inline<S>(a, s, lens[id], d, drkey, kSignaled, kWait);
        else st = dev::write<S>(a, s, lens[id], slkey, d, drkey, kSignaled, kWait);
        DCHECK_EQ(st, Status::Ok);
        if constexpr (S == Scope::Block) {
            DCHECK_EQ(dev::commit<Scope::Block>(a), Status::Ok);
        } else if constexpr (S == Scope::Warp) {
            DCHECK_EQ(dev::commit<Scope::Warp>(a), Status::Ok);
        } else {
            DCHECK_EQ(dev::commit(a), Status::Ok);
        }
        if (t == 0) DCHECK_EQ(dev::wait_send(a, n, cqes + size_t(r) * n, kWait), Status::Ok);
        __syncthreads();
    }
}

template <Scope S, bool Inline>
void run_scopes() {
    constexpr uint32_t T = 256, R = 4, N = T * R;
    QpOptions o;
    o.max_inline = 200;   // 4 WQEBBs per WQE budget
    o.sq_depth = 1024;    // a 4096-WQEBB ring: every round stays in place for the host to read
    gvtest::Pair p(gvtest::gpu_ctx(), o);
    auto a = p.h(0);
    const size_t span = size_t(N) * kScopeSlot;
    DevBuf src(span), dst(span), cq(N * sizeof(Completion));
    std::vector<uint8_t> hsrc(span);
    gvtest::fill_random(hsrc.data(), span, 31);
    h2d(src.p, hsrc.data(), span);
    CUDA_OK(cudaMemset(dst.p, kGuard, span));
    MemoryRegion ms(p.pd, src.p, span, kLocalWrite), md(p.pd, dst.p, span, kAllAccess);
    std::vector<uint32_t> lens(N);
    for (uint32_t id = 0; id < N; ++id)
        lens[id] = Inline ? (id * 13u + id / 7u) % 201u : 1u + (id * 37u) % uint32_t(kScopeSlot);
    auto dl = upload(lens);
    Err err;
    scopes_kernel<S, Inline><<<1, T>>>(a, src.get(), ms.lkey(), addr_of(dst), md.rkey(), dl->get<uint32_t>(), R,
                                       cq.get<Completion>(), err.get());
    LAUNCH_OK();
    err.expect_none();

    // Walk the ring: every WQE at the position its ctrl segment names, back to back.
    const unsigned long long end = counters(a).sq_reserved;
    auto ring = d2h<uint8_t>(a.sq, size_t(64) << a.sq_log_bb);
    ASSERT_LE(end, ring.size() / 64) << "the ring wrapped: the test cannot read it";
    const uint64_t d0 = addr_of(dst);
    std::vector<uint32_t> order;
    std::vector<unsigned long long> posv;
    for (unsigned long long pos = 0; pos < end;) {
        auto c = mlx5::read_ctrl_seg(reinterpret_cast<const mlx5_wqe_ctrl_seg*>(ring.data() + pos * 64));
        ASSERT_EQ(c.opcode, MLX5_OPCODE_RDMA_WRITE) << "position " << pos;
        ASSERT_EQ(c.wqe_index, uint16_t(pos));
        ASSERT_EQ(c.qpn, p.qp[0]->qpn());
        auto* rs = reinterpret_cast<const mlx5_wqe_raddr_seg*>(ring.data() + pos * 64 + 16);
        const uint64_t raddr = mlx5::from_be64(rs->raddr);
        ASSERT_EQ((raddr - d0) % kScopeSlot, 0u);
        const uint64_t id = (raddr - d0) / kScopeSlot;
        ASSERT_LT(id, N);
        const uint32_t ds = Inline ? 2 + mlx5::inline_ds(lens[id]) : 3;
        ASSERT_EQ(c.ds, ds) << "WQE of thread " << id % T << " round " << id / T;
        order.push_back(uint32_t(id));
        posv.push_back(pos);
        pos += mlx5::ds_to_bbs(ds);
    }
    ASSERT_EQ(order.size(), N);
    for (uint32_t k = 0; k < N; ++k) {
        const uint32_t id = order[k];
        ASSERT_EQ(id / T, k / T) << "a WQE of another round at index " << k;
        if (S == Scope::Block) {
            ASSERT_EQ(id, k) << "block scope: positions in thread order";
        } else if (S == Scope::Warp) {
            // Runs of 32: one warp's lanes in lane order, each warp once per round.
            ASSERT_EQ(id % 32, k % 32) << "warp scope: lane order broken at index " << k;
            ASSERT_EQ(id - id % 32, order[k - k % 32]) << "warp scope: a run mixes warps at index " << k;
        }
    }
    for (uint32_t r = 0; r < R; ++r) {  // each thread exactly once per round
        std::vector<uint32_t> ids(order.begin() + r * T, order.begin() + (r + 1) * T);
        std::sort(ids.begin(), ids.end());
        for (uint32_t i = 0; i < T; ++i) ASSERT_EQ(ids[i], r * T + i);
    }
    auto c = d2h<Completion>(cq.p, N);
    for (uint32_t k = 0; k < N; ++k) {
        ASSERT_TRUE(c[k].ok()) << k;
        ASSERT_EQ(c[k].wqe_opcode, MLX5_OPCODE_RDMA_WRITE) << k;
        ASSERT_EQ(c[k].wqe_counter, uint16_t(posv[k])) << "completion " << k;
    }
    auto hd = d2h<uint8_t>(dst.p, span);
    for (uint32_t id = 0; id < N; ++id) {
        const size_t o0 = size_t(id) * kScopeSlot;
        ASSERT_EQ(gvtest::first_diff(hsrc.data() + o0, hd.data() + o0, lens[id]), -1) << "WRITE " << id;
        ASSERT_EQ(first_not(hd.data() + o0 + lens[id], kScopeSlot - lens[id], kGuard), -1) << "past WRITE " << id;
    }
}

TEST(GpuVerbsScopes, WarpScopeWrites) {
    GV_SKIP_WITHOUT_GPU();
    run_scopes<Scope::Warp, false>();
}

TEST(GpuVerbsScopes, BlockScopeWrites) {
    GV_SKIP_WITHOUT_GPU();
    run_scopes<Scope::Block, false>();
}

TEST(GpuVerbsScopes, ThreadScopeWrites) {
    GV_SKIP_WITHOUT_GPU();
    run_scopes<Scope::Thread, false>();
}

TEST(GpuVerbsScopes, BlockScopeMixedSizeInline) {
    GV_SKIP_WITHOUT_GPU();
    run_scopes<Scope::Block, true>();
}

TEST(GpuVerbsScopes, WarpScopeMixedSizeInline) {
    GV_SKIP_WITHOUT_GPU();
    run_scopes<Scope::Warp, true>();
}

// =============================================================================================
// 9. The weak form: the caller takes get_position(), writes single-WQEBB WQEs at positions of
//    its choice, and publishes them all with one commit_weak.
// =============================================================================================

constexpr size_t kWSlot = 64;

struct WeakArgs {
    const uint8_t* src;
    uint32_t slkey;
    uint64_t dst;
    uint32_t drkey;
    uint8_t* back;
    uint32_t blkey;
    uint64_t peer;  // READ source on the peer
    uint32_t peer_rkey;
    uint64_t counter;
    uint32_t crkey;
    uint64_t* olds;
    uint32_t olkey;
    uint32_t rounds;
};

GV_HOST_DEVICE uint32_t weak_len(uint32_t id) { return 1 + id % 64; }
GV_HOST_DEVICE uint32_t weak_inline_len(uint32_t id) { return id % 29; }  // <= 28 bytes: one WQEBB

template <Scope S>
__global__ void weak_kernel(dev::QpHandle a, WeakArgs w, DevErr* err) {
    const uint32_t t = threadIdx.x;
    const uint32_t nw = S == Scope::Thread ? 8u : blockDim.x;  // WQEs per round
    __shared__ unsigned long long base;
    __shared__ int stop;
    __shared__ uint32_t last_op;
    for (uint32_t r = 0; r < w.rounds; ++r) {
        if (t == 0) {
            dev::SqPosition sp = dev::get_position(a);
            base = sp.pos;
            DCHECK_EQ(sp.mask, (1u << a.sq_log_bb) - 1);
            stop = sp.free < nw;
            if (stop) dev_fail(err, __LINE__, sp.free, nw);
        }
        __syncthreads();
        if (stop) return;
        // WQE k goes to position base + (5k mod nw) (a permutation: nw is a power of two).
        auto build = [&](uint32_t k) {
            const uint32_t id = r * nw + k, slot = (5 * k) & (nw - 1);
            const unsigned long long pos = base + slot;
            const uint32_t flags = slot == nw - 1 ? kSignaled : 0u;  // the last position completes the round
            const uint8_t* s = w.src + size_t(id) * kWSlot;
            const uint64_t d = w.dst + uint64_t(id) * kWSlot;
            uint8_t op;
            switch (id % 4) {
                case 0:
                    DCHECK_EQ(dev::write_weak(a, pos, s, weak_len(id), w.slkey, d, w.drkey, flags), Status::Ok);
                    op = MLX5_OPCODE_RDMA_WRITE;
                    break;
                case 1:
                    DCHECK_EQ(dev::write_inline_weak(a, pos, s, weak_inline_len(id), d, w.drkey, flags), Status::Ok);
                    op = MLX5_OPCODE_RDMA_WRITE;
                    break;
                case 2:
                    DCHECK_EQ(dev::read_weak(a, pos, w.back + size_t(id) * kWSlot, 32, w.blkey,
                                             w.peer + (id % 64) * 32, w.peer_rkey, flags),
                              Status::Ok);
                    op = MLX5_OPCODE_RDMA_READ;
                    break;
                default:
                    DCHECK_EQ(dev::fetch_add_weak(a, pos, w.olds + id, w.olkey, w.counter, w.crkey, 1, flags),
                              Status::Ok);
                    op = MLX5_OPCODE_ATOMIC_FA;
                    break;
            }
            if (slot == nw - 1) last_op = op;
        };
        if constexpr (S == Scope::Thread) {
            if (t == 0) {
                for (uint32_t k = 0; k < nw; ++k) build(k);
                DCHECK_EQ(dev::commit_weak(a, nw), Status::Ok);
            }
        } else {
            build(t);
            __syncwarp();
            DCHECK_EQ(dev::commit_weak<S>(a, nw), Status::Ok);
        }
        if (t == 0) {
            Completion c;
            DCHECK_EQ(dev::wait_send(a, 1, &c, kWait), Status::Ok);
            DCHECK_EQ(c.wqe_counter, uint16_t(base + nw - 1));
            DCHECK_EQ(c.wqe_opcode, last_op);
            DCHECK_EQ(atom::load_acquire(&a.ctr->sq_reserved), base + nw);
            DCHECK_EQ(atom::load_acquire(&a.ctr->sq_ready), base + nw);
        }
        __syncthreads();
    }
}

template <Scope S>
void run_weak(uint32_t threads, uint32_t rounds) {
    const uint32_t nw = S == Scope::Thread ? 8 : threads;
    const uint32_t N = nw * rounds;
    gvtest::Pair p(gvtest::gpu_ctx());
    auto a = p.h(0);
    const size_t span = size_t(N) * kWSlot;
    DevBuf src(span), dst(span), back(span), peer(64 * 32), counter(8), olds(size_t(N) * 8);
    std::vector<uint8_t> hsrc(span), hpeer(64 * 32);
    gvtest::fill_random(hsrc.data(), span, 41);
    gvtest::fill_random(hpeer.data(), hpeer.size(), 42);
    h2d(src.p, hsrc.data(), span);
    h2d(peer.p, hpeer.data(), hpeer.size());
    CUDA_OK(cudaMemset(dst.p, kGuard, span));
    CUDA_OK(cudaMemset(back.p, kGuard, span));
    CUDA_OK(cudaMemset(counter.p, 0, 8));
    CUDA_OK(cudaMemset(olds.p, 0xee, olds.n));
    MemoryRegion ms(p.pd, src.p, span, kLocalWrite), md(p.pd, dst.p, span, kAllAccess),
        mb(p.pd, back.p, span, kLocalWrite), mp(p.pd, peer.p, peer.n, kRemoteRead),
        mc(p.pd, counter.p, 8, kAllAccess), mo(p.pd, olds.p, olds.n, kLocalWrite);
    WeakArgs w{src.get(), ms.lkey(), addr_of(dst), md.rkey(), back.get(), mb.lkey(), addr_of(peer), mp.rkey(),
               addr_of(counter), mc.rkey(), olds.get<uint64_t>(), mo.lkey(), rounds};
    Err err;
    weak_kernel<S><<<1, threads>>>(a, w, err.get());
    LAUNCH_OK();
    err.expect_none();
    auto ctr = counters(a);
    EXPECT_EQ(ctr.sq_reserved, N);
    EXPECT_EQ(ctr.sq_ready, N);
    auto hd = d2h<uint8_t>(dst.p, span), hb = d2h<uint8_t>(back.p, span);
    auto ho = d2h<uint64_t>(olds.p, N);
    std::vector<uint64_t> fa_olds;
    for (uint32_t id = 0; id < N; ++id) {
        const size_t o0 = size_t(id) * kWSlot;
        uint32_t wlen = 0, rlen = 0;
        switch (id % 4) {
            case 0: wlen = weak_len(id); break;
            case 1: wlen = weak_inline_len(id); break;
            case 2: rlen = 32; break;
            default: fa_olds.push_back(ho[id]); break;
        }
        ASSERT_EQ(gvtest::first_diff(hsrc.data() + o0, hd.data() + o0, wlen), -1) << "WRITE " << id;
        ASSERT_EQ(first_not(hd.data() + o0 + wlen, kWSlot - wlen, kGuard), -1) << "past WRITE " << id;
        ASSERT_EQ(gvtest::first_diff(hpeer.data() + (id % 64) * 32, hb.data() + o0, rlen), -1) << "READ " << id;
        ASSERT_EQ(first_not(hb.data() + o0 + rlen, kWSlot - rlen, kGuard), -1) << "past READ " << id;
    }
    std::sort(fa_olds.begin(), fa_olds.end());
    for (uint64_t i = 0; i < fa_olds.size(); ++i) ASSERT_EQ(fa_olds[i], i) << "fetch-add old values";
    EXPECT_EQ(d2h<uint64_t>(counter.p, 1)[0], fa_olds.size());
}

TEST(GpuVerbsWeak, ThreadWritesAllCommitsOnce) {
    GV_SKIP_WITHOUT_GPU();
    run_weak<Scope::Thread>(32, 40);
}

TEST(GpuVerbsWeak, WarpCommitWeak) {
    GV_SKIP_WITHOUT_GPU();
    run_weak<Scope::Warp>(32, 40);
}

TEST(GpuVerbsWeak, BlockCommitWeak) {
    GV_SKIP_WITHOUT_GPU();
    run_weak<Scope::Block>(128, 40);
}

// RC ordering with caller-chosen positions: threads 0..n-2 write data WQEs at positions in
// reverse thread order, thread n-1 the flag WQE at the last position; one commit_weak. A
// responder block polls the flag and checks every data byte of the round. The flag of round
// r is r in every byte (r < 256): an RDMA WRITE is not atomic, and the executor may store
// the 8 flag bytes separately, so the responder waits for the whole value.
GV_HOST_DEVICE uint64_t flag_of(uint32_t r) { return uint64_t(r & 0xff) * 0x0101010101010101ull; }

__global__ void weak_ordering_kernel(dev::QpHandle a, uint32_t* src, uint32_t slkey, uint32_t* dst, uint32_t drkey,
                                     uint64_t* src_flag, uint32_t flkey, uint64_t* dst_flag, uint32_t frkey,
                                     uint32_t rounds, uint32_t chunk, DevErr* err) {
    const uint32_t t = threadIdx.x, n = blockDim.x, writers = n - 1;
    const uint32_t words = writers * chunk / 4, cw = chunk / 4;
    __shared__ unsigned long long base;
    __shared__ int stop;
    if (t == 0) stop = 0;
    __syncthreads();
    if (blockIdx.x == 0) {
        for (uint32_t r = 1; r <= rounds; ++r) {
            uint32_t* s = src + size_t(r & 1) * words;
            if (t < writers)
                for (uint32_t i = 0; i < cw; ++i) s[t * cw + i] = word_pat(r, t * cw + i);
            else
                src_flag[r & 1] = flag_of(r);
            if (t == 0) {
                dev::SqPosition sp = dev::get_position(a);
                base = sp.pos;
                if (sp.free < n) {
                    dev_fail(err, __LINE__, sp.free, n);
                    stop = 1;
                }
            }
            __syncthreads();
            if (stop) return;
            if (t < writers) {
                DCHECK_EQ(dev::write_weak(a, base + (writers - 1 - t), s + t * cw, chunk, slkey,
                                          reinterpret_cast<uint64_t>(dst + t * cw), drkey, 0),
                          Status::Ok);
            } else {
                DCHECK_EQ(dev::write_weak(a, base + writers, &src_flag[r & 1], 8, flkey,
                                          reinterpret_cast<uint64_t>(dst_flag), frkey, kSignaled),
                          Status::Ok);
            }
            DCHECK_EQ(dev::commit_weak<Scope::Block>(a, n), Status::Ok);
            if (t == 0) {
                DCHECK_EQ(dev::wait_send(a, 1, nullptr, kWait), Status::Ok);
                const uint64_t t0 = atom::now_ns();
                while (atom::load_acquire(dst_flag + 1) < r) {
                    if (atom::now_ns() - t0 > kWait) {
                        dev_fail(err, __LINE__, atom::load_acquire(dst_flag + 1), r);
                        stop = 1;
                        break;
                    }
                }
            }
            __syncthreads();
            if (stop) return;
        }
    } else if (blockIdx.x == 1) {
        for (uint32_t r = 1; r <= rounds; ++r) {
            if (t == 0) {
                const uint64_t t0 = atom::now_ns();
                unsigned long long v;
                while ((v = atom::load_acquire(dst_flag)) != flag_of(r)) {
                    if (atom::now_ns() - t0 > kWait) {
                        dev_fail(err, __LINE__, v, flag_of(r));
                        stop = 1;
                        break;
                    }
                }
            }
            __syncthreads();
            if (stop) return;
            for (uint32_t w = t; w < words; w += n) {
                uint32_t got = atom::load_relaxed(dst + w);
                if (got != word_pat(r, w)) {
                    dev_fail(err, __LINE__, got, word_pat(r, w));
                    break;
                }
            }
            __syncthreads();
            if (t == 0) atom::store_release(dst_flag + 1, uint64_t(r));
        }
    }
}

TEST(GpuVerbsWeak, RcOrderingDataThenFlagAtChosenPositions) {
    GV_SKIP_WITHOUT_GPU();
    constexpr uint32_t T = 128, kChunk = 2048, R = 255;  // flag_of(r) needs r < 256
    gvtest::Pair p(gvtest::gpu_ctx());
    const size_t data = size_t(T - 1) * kChunk;
    DevBuf src(2 * data), dst(data), flags(64);
    CUDA_OK(cudaMemset(dst.p, 0, data));
    CUDA_OK(cudaMemset(flags.p, 0, 64));
    MemoryRegion ms(p.pd, src.p, src.n, kLocalWrite), md(p.pd, dst.p, data, kAllAccess),
        mf(p.pd, flags.p, 64, kAllAccess);
    uint64_t* f = flags.get<uint64_t>();  // [0], [1]: flag sources; [2]: flag; [3]: responder's ack
    Err err;
    weak_ordering_kernel<<<2, T>>>(p.h(0), src.get<uint32_t>(), ms.lkey(), dst.get<uint32_t>(), md.rkey(), f, mf.lkey(),
                                   f + 2, mf.rkey(), R, kChunk, err.get());
    LAUNCH_OK();
    err.expect_none("stale data seen after the flag, or a wait timed out");
    EXPECT_EQ(counters(p.h(0)).sq_reserved, uint64_t(R) * T);
}

// =============================================================================================
// 10. Wrap and backpressure: more than 70,000 WQEs of mixed kinds through one QP with a
//     128-WQEBB ring, posted by one block (bounded posts; on Timeout the block commits and
//     polls completions to free slots). The 16-bit WQE counter wraps. At the end a bounded
//     post into a full ring returns Timeout after its timeout and posts nothing.
// =============================================================================================

constexpr uint32_t kWrapSlots = 1024, kWrapSlot = 64, kWrapThreads = 32, kWrapIters = 2210;

GV_HOST_DEVICE uint32_t wrap_kind(uint32_t iter) { return iter % 5; }  // 0,1 WRITE, 2 inline, 3 NOP, 4 fetch-add
GV_HOST_DEVICE uint32_t wrap_inline_len(uint64_t gid) { return uint32_t(gid % 61); }
GV_HOST_DEVICE uint32_t wrap_bbs(uint32_t kind, uint64_t gid) {
    return kind == 2 ? bbs_inline(true, wrap_inline_len(gid)) : 1u;
}
GV_HOST_DEVICE uint8_t wrap_opcode(uint32_t kind) {
    return kind == 3 ? uint8_t(MLX5_OPCODE_NOP) : kind == 4 ? uint8_t(MLX5_OPCODE_ATOMIC_FA) : uint8_t(MLX5_OPCODE_RDMA_WRITE);
}

struct WrapArgs {
    dev::QpHandle a;
    const uint8_t* src;
    uint32_t slkey;
    uint64_t dst;
    uint32_t drkey;
    uint64_t* res;
    uint32_t reslkey;
    uint64_t counter;
    uint32_t crkey;
    uint32_t iters;
    uint32_t* expect;  // per iteration: (opcode << 16) | WQE counter of its signaled (last) WQE
    unsigned long long* stats;  // [0] timeouts [1] final position [2] full-ring wait (ns) [3] completions
};

__global__ void wrap_kernel(WrapArgs w, DevErr* err) {
    const uint32_t t = threadIdx.x, n = blockDim.x;
    __shared__ unsigned long long pos;  // thread 0's replay of the positions
    uint32_t next = 0;                  // thread 0: next iteration whose completion is due
    unsigned long long timeouts = 0;
    if (t == 0) pos = atom::load_acquire(&w.a.ctr->sq_reserved);
    __syncthreads();
    auto poll_some = [&]() -> uint32_t {  // thread 0
        Completion c[64];
        uint32_t k = dev::poll_cq(w.a.scq, c, 64);
        for (uint32_t i = 0; i < k; ++i, ++next) {
            if (next >= w.iters) {
                dev_fail(err, __LINE__, next, w.iters);
                continue;
            }
            const uint32_t e = w.expect[next];
            if (!c[i].ok() || c[i].wqe_counter != (e & 0xffff) || c[i].wqe_opcode != (e >> 16))
                dev_fail(err, __LINE__, (long long)c[i].status << 32 | c[i].wqe_opcode << 16 | c[i].wqe_counter,
                         (long long)e);
        }
        return k;
    };
    for (uint32_t i = 0; i < w.iters; ++i) {
        const uint32_t kind = wrap_kind(i);
        const uint64_t gid = uint64_t(i) * n + t;
        const uint32_t flags = t == n - 1 ? kSignaled : 0u;
        const uint64_t slot = w.dst + (gid % kWrapSlots) * kWrapSlot;
        uint8_t inl[64];
        const uint32_t len = wrap_inline_len(gid);
        if (kind == 2)
            for (uint32_t j = 0; j < len; ++j) inl[j] = uint8_t(gid * 31 + j);
        for (uint32_t attempt = 0;; ++attempt) {
            Status st;
            switch (kind) {
                case 0:
                case 1: st = dev::write<Scope::Block>(w.a, w.src + gid * 8, 8, w.slkey, slot + gid % 50, w.drkey, flags, 0); break;
                case 2: st = dev::write_inline<Scope::Block>(w.a, inl, len, slot + 3, w.drkey, flags, 0); break;
                case 3: st = dev::nop<Scope::Block>(w.a, flags, 0); break;
                default: st = dev::fetch_add<Scope::Block>(w.a, w.res + gid, w.reslkey, w.counter, w.crkey, gid, flags, 0); break;
            }
            if (st == Status::Ok) break;
            // The status is the block's (one reservation for all), so every thread leaves
            // together. After a commit and a poll there must be room again.
            if (st != Status::Timeout || attempt >= 1000) {
                if (t == 0) dev_fail(err, __LINE__, int(st) * 100000 + attempt, i);
                return;
            }
            DCHECK_EQ(dev::commit<Scope::Block>(w.a), Status::Ok);
            if (t == 0) {
                ++timeouts;
                poll_some();
            }
            __syncthreads();
        }
        if (t == 0) {
            unsigned long long end = pos, last = pos;
            for (uint32_t k = 0; k < n; ++k) {
                last = end;
                end += wrap_bbs(kind, uint64_t(i) * n + k);
            }
            DCHECK_EQ(atom::load_acquire(&w.a.ctr->sq_reserved), end);
            pos = end;
            w.expect[i] = (uint32_t(wrap_opcode(kind)) << 16) | uint32_t(uint16_t(last));
        }
        if (i % 2 == 1) DCHECK_EQ(dev::commit<Scope::Block>(w.a), Status::Ok);
    }
    DCHECK_EQ(dev::commit<Scope::Block>(w.a), Status::Ok);
    if (t != 0) return;
    const uint64_t t0 = atom::now_ns();
    while (next < w.iters) {
        if (poll_some() == 0) {
            dev::drive(w.a);
            if (atom::now_ns() - t0 > kWait) {
                dev_fail(err, __LINE__, next, w.iters);
                return;
            }
        }
    }
    w.stats[3] = next;
    // Every WQE is retired: fill the ring exactly, then one more bounded post must time out.
    const uint32_t ring = 1u << w.a.sq_log_bb;
    DCHECK_EQ(atom::load_acquire(&w.a.ctr->sq_retired), pos);
    for (uint32_t k = 0; k < ring; ++k) DCHECK_EQ(dev::nop(w.a, k == ring - 1 ? kSignaled : 0u, 0), Status::Ok);
    const unsigned long long full = atom::load_acquire(&w.a.ctr->sq_reserved);
    DCHECK_EQ(full, pos + ring);
    const uint64_t t1 = atom::now_ns();
    DCHECK_EQ(dev::write(w.a, w.src, 8, w.slkey, w.dst, w.drkey, kSignaled, 1 * kMs), Status::Timeout);
    w.stats[2] = atom::now_ns() - t1;
    DCHECK_EQ(atom::load_acquire(&w.a.ctr->sq_reserved), full);  // nothing reserved
    DCHECK_EQ(atom::load_acquire(&w.a.ctr->sq_ready), full);
    DCHECK_EQ(dev::commit(w.a), Status::Ok);
    Completion c;
    DCHECK_EQ(dev::wait_send(w.a, 1, &c, kWait), Status::Ok);
    DCHECK_EQ(c.wqe_counter, uint16_t(full - 1));
    DCHECK_EQ(c.wqe_opcode, MLX5_OPCODE_NOP);
    // Room again.
    DCHECK_EQ(dev::nop(w.a, kSignaled, 1 * kMs), Status::Ok);
    DCHECK_EQ(dev::commit(w.a), Status::Ok);
    DCHECK_EQ(dev::wait_send(w.a, 1, &c, kWait), Status::Ok);
    DCHECK_EQ(c.wqe_counter, uint16_t(full));
    w.stats[0] = timeouts;
    w.stats[1] = full + 1;
}

TEST(GpuVerbsQueue, WrapAndBackpressureOver70kWqes) {
    GV_SKIP_WITHOUT_GPU();
    QpOptions o;
    o.sq_depth = 64;  // 2 WQEBBs per WQE budget (64 inline bytes): a 128-WQEBB ring
    gvtest::Pair p(gvtest::gpu_ctx(), o);
    auto a = p.h(0);
    ASSERT_EQ(1u << a.sq_log_bb, 128u);
    constexpr uint32_t T = kWrapThreads, I = kWrapIters;
    constexpr uint64_t N = uint64_t(T) * I;
    constexpr uint64_t kInit = 5;
    DevBuf src(N * 8), dst(kWrapSlots * kWrapSlot), res(N * 8), counter(8), expect(I * 4), stats(64);
    std::vector<uint8_t> hsrc(N * 8);
    gvtest::fill_random(hsrc.data(), hsrc.size(), 77);
    h2d(src.p, hsrc.data(), hsrc.size());
    CUDA_OK(cudaMemset(dst.p, kGuard, dst.n));
    CUDA_OK(cudaMemset(res.p, 0xee, res.n));
    h2d(counter.p, &kInit, 8);
    CUDA_OK(cudaMemset(stats.p, 0, 64));
    MemoryRegion ms(p.pd, src.p, src.n, kLocalWrite), md(p.pd, dst.p, dst.n, kAllAccess),
        mres(p.pd, res.p, res.n, kLocalWrite), mc(p.pd, counter.p, 8, kAllAccess);
    WrapArgs w{a, src.get(), ms.lkey(), addr_of(dst), md.rkey(), res.get<uint64_t>(), mres.lkey(), addr_of(counter),
               mc.rkey(), I, expect.get<uint32_t>(), stats.get<unsigned long long>()};
    Err err;
    wrap_kernel<<<1, T>>>(w, err.get());
    LAUNCH_OK();
    err.expect_none();
    auto st = d2h<unsigned long long>(stats.p, 4);
    std::printf("[ gpu ] %llu WQEs posted, %llu posts hit a full ring, full-ring post waited %.3f ms\n",
                (unsigned long long)N, st[0], st[2] / 1e6);
    EXPECT_EQ(st[3], I) << "completions polled";
    EXPECT_GT(st[0], 0u) << "the ring never filled: backpressure untested";
    EXPECT_GE(st[2], 1 * kMs) << "the bounded post returned before its timeout";
    EXPECT_LT(st[2], 1000 * kMs);
    EXPECT_GT(N, 70'000u);
    EXPECT_GT(st[1], 65'536u + 128u) << "the 16-bit WQE counter did not wrap";
    EXPECT_EQ(counters(a).sq_reserved, st[1]);

    // Replay in posting order (block scope: thread order within an iteration).
    std::vector<uint8_t> shadow(kWrapSlots * kWrapSlot, kGuard);
    std::vector<uint64_t> want_old(N, 0xeeeeeeeeeeeeeeeeull);
    uint64_t sum = kInit;
    for (uint32_t i = 0; i < I; ++i) {
        const uint32_t kind = wrap_kind(i);
        for (uint32_t t = 0; t < T; ++t) {
            const uint64_t gid = uint64_t(i) * T + t;
            const size_t slot = (gid % kWrapSlots) * kWrapSlot;
            if (kind <= 1) {
                std::memcpy(&shadow[slot + gid % 50], &hsrc[gid * 8], 8);
            } else if (kind == 2) {
                for (uint32_t j = 0; j < wrap_inline_len(gid); ++j) shadow[slot + 3 + j] = uint8_t(gid * 31 + j);
            } else if (kind == 4) {
                want_old[gid] = sum;
                sum += gid;
            }
        }
    }
    auto hd = d2h<uint8_t>(dst.p, dst.n);
    long d = gvtest::first_diff(shadow.data(), hd.data(), hd.size());
    EXPECT_EQ(d, -1) << "target byte " << d;
    auto hr = d2h<uint64_t>(res.p, N);
    for (uint64_t gid = 0; gid < N; ++gid) ASSERT_EQ(hr[gid], want_old[gid]) << "fetch-add result slot " << gid;
    EXPECT_EQ(d2h<uint64_t>(counter.p, 1)[0], sum);
}

// =============================================================================================
// 11. Error CQEs from kernels: the bad WQE completes with its syndrome, everything after it
//     is flushed (WR_FLUSH_ERR, signaled or not), memory stays untouched; the completions
//     are polled 64 at a time.
// =============================================================================================

enum BadKind : uint32_t { kBadWrite = 0, kBadCas = 1, kBadFa = 2 };

struct ErrArgs {
    dev::QpHandle a;
    const uint8_t* src;
    uint32_t slkey;
    uint64_t dst;
    uint32_t drkey;
    uint8_t* back;
    uint32_t blkey;
    uint64_t pre;
    uint32_t prkey;
    uint32_t kind;  // BadKind
    uint32_t bad_lkey, bad_rkey;
    uint64_t bad_raddr;
    Completion* cqes;  // room for 2 + blockDim + 1 + 64
    uint32_t* polls;   // what successive poll_cq(64) calls returned (16 entries)
    unsigned long long* pos;  // [0] the bad WQE's position, [1] the first follower's
    int* commit_st;
};

constexpr uint32_t kErrLen = 256, kErrFollowers = 96;
constexpr size_t kErrSize = 16384, kErrTgt = 4096;

__global__ void error_kernel(ErrArgs e, DevErr* err) {
    const uint32_t t = threadIdx.x, n = blockDim.x;
    if (t == 0) {
        DCHECK_EQ(dev::write(e.a, e.src, kErrLen, e.slkey, e.pre, e.prkey, kSignaled, kWait), Status::Ok);
        e.pos[0] = atom::load_acquire(&e.a.ctr->sq_reserved);
        uint64_t* local = reinterpret_cast<uint64_t*>(e.back + 8);
        Status st;
        if (e.kind == kBadWrite)
            st = dev::write(e.a, e.src, kErrLen, e.bad_lkey, e.bad_raddr, e.bad_rkey, kSignaled, kWait);
        else if (e.kind == kBadCas)
            st = dev::compare_swap(e.a, local, e.bad_lkey, e.bad_raddr, e.bad_rkey, 0xa5a5a5a5a5a5a5a5ull, 1, kSignaled, kWait);
        else
            st = dev::fetch_add(e.a, local, e.bad_lkey, e.bad_raddr, e.bad_rkey, 5, kSignaled, kWait);
        DCHECK_EQ(st, Status::Ok);  // posting is fine: the device finds the error
        e.pos[1] = atom::load_acquire(&e.a.ctr->sq_reserved);
    }
    __syncthreads();
    // Followers in thread order: WRITEs and READs, one in three signaled.
    const bool rd = t % 2;
    Sge s{rd ? reinterpret_cast<uint64_t>(e.back + 512 + t * 16) : reinterpret_cast<uint64_t>(e.src + t * 16), 16,
          rd ? e.blkey : e.slkey};
    DCHECK_EQ(dev::post_sge<Scope::Block>(e.a, rd ? MLX5_OPCODE_RDMA_READ : MLX5_OPCODE_RDMA_WRITE, &s, 1,
                                          e.dst + 1024 + t * 16, e.drkey, 0, t % 3 == 0 ? kSignaled : 0u, kWait),
              Status::Ok);
    Status cs = dev::commit<Scope::Block>(e.a);
    if (t != 0) return;
    *e.commit_st = int(cs);
    const uint32_t want = 2 + n;
    uint32_t total = 0, calls = 0;
    const uint64_t t0 = atom::now_ns();
    while (total < want) {
        uint32_t k = dev::poll_cq(e.a.scq, e.cqes + total, 64);
        total += k;
        if (k && calls < 16) e.polls[calls++] = k;
        if (!k) {
            dev::drive(e.a);
            if (atom::now_ns() - t0 > kWait) break;
        }
    }
    DCHECK_EQ(total, want);
    Completion extra;
    DCHECK_EQ(dev::poll_cq(e.a.scq, &extra, 1), 0u);
    // Work posted in ERROR is flushed as soon as it is committed.
    DCHECK_EQ(dev::nop(e.a, kSignaled, kWait), Status::Ok);
    DCHECK_EQ(dev::commit(e.a), Status::QpError);
    DCHECK_EQ(dev::wait_send(e.a, 1, e.cqes + want, kWait), Status::CompletionError);
}

struct ErrEnv {
    gvtest::Pair p;
    DevBuf src{kErrSize}, dst{kErrSize}, back{kErrSize}, pre{kErrLen};
    std::unique_ptr<MemoryRegion> msrc, mdst, mback, mpre;
    std::vector<uint8_t> hsrc = std::vector<uint8_t>(kErrSize);
    explicit ErrEnv(const InitAttr& peer_init = {})
        : p(gvtest::gpu_ctx(), QpOptions{}, MemoryKind::Default, 256, false) {
        gvtest::fill_random(hsrc.data(), kErrSize, 99);
        h2d(src.p, hsrc.data(), kErrSize);
        for (DevBuf* d : {&dst, &back, &pre}) cudaMemset(d->p, kGuard, d->n);
        msrc = std::make_unique<MemoryRegion>(p.pd, src.p, kErrSize, kLocalWrite);
        mdst = std::make_unique<MemoryRegion>(p.pd, dst.p, kErrSize, kAllAccess);
        mback = std::make_unique<MemoryRegion>(p.pd, back.p, kErrSize, kLocalWrite);
        mpre = std::make_unique<MemoryRegion>(p.pd, pre.p, kErrLen, kAllAccess);
        p.qp[0]->connect(p.qp[1]->endpoint());
        p.qp[1]->connect(p.qp[0]->endpoint(), peer_init);
    }

    /// Runs error_kernel with the given bad WQE; checks every completion, the QP state and
    /// that no memory changed.
    void run(uint32_t kind, uint32_t lkey, uint32_t rkey, uint64_t raddr, uint8_t syndrome, uint8_t opcode) {
        constexpr uint32_t T = kErrFollowers, want = 2 + T;
        DevBuf cq((want + 1 + 64) * sizeof(Completion)), polls(16 * 4), pos(16), cst(4);
        CUDA_OK(cudaMemset(polls.p, 0, polls.n));
        auto a = p.h(0);
        ErrArgs e{a, src.get(), msrc->lkey(), addr_of(dst), mdst->rkey(), back.get(), mback->lkey(), addr_of(pre),
                  mpre->rkey(), kind, lkey, rkey, raddr, cq.get<Completion>(), polls.get<uint32_t>(),
                  pos.get<unsigned long long>(), cst.get<int>()};
        Err err;
        error_kernel<<<1, T>>>(e, err.get());
        LAUNCH_OK();
        err.expect_none();
        auto c = d2h<Completion>(cq.p, want + 1);
        auto pl = d2h<uint32_t>(polls.p, 16);
        auto ps = d2h<unsigned long long>(pos.p, 2);
        const uint32_t qpn = p.qp[0]->qpn();
        EXPECT_EQ(d2h<int>(cst.p, 1)[0], int(Status::QpError)) << "commit's status";
        EXPECT_EQ(pl[0], 64u) << "the first poll_cq(64) should take 64 of the " << want << " waiting completions";
        EXPECT_EQ(pl[1], want - 64);
        EXPECT_EQ(pl[2], 0u);
        EXPECT_TRUE(c[0].ok()) << mlx5::syndrome_name(c[0].status);
        EXPECT_EQ(c[0].wqe_counter, uint16_t(ps[0] - 1));
        EXPECT_EQ(c[1].cqe_opcode, MLX5_CQE_REQ_ERR);
        EXPECT_EQ(c[1].status, syndrome) << "got " << mlx5::syndrome_name(c[1].status) << ", expected "
                                         << mlx5::syndrome_name(syndrome);
        EXPECT_EQ(c[1].wqe_opcode, opcode);
        EXPECT_EQ(c[1].wqe_counter, uint16_t(ps[0]));
        EXPECT_EQ(c[1].qpn, qpn);
        for (uint32_t k = 0; k < T; ++k) {
            const Completion& f = c[2 + k];
            EXPECT_EQ(f.cqe_opcode, MLX5_CQE_REQ_ERR) << "follower " << k;
            EXPECT_EQ(f.status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR) << "follower " << k << ": " << mlx5::syndrome_name(f.status);
            EXPECT_EQ(f.wqe_opcode, k % 2 ? MLX5_OPCODE_RDMA_READ : MLX5_OPCODE_RDMA_WRITE) << "follower " << k;
            EXPECT_EQ(f.wqe_counter, uint16_t(ps[1] + k)) << "follower " << k;
            EXPECT_EQ(f.qpn, qpn);
            if (testing::Test::HasFailure()) break;
        }
        EXPECT_EQ(c[want].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
        EXPECT_EQ(c[want].wqe_opcode, MLX5_OPCODE_NOP);
        EXPECT_EQ(c[want].wqe_counter, uint16_t(ps[1] + T));
        EXPECT_EQ(p.qp[0]->state(), QpState::Error);
        EXPECT_EQ(p.qp[0]->error_syndrome(), syndrome);
        auto hd = d2h<uint8_t>(dst.p, kErrSize), hb = d2h<uint8_t>(back.p, kErrSize), hp = d2h<uint8_t>(pre.p, kErrLen),
             hs = d2h<uint8_t>(src.p, kErrSize);
        EXPECT_EQ(first_not(hd.data(), kErrSize, kGuard), -1) << "remote memory changed";
        EXPECT_EQ(first_not(hb.data(), kErrSize, kGuard), -1) << "local memory changed";
        EXPECT_EQ(gvtest::first_diff(hsrc.data(), hs.data(), kErrSize), -1) << "source changed";
        EXPECT_EQ(gvtest::first_diff(hsrc.data(), hp.data(), kErrLen), -1) << "the WQE before the error did not run";
    }
};

TEST(GpuVerbsErrors, BadRkeyThenFlush) {
    GV_SKIP_WITHOUT_GPU();
    for (uint32_t key : {0x12345601u, 0u}) {
        SCOPED_TRACE(testing::Message() << "rkey " << key);
        ErrEnv e;
        e.run(kBadWrite, e.msrc->lkey(), key, addr_of(e.dst, kErrTgt), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
              MLX5_OPCODE_RDMA_WRITE);
    }
}

TEST(GpuVerbsErrors, RkeyOfAnotherPd) {
    GV_SKIP_WITHOUT_GPU();
    ErrEnv e;
    ProtectionDomain other(e.p.ctx);
    MemoryRegion m(other, e.dst.p, kErrSize, kAllAccess);
    e.run(kBadWrite, e.msrc->lkey(), m.rkey(), addr_of(e.dst, kErrTgt), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
          MLX5_OPCODE_RDMA_WRITE);
}

TEST(GpuVerbsErrors, RemoteRangeOutOfBounds) {
    GV_SKIP_WITHOUT_GPU();
    ErrEnv e;
    e.run(kBadWrite, e.msrc->lkey(), e.mdst->rkey(), addr_of(e.dst, kErrSize - 100), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
          MLX5_OPCODE_RDMA_WRITE);
}

TEST(GpuVerbsErrors, RemoteRegionWithoutRemoteWrite) {
    GV_SKIP_WITHOUT_GPU();
    ErrEnv e;
    MemoryRegion m(e.p.pd, e.dst.p, kErrSize, kLocalWrite | kRemoteRead);
    e.run(kBadWrite, e.msrc->lkey(), m.rkey(), addr_of(e.dst, kErrTgt), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
          MLX5_OPCODE_RDMA_WRITE);
}

TEST(GpuVerbsErrors, BadLkey) {
    GV_SKIP_WITHOUT_GPU();
    ErrEnv e;
    e.run(kBadWrite, 0x12345601u, e.mdst->rkey(), addr_of(e.dst, kErrTgt), MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
          MLX5_OPCODE_RDMA_WRITE);
}

TEST(GpuVerbsErrors, MisalignedAtomics) {
    GV_SKIP_WITHOUT_GPU();
    for (int off : {1, 4, 7}) {
        SCOPED_TRACE(testing::Message() << "offset " << off);
        {
            ErrEnv e;
            e.run(kBadCas, e.mback->lkey(), e.mdst->rkey(), addr_of(e.dst, kErrTgt + off),
                  MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR, MLX5_OPCODE_ATOMIC_CS);
        }
        {
            ErrEnv e;
            e.run(kBadFa, e.mback->lkey(), e.mdst->rkey(), addr_of(e.dst, kErrTgt + off),
                  MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR, MLX5_OPCODE_ATOMIC_FA);
        }
    }
}

TEST(GpuVerbsErrors, AtomicOnRegionWithoutRemoteAtomic) {
    GV_SKIP_WITHOUT_GPU();
    ErrEnv e;
    MemoryRegion m(e.p.pd, e.dst.p, kErrSize, kLocalWrite | kRemoteWrite | kRemoteRead);
    e.run(kBadFa, e.mback->lkey(), m.rkey(), addr_of(e.dst, kErrTgt), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
          MLX5_OPCODE_ATOMIC_FA);
}

TEST(GpuVerbsErrors, AtomicOnPeerQpWithoutRemoteAtomic) {
    GV_SKIP_WITHOUT_GPU();
    InitAttr init;
    init.access = kRemoteWrite | kRemoteRead;
    ErrEnv e(init);
    e.run(kBadCas, e.mback->lkey(), e.mdst->rkey(), addr_of(e.dst, kErrTgt), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
          MLX5_OPCODE_ATOMIC_CS);
}

// =============================================================================================
// 12. Selective signaling: lane 31 of every warp signals (1 WQE in 32); exactly that many
//     completions arrive, each naming the last WQE of its warp's group.
// =============================================================================================

__global__ void selective_kernel(dev::QpHandle a, const uint8_t* src, uint32_t slkey, uint64_t dst, uint32_t drkey,
                                 uint32_t rounds, Completion* cqes, uint32_t* extra, DevErr* err) {
    const uint32_t t = threadIdx.x, n = blockDim.x, lane = t & 31, per_round = n / 32;
    for (uint32_t r = 0; r < rounds; ++r) {
        const uint32_t id = r * n + t;
        __syncwarp();
        DCHECK_EQ(dev::write<Scope::Warp>(a, src + size_t(id) * 16, 16, slkey, dst + uint64_t(id) * 16, drkey,
                                          lane == 31 ? kSignaled : 0u, kWait),
                  Status::Ok);
        DCHECK_EQ(dev::commit<Scope::Block>(a), Status::Ok);
        if (t == 0) {
            uint32_t got = 0;
            DCHECK_EQ(dev::wait_send(a, per_round, cqes + size_t(r) * per_round, kWait, &got), Status::Ok);
        }
        __syncthreads();
    }
    if (t == 0) {
        // No completion beyond the signaled ones.
        Completion c;
        uint32_t got = 99;
        DCHECK_EQ(dev::wait_send(a, 1, &c, 2 * kMs, &got), Status::Timeout);
        *extra = got;
    }
}

TEST(GpuVerbsQueue, SelectiveSignalingOneIn32) {
    GV_SKIP_WITHOUT_GPU();
    constexpr uint32_t T = 256, R = 16, N = T * R, C = N / 32;
    gvtest::Pair p(gvtest::gpu_ctx());
    DevBuf src(N * 16), dst(N * 16), cq(C * sizeof(Completion)), extra(4);
    std::vector<uint8_t> hsrc(src.n);
    gvtest::fill_random(hsrc.data(), hsrc.size(), 12);
    h2d(src.p, hsrc.data(), hsrc.size());
    CUDA_OK(cudaMemset(dst.p, kGuard, dst.n));
    MemoryRegion ms(p.pd, src.p, src.n, kLocalWrite), md(p.pd, dst.p, dst.n, kAllAccess);
    Err err;
    selective_kernel<<<1, T>>>(p.h(0), src.get(), ms.lkey(), addr_of(dst), md.rkey(), R, cq.get<Completion>(),
                               extra.get<uint32_t>(), err.get());
    LAUNCH_OK();
    err.expect_none();
    EXPECT_EQ(d2h<uint32_t>(extra.p, 1)[0], 0u) << "completions beyond the signaled WQEs";
    auto c = d2h<Completion>(cq.p, C);
    for (uint32_t k = 0; k < C; ++k) {
        ASSERT_TRUE(c[k].ok()) << k;
        ASSERT_EQ(c[k].wqe_opcode, MLX5_OPCODE_RDMA_WRITE);
        // Warp groups of 32 single-WQEBB WQEs, lane 31 last: positions 32k + 31.
        ASSERT_EQ(c[k].wqe_counter, uint16_t(32 * k + 31)) << "completion " << k;
    }
    EXPECT_EQ(counters(p.h(0)).sq_reserved, uint64_t(N));
    auto hd = d2h<uint8_t>(dst.p, dst.n);
    EXPECT_EQ(gvtest::first_diff(hsrc.data(), hd.data(), hd.size()), -1);
}

}  // namespace
