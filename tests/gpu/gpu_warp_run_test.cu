// Runs of same-shape small WRITEs and READs executed by the leader's warp (warp_run.cuh): where
// the group that drains a QP starts with a whole warp (a block of 32 threads or more, a warp of
// 32 lanes), fast_run hands the WQEs behind a checked one to that warp, whose lanes read, check
// and load up to 32 of them at once while lane 0 stores them in ring order. These tests run that
// path where it can go wrong, and check that it is taken (the QP's warp_wqes statistics):
//   - RC ordering as a polling responder sees it: a poller thread per WQE waits for WQE i's last
//     word, then checks every word of WQE i-1 (WRITEs and READs, 8 to 32 bytes, a WQE of another
//     length mid-run in every other round, block and warp commits);
//   - WQEs of one run that move each other's bytes (WQE i's source is WQE i-1's destination):
//     a source loaded before the run's stores would carry stale bytes;
//   - a completion lost to a full CQ inside a run: the WQE whose completion was lost landed, and
//     nothing after it.
// The kernels declare __launch_bounds__(512): a kernel that commits at block scope with 512
// threads needs it (docs/execution-model.md, "Registers").
#include "gpu/gpu_verbs_util.cuh"

using namespace gv;
using gvtest::DevBuf;

namespace {

/// WQEs the QP's executor gave to the leader's warp (warp_run.cuh), read from its context.
unsigned long long warp_wqes(const dev::QpHandle& h) { return d2h<unsigned long long>(&h.soft.ctx->warp_wqes, 1)[0]; }

__device__ uint64_t run_word(uint32_t round, uint32_t wqe, uint32_t w) {
    return (uint64_t(round) << 40) | (uint64_t(wqe) << 16) | (w + 1);
}

/// The length of WQE t in round r: len, or odd_len (when not 0) for the middle thread's WQE of
/// every odd round (another shape: the run ends there and a new one starts after it).
__device__ uint32_t run_len(uint32_t r, uint32_t t, uint32_t T, uint32_t len, uint32_t odd_len) {
    return odd_len && (r & 1) && t == T / 2 ? odd_len : len;
}

constexpr uint32_t kStride = 32;  // bytes of each WQE's slot: the longest length here

// Block 0 (the writers) posts one WQE per thread and round at scope S (ring order = thread
// order: block scope orders by thread index, warp scope by lane), unsignaled but the last, and
// commits at scope S; the last word of each is the round. read: READs of the peer's src into
// dst, else WRITEs of src into the peer's dst (one GPU: the same memory either way). Block 1
// (the pollers, as many threads): thread i waits until WQE i's last word shows the round, then
// checks every word of WQE i-1 without waiting: with RC ordering, WQE i-1 landed whole before
// any byte of WQE i. The writers wait for the pollers before the next round.
template <Scope S>
__global__ void __launch_bounds__(512) order_kernel(dev::QpHandle qp, uint8_t* src, uint32_t lkey, uint8_t* dst,
                                                    uint32_t rkey, uint32_t len, uint32_t odd_len, bool read,
                                                    uint32_t rounds, uint32_t* done, unsigned long long* errors) {
    const uint32_t t = threadIdx.x, T = blockDim.x;
    if (blockIdx.x == 0) {
        for (uint32_t r = 1; r <= rounds; ++r) {
            const uint32_t L = run_len(r, t, T, len, odd_len), words = L / 8;
            auto* mine = reinterpret_cast<uint64_t*>(src + (size_t(r & 1) * T + t) * kStride);
            for (uint32_t w = 0; w + 1 < words; ++w) mine[w] = run_word(r, t, w);
            mine[words - 1] = r;
            const uint32_t fl = t == T - 1 ? kSignaled : 0u;
            uint8_t* at = dst + size_t(t) * kStride;
            Status st = read ? dev::read<S>(qp, at, L, lkey, uint64_t(mine), rkey, fl, 5'000'000'000ull)
                             : dev::write<S>(qp, mine, L, lkey, uint64_t(at), rkey, fl, 5'000'000'000ull);
            if (st == Status::Ok) st = dev::commit<S>(qp);
            if (st != Status::Ok) atomicAdd(errors, 1ull << 32);
            if (t == 0) {
                if (dev::wait_send(qp, 1, nullptr, 5'000'000'000ull) != Status::Ok) atomicAdd(errors, 1ull << 40);
                if (!gvtest::wait_at_least<uint32_t>(done, r, 5'000'000'000ull)) atomicAdd(errors, 1ull << 48);
            }
            __syncthreads();
        }
    } else {
        for (uint32_t r = 1; r <= rounds; ++r) {
            const uint32_t words = run_len(r, t, T, len, odd_len) / 8;
            const auto* tail = reinterpret_cast<const uint64_t*>(dst + size_t(t) * kStride) + words - 1;
            // Equality, not >= r: the word may still hold a data word of last round's WQE of
            // another length (run_word, far above any round), which must not count as landed.
            if (!gvtest::spin_until(tail, [r](uint64_t x) { return x == r; }, 5'000'000'000ull)) {
                atomicAdd(errors, 1ull << 56);
            } else if (t > 0) {
                const uint32_t bw = run_len(r, t - 1, T, len, odd_len) / 8;
                const volatile uint64_t* before = reinterpret_cast<const uint64_t*>(dst + size_t(t - 1) * kStride);
                uint32_t bad = 0;
                for (uint32_t w = 0; w + 1 < bw; ++w) bad += before[w] != run_word(r, t - 1, w);
                bad += before[bw - 1] != r;
                if (bad) atomicAdd(errors, bad);
            }
            __syncthreads();
            if (t == 0) atom::store_release(done, r);
        }
    }
}

template <Scope S>
void run_order(uint32_t T, uint32_t len, uint32_t odd_len, bool read, uint32_t rounds = 100) {
    SCOPED_TRACE(testing::Message() << (read ? "READs" : "WRITEs") << " of " << len << " bytes (" << odd_len
                                    << " mid-run), " << T << " threads, "
                                    << (S == Scope::Block ? "block" : "warp") << " commits");
    QpOptions o;
    o.sq_depth = 1024;
    gvtest::Pair p(gvtest::gpu_ctx(), o);
    DevBuf src(2 * size_t(T) * kStride), dst(size_t(T) * kStride), aux(64);
    ASSERT_TRUE(src.p && dst.p && aux.p);
    MemoryRegion ms(p.pd, src.p, src.n, kAllAccess), md(p.pd, dst.p, dst.n, kAllAccess);
    CUDA_OK(cudaMemset(src.p, 0, src.n));
    CUDA_OK(cudaMemset(dst.p, 0, dst.n));
    CUDA_OK(cudaMemset(aux.p, 0, aux.n));
    auto* done = aux.get<uint32_t>();
    auto* errors = reinterpret_cast<unsigned long long*>(aux.get<uint8_t>() + 8);
    // READ: the local key is dst's, the remote one src's.
    const uint32_t lkey = read ? md.lkey() : ms.lkey(), rkey = read ? ms.rkey() : md.rkey();
    order_kernel<S><<<2, T>>>(p.h(0), src.get(), lkey, dst.get(), rkey, len, odd_len, read, rounds, done, errors);
    LAUNCH_OK();
    const unsigned long long e = d2h<unsigned long long>(errors, 1)[0];
    EXPECT_EQ(e & 0xffffffffull, 0u) << "words of WQE i-1 not landed when WQE i's last word had";
    EXPECT_EQ(e >> 32, 0u) << "post/commit failures: " << ((e >> 32) & 0xff) << ", wait_send: " << ((e >> 40) & 0xff)
                           << ", writer waits: " << ((e >> 48) & 0xff) << ", poller waits: " << (e >> 56);
    EXPECT_EQ(p.qp[0]->state(), QpState::Rts);
    // Every round hands the warp at least the WQEs after the first checked one, less those after
    // a WQE of another shape.
    EXPECT_GE(warp_wqes(p.h(0)), uint64_t(rounds) * (T / 2)) << "WQEs executed by the leader's warp";
}

TEST(GpuWarpRun, RcOrderingSameShapeWritesBlockCommit) {
    GV_SKIP_WITHOUT_GPU();
    run_order<Scope::Block>(64, 8, 0, false);
    run_order<Scope::Block>(256, 32, 16, false);
    run_order<Scope::Block>(512, 8, 24, false, 40);
}

TEST(GpuWarpRun, RcOrderingSameShapeReadsBlockCommit) {
    GV_SKIP_WITHOUT_GPU();
    run_order<Scope::Block>(64, 8, 0, true);
    run_order<Scope::Block>(256, 16, 8, true);
}

TEST(GpuWarpRun, RcOrderingSameShapeWarpCommit) {
    GV_SKIP_WITHOUT_GPU();
    run_order<Scope::Warp>(32, 8, 32, false);
    run_order<Scope::Warp>(32, 24, 0, true);
}

// WQE t moves slot t of one region into slot t + 1 (a WRITE from the local to the peer's side, or
// a READ from the peer's side into the local one; one region, the same memory either way), all
// in one block commit: each WQE's source is the one before it's destination, so slot 0's bytes
// must reach every slot. A source the warp loaded before the stores of the WQEs ahead of it in
// its run would carry the slot's old bytes.
__global__ void __launch_bounds__(512) carry_kernel(dev::QpHandle qp, uint8_t* buf, uint32_t key, uint32_t len,
                                                    bool read, unsigned long long* errors) {
    const uint32_t t = threadIdx.x;
    uint8_t* from = buf + size_t(t) * len;
    uint8_t* to = from + len;
    const uint32_t fl = t == blockDim.x - 1 ? kSignaled : 0u;
    Status st = read ? dev::read<Scope::Block>(qp, to, len, key, uint64_t(from), key, fl, 5'000'000'000ull)
                     : dev::write<Scope::Block>(qp, from, len, key, uint64_t(to), key, fl, 5'000'000'000ull);
    if (st == Status::Ok) st = dev::commit<Scope::Block>(qp);
    if (st != Status::Ok) atomicAdd(errors, 1ull << 32);
    if (t == 0 && dev::wait_send(qp, 1, nullptr, 5'000'000'000ull) != Status::Ok) atomicAdd(errors, 1ull << 40);
}

void run_carry(uint32_t T, uint32_t len, bool read) {
    SCOPED_TRACE(testing::Message() << (read ? "READs" : "WRITEs") << " of " << len << " bytes, " << T << " threads");
    gvtest::Pair p(gvtest::gpu_ctx());
    const size_t n = size_t(T + 1) * len;
    DevBuf buf(n), aux(8);
    ASSERT_TRUE(buf.p && aux.p);
    MemoryRegion m(p.pd, buf.p, n, kAllAccess);
    ASSERT_EQ(m.lkey(), m.rkey());
    std::vector<uint8_t> h(n, 0);
    gvtest::fill_random(h.data(), len, T * 131 + len);
    h2d(buf.p, h.data(), n);
    CUDA_OK(cudaMemset(aux.p, 0, aux.n));
    carry_kernel<<<1, T>>>(p.h(0), buf.get(), m.lkey(), len, read, aux.get<unsigned long long>());
    LAUNCH_OK();
    EXPECT_EQ(d2h<unsigned long long>(aux.p, 1)[0], 0u) << "posts, commits or the wait failed";
    const auto got = d2h(buf.p, n);
    for (uint32_t s = 1; s <= T; ++s)
        ASSERT_EQ(std::memcmp(&got[size_t(s) * len], h.data(), len), 0) << "slot " << s << " lacks slot 0's bytes";
    EXPECT_EQ(p.qp[0]->state(), QpState::Rts);
    EXPECT_GT(warp_wqes(p.h(0)), 0u) << "WQEs executed by the leader's warp";
}

TEST(GpuWarpRun, ChainedSameShapeWqesCarryEachOthersBytes) {
    GV_SKIP_WITHOUT_GPU();
    run_carry(64, 8, false);
    run_carry(256, 32, false);
    run_carry(64, 8, true);
    run_carry(128, 16, true);
}

TEST(GpuWarpRun, LostCompletionEndsTheRun) {
    GV_SKIP_WITHOUT_GPU();
    // The case of gpu_plan_ahead_test.cu (gpu_verbs_util.cuh) with runs the warp takes.
    const auto warp_took_some = [](gvtest::Pair& p) {
        EXPECT_GT(warp_wqes(p.h(0)), 0u) << "WQEs executed by the leader's warp";
    };
    run_overrun(64, 8, warp_took_some);
    run_overrun(256, 32, warp_took_some);
}

}  // namespace
