// The device-side verbs set driven from CUDA kernels: atomics from many blocks and threads at
// once (fetch-add on one counter, compare-and-swap contention) and put-with-signal at block
// scope. (One thread's atomics and put-with-signal are the traffic suite's: tests/traffic/.)
// The software device executes everything on the GPU; the host checks every byte and every
// completion field. Every wait inside a kernel is bounded.
#include "gpu/gpu_verbs_util.cuh"

using namespace gv;
using gvtest::DevBuf;

namespace {

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
// 7. put_signal at block scope: every thread of the producer block posts a WRITE of its chunk
//    and then a fetch-add of 1 on the peer's signal word (all WRITEs, then all fetch-adds).
//    A consumer block polls the signal with acquire loads and checks the data written before
//    it. (One thread's put_signal is the traffic suite's: tests/traffic/.)
// =============================================================================================

__global__ void put_signal_kernel(dev::QpHandle a, uint32_t* src, uint32_t slkey, uint32_t* dst, uint32_t drkey,
                                  uint64_t* olds, uint32_t olkey, uint64_t* signal, uint32_t sig_rkey, unsigned* ack,
                                  uint32_t rounds, uint32_t chunk, DevErr* err) {
    const uint32_t t = threadIdx.x, n = blockDim.x;
    const uint32_t bytes = n * chunk, words = bytes / 4;
    __shared__ int stop;
    if (t == 0) stop = 0;
    __syncthreads();
    if (blockIdx.x == 0) {  // producer
        for (uint32_t r = 1; r <= rounds; ++r) {
            uint32_t* s = src + size_t(r & 1) * words;
            for (uint32_t w = t; w < words; w += n) s[w] = word_pat(r, w);
            __syncthreads();
            const uint64_t d = reinterpret_cast<uint64_t>(dst), sig = reinterpret_cast<uint64_t>(signal);
            DCHECK_EQ(dev::put_signal<Scope::Block>(a, reinterpret_cast<uint8_t*>(s) + t * chunk, chunk, slkey,
                                                    d + t * chunk, drkey, olds + size_t(r - 1) * n + t, olkey, sig,
                                                    sig_rkey, 1, t == n - 1 ? kSignaled : 0u, kWait),
                      Status::Ok);
            DCHECK_EQ(dev::commit<Scope::Block>(a), Status::Ok);
            if (t == 0) {
                DCHECK_EQ(dev::wait_send(a, 1, nullptr, kWait), Status::Ok);
                // The consumer checked round r before we overwrite the target.
                unsigned seen = 0;
                if (!gvtest::wait_at_least(ack, r, kWait, &seen)) {
                    dev_fail(err, __LINE__, seen, r);
                    stop = 1;
                }
            }
            __syncthreads();
            if (stop) return;
        }
    } else if (blockIdx.x == 1) {  // consumer: the first fetch-add of round r follows all its WRITEs
        consume_rounds(signal, [n](uint32_t r, uint64_t v) { return v >= uint64_t(r - 1) * n + 1; }, dst, words,
                       rounds, ack, err);
    }
}

TEST(GpuVerbsAtomics, PutSignalBlockScope) {
    GV_SKIP_WITHOUT_GPU();
    constexpr uint32_t T = 128, kChunk = 1024, rounds = 300;
    constexpr size_t bytes = size_t(T) * kChunk;
    constexpr uint64_t adds = T;  // signal increments per round
    gvtest::Pair p(gvtest::gpu_ctx());
    DevBuf src(2 * bytes), dst(bytes), olds(size_t(rounds) * adds * 8), sig(64), ack(4);
    CUDA_OK(cudaMemset(dst.p, 0, bytes));
    CUDA_OK(cudaMemset(olds.p, 0xee, olds.n));
    CUDA_OK(cudaMemset(sig.p, 0, 64));
    CUDA_OK(cudaMemset(ack.p, 0, 4));
    MemoryRegion ms(p.pd, src.p, src.n, kLocalWrite), md(p.pd, dst.p, bytes, kAllAccess),
        mo(p.pd, olds.p, olds.n, kLocalWrite), mg(p.pd, sig.p, 64, kAllAccess);
    Err err;
    put_signal_kernel<<<2, T>>>(p.h(0), src.get<uint32_t>(), ms.lkey(), dst.get<uint32_t>(), md.rkey(),
                                olds.get<uint64_t>(), mo.lkey(), sig.get<uint64_t>() + 1, mg.rkey(), ack.get<unsigned>(),
                                rounds, kChunk, err.get());
    LAUNCH_OK();
    err.expect_none();
    auto ho = d2h<uint64_t>(olds.p, size_t(rounds) * adds);
    for (uint64_t i = 0; i < ho.size(); ++i) ASSERT_EQ(ho[i], i) << "old signal value of fetch-add " << i;
    auto hs = d2h<uint64_t>(sig.p, 8);
    EXPECT_EQ(hs[1], rounds * adds);
    for (int w : {0, 2, 3, 4, 5, 6, 7}) EXPECT_EQ(hs[w], 0u) << "word " << w << " next to the signal";
}

}  // namespace
