// The properties docs/execution-model.md requires of where the software device executes on the GPU:
// RC ordering as a polling responder sees it, the user's cudaDeviceSynchronize keeps
// returning, and no deadlock when user kernels fill every SM with waiting blocks.
#include <algorithm>
#include <chrono>
#include <vector>

#include "gpu/gpu_util.cuh"

using namespace gv;
using gvtest::DevBuf;

namespace {

constexpr uint32_t kChunk = 4096;  // bytes of data each posting thread writes per round

// Block 0 (the writer) posts, from all but its last thread, one data WRITE each; after a
// barrier its last thread posts the flag WRITE (another thread, a later position); one
// block-scope commit. Block 1 (the responder) spins on the flag with acquire loads and,
// as soon as it sees round r, checks every data byte of round r.
template <Scope S>
__global__ void ordering_kernel(dev::QpHandle qp, uint8_t* src, uint32_t lkey, uint8_t* dst,
                                uint32_t rkey, uint64_t* src_flag, uint32_t flag_lkey,
                                uint32_t flag_rkey, uint64_t* dst_flag, uint32_t rounds, unsigned long long* errors) {
    const uint32_t writers = blockDim.x - 1;
    if (blockIdx.x == 0) {
        for (uint32_t r = 1; r <= rounds; ++r) {
            // Data of round r: byte value depends on round and position.
            if (threadIdx.x < writers) {
                uint8_t* mine = src + size_t(r & 1) * writers * kChunk + size_t(threadIdx.x) * kChunk;
                for (uint32_t i = 0; i < kChunk; ++i) mine[i] = uint8_t(r * 31 + threadIdx.x + i);
            }
            __syncthreads();
            if (threadIdx.x < writers) {
                size_t off = size_t(threadIdx.x) * kChunk;
                dev::write(qp, src + size_t(r & 1) * writers * kChunk + off, kChunk, lkey,
                           reinterpret_cast<uint64_t>(dst + off), rkey, 0);
            }
            __syncthreads();
            if (threadIdx.x == writers) {
                src_flag[r & 1] = r;
                dev::write(qp, &src_flag[r & 1], 8, flag_lkey, reinterpret_cast<uint64_t>(dst_flag),
                           flag_rkey, kSignaled);
            }
            if constexpr (S == Scope::Block) {
                dev::commit<Scope::Block>(qp);
            } else {
                dev::commit<Scope::Thread>(qp);  // every thread commits: executors race for the lock
            }
            if (threadIdx.x == 0) {
                if (dev::wait_send(qp, 1, nullptr, 5'000'000'000ull) != Status::Ok) atomicAdd(errors, 1ull << 32);
            }
            __syncthreads();
            // Wait until the responder consumed round r before overwriting the data.
            if (threadIdx.x == 0 && !gvtest::wait_at_least<uint64_t>(dst_flag + 1, r, 5'000'000'000ull))
                atomicAdd(errors, 1ull << 40);
            __syncthreads();
        }
    } else if (blockIdx.x == 1) {
        __shared__ uint64_t seen;
        for (uint32_t r = 1; r <= rounds; ++r) {
            if (threadIdx.x == 0) {
                uint64_t v = 0;
                gvtest::wait_at_least<uint64_t>(dst_flag, r, 5'000'000'000ull, &v);
                seen = v;
            }
            __syncthreads();
            if (seen != r) {
                if (threadIdx.x == 0) atomicAdd(errors, 1ull << 48);
                return;
            }
            for (uint32_t w = 0; w < writers; ++w) {
                const uint8_t* d = dst + size_t(w) * kChunk;
                for (uint32_t i = threadIdx.x; i < kChunk; i += blockDim.x) {
                    // A load that does not hit a stale L1 line: the acquire above covers it.
                    uint8_t got = d[i];
                    if (got != uint8_t(r * 31 + w + i)) atomicAdd(errors, 1ull);
                }
            }
            __syncthreads();
            if (threadIdx.x == 0) atom::store_release(dst_flag + 1, uint64_t(r));
            __syncthreads();
        }
    }
}

template <Scope S>
void run_ordering(uint32_t threads, uint32_t rounds) {
    gvtest::Pair p(gvtest::gpu_ctx(), QpOptions{nullptr, nullptr, 1024, 16});
    const size_t data = size_t(threads) * kChunk;
    DevBuf src(2 * data), dst(data), flags(64);
    CUDA_OK(cudaMemset(dst.p, 0, data));
    CUDA_OK(cudaMemset(flags.p, 0, 64));
    MemoryRegion ms(p.pd, src.p, 2 * data, kLocalWrite);
    MemoryRegion md(p.pd, dst.p, data, kAllAccess);
    MemoryRegion mf(p.pd, flags.p, 64, kAllAccess);
    uint64_t* src_flag = flags.get<uint64_t>();     // [0], [1]: per-round sources
    uint64_t* dst_flag = flags.get<uint64_t>() + 2;  // [2]: flag, [3]: responder's ack
    DevBuf err(8);
    CUDA_OK(cudaMemset(err.p, 0, 8));
    ordering_kernel<S><<<2, threads>>>(p.h(0), src.get(), ms.lkey(), dst.get(), md.rkey(), src_flag,
                                       mf.lkey(), mf.rkey(), dst_flag, rounds, err.get<unsigned long long>());
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    unsigned long long e = 0;
    CUDA_OK(cudaMemcpy(&e, err.p, 8, cudaMemcpyDeviceToHost));
    EXPECT_EQ(e, 0ull) << "stale bytes: " << (e & 0xffffffff) << ", send waits failed: " << ((e >> 32) & 0xff)
                       << ", writer timeouts: " << ((e >> 40) & 0xff) << ", responder timeouts: " << (e >> 48);
}

}  // namespace

TEST(GpuProperties, RcOrderingDataThenFlagBlockCommit) {
    GV_SKIP_WITHOUT_GPU();
    run_ordering<Scope::Block>(256, 500);
}

TEST(GpuProperties, RcOrderingDataThenFlagRacingThreadCommits) {
    GV_SKIP_WITHOUT_GPU();
    run_ordering<Scope::Thread>(64, 300);
}

// Many threads committing on few QPs, every message small: each writer thread posts, per
// round, a 24-byte data WRITE (through a data segment) and then an 8-byte inline flag WRITE,
// and commits on its own (executors race for the QP's lock); the poller block checks for every
// message that its data has landed once its flag has. These are the executor's fast-path
// WQEs (exec.cuh, fast_run): several WQEs per drain, each next WQE read ahead, one fence each.
constexpr uint32_t kWords = 3;  // data words per message

__device__ uint64_t small_value(uint32_t slot, uint32_t w) { return 0x8000000000000000ull | (uint64_t(slot) << 8) | w; }

// mode 0: as above. mode 1: every WRITE posted and committed in one call (kCommit: the software
// device's direct path, the posting thread executing it; the flag then from a data segment,
// fsrc). mode 2: half the threads one way and half the other, alternating by round.
__global__ void small_pairs_kernel(dev::QpHandle q0, dev::QpHandle q1, uint32_t writer_blocks, uint64_t* src,
                                   uint32_t lkey, uint64_t* data, uint64_t* flags, uint32_t rkey, uint32_t rounds,
                                   unsigned long long* errors, uint32_t mode = 0, uint64_t* fsrc = nullptr) {
    const uint32_t writers = writer_blocks * blockDim.x;
    if (blockIdx.x < writer_blocks) {
        const dev::QpHandle& qp = blockIdx.x < writer_blocks / 2 ? q0 : q1;
        const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
        for (uint32_t r = 0; r < rounds; ++r) {
            const uint32_t slot = r * writers + t;
            for (uint32_t w = 0; w < kWords; ++w) src[size_t(slot) * kWords + w] = small_value(slot, w);
            const bool one_call = mode == 1 || (mode == 2 && (threadIdx.x + r) % 2 == 1);
            const uint32_t cf = one_call ? kCommit : 0u;
            Status st = dev::write(qp, &src[size_t(slot) * kWords], 8 * kWords, lkey,
                                   reinterpret_cast<uint64_t>(&data[size_t(slot) * kWords]), rkey, cf);
            const uint64_t f = r + 1;
            const uint32_t fl = threadIdx.x == blockDim.x - 1 ? kSignaled : 0;
            if (one_call) {
                fsrc[slot] = f;
                if (st == Status::Ok)
                    st = dev::write(qp, &fsrc[slot], 8, lkey, reinterpret_cast<uint64_t>(&flags[slot]), rkey, fl | cf);
            } else {
                if (st == Status::Ok)
                    st = dev::write_inline(qp, &f, 8, reinterpret_cast<uint64_t>(&flags[slot]), rkey, fl);
                if (st == Status::Ok) st = dev::commit(qp);
            }
            if (st != Status::Ok) atomicAdd(errors, 1ull << 32);
            __syncthreads();
            // One signaled flag per block and round: its completion retires the block's slots.
            if (threadIdx.x == 0 && dev::wait_send(qp, 1, nullptr, 5'000'000'000ull) != Status::Ok)
                atomicAdd(errors, 1ull << 40);
            __syncthreads();
        }
    } else {
        // The poller: thread j checks messages j, j + blockDim.x, ... (round by round).
        for (uint32_t slot = threadIdx.x; slot < rounds * writers; slot += blockDim.x) {
            const uint64_t r = slot / writers;
            if (!gvtest::wait_at_least<uint64_t>(&flags[slot], r + 1, 5'000'000'000ull)) {
                atomicAdd(errors, 1ull << 48);
                return;
            }
            for (uint32_t w = 0; w < kWords; ++w)
                if (data[size_t(slot) * kWords + w] != small_value(slot, w)) atomicAdd(errors, 1ull);
        }
    }
}

void small_pairs(uint32_t mode) {
    gvtest::Pair p(gvtest::gpu_ctx(), QpOptions{nullptr, nullptr, 2048, 16});
    const uint32_t blocks = 4, threads = 128, rounds = 100, msgs = blocks * threads * rounds;
    // Data and flags in one region (one rkey): the flags right after the data. The sources of
    // the flags (modes 1 and 2) after the data's sources.
    DevBuf src(size_t(msgs) * (kWords + 1) * 8), both(size_t(msgs) * (kWords + 1) * 8), err(8);
    CUDA_OK(cudaMemset(both.p, 0, both.n));
    CUDA_OK(cudaMemset(err.p, 0, 8));
    CUDA_OK(cudaDeviceSynchronize());
    MemoryRegion ms(p.pd, src.p, src.n, kLocalWrite);
    MemoryRegion mb(p.pd, both.p, both.n, kAllAccess);
    uint64_t* bdata = both.get<uint64_t>();
    uint64_t* bflags = bdata + size_t(msgs) * kWords;
    small_pairs_kernel<<<blocks + 1, threads>>>(p.h(0), p.h(1), blocks, src.get<uint64_t>(), ms.lkey(), bdata, bflags,
                                                mb.rkey(), rounds, err.get<unsigned long long>(), mode,
                                                src.get<uint64_t>() + size_t(msgs) * kWords);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    unsigned long long e = 0;
    CUDA_OK(cudaMemcpy(&e, err.p, 8, cudaMemcpyDeviceToHost));
    EXPECT_EQ(e, 0ull) << "data missing under a set flag: " << (e & 0xffffffff) << ", posts failed: " << ((e >> 32) & 0xff)
                       << ", send waits failed: " << ((e >> 40) & 0xff) << ", poller timeouts: " << (e >> 48);
    // And every byte landed once all is done.
    std::vector<uint64_t> got(size_t(msgs) * kWords);
    CUDA_OK(cudaMemcpy(got.data(), bdata, got.size() * 8, cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (uint32_t slot = 0; slot < msgs; ++slot)
        for (uint32_t w = 0; w < kWords; ++w)
            wrong += got[size_t(slot) * kWords + w] != (0x8000000000000000ull | (uint64_t(slot) << 8) | w);
    EXPECT_EQ(wrong, 0u);
}

TEST(GpuProperties, RcOrderingSmallWritesManyThreadsFewQps) {
    GV_SKIP_WITHOUT_GPU();
    small_pairs(0);
}

// The same with kCommit: every WRITE posted and committed in one call (the direct path, racing
// for the QP's lock), then half the threads each way, alternating by round.
TEST(GpuProperties, RcOrderingCommitFlagManyThreadsFewQps) {
    GV_SKIP_WITHOUT_GPU();
    small_pairs(1);
    small_pairs(2);
}

// A small WRITE posted with kCommit executes in the posting thread (the direct path,
// docs/execution-model.md, "Posted and committed in one call"): every WRITE must carry what its
// thread stored into the source just before posting it, whatever the direct path does to load
// the source early (a variant that loaded it beside the lock's RMW was measured on 2026-12-06,
// docs/performance.md, session 31). One thread stores a new value into the same source each
// time and posts it with kCommit, waiting for each completion before the next store: whole
// words of one copy round (8 to 32 bytes), a length that is not whole words (12) and one of two
// rounds (40).
__device__ uint64_t direct_value(uint32_t i, uint32_t w) { return 0xd1000000000000ull | (uint64_t(i) << 8) | w; }

__global__ void direct_source_kernel(dev::QpHandle qp, uint64_t* src, uint32_t lkey, uint64_t* dst, uint32_t rkey,
                                     uint32_t size, uint32_t iters, unsigned long long* errors) {
    for (uint32_t i = 0; i < iters; ++i) {
        for (uint32_t w = 0; w < 6; ++w) src[w] = direct_value(i, w);
        Status st = dev::write(qp, src, size, lkey, reinterpret_cast<uint64_t>(dst + size_t(i) * 6), rkey,
                               kSignaled | kCommit);
        if (st == Status::Ok) st = dev::wait_send(qp, 1, nullptr, 5'000'000'000ull);
        if (st != Status::Ok) {
            atomicAdd(errors, 1ull << 32);
            return;
        }
    }
}

TEST(GpuProperties, CommitFlagWriteCarriesTheSourceStoredJustBefore) {
    GV_SKIP_WITHOUT_GPU();
    gvtest::Pair p(gvtest::gpu_ctx());
    const uint32_t iters = 2000;
    DevBuf src(6 * 8), dst(size_t(iters) * 6 * 8), err(8);
    MemoryRegion ms(p.pd, src.p, src.n, kLocalWrite);
    MemoryRegion md(p.pd, dst.p, dst.n, kAllAccess);
    for (uint32_t size : {8u, 16u, 24u, 32u, 12u, 40u}) {
        CUDA_OK(cudaMemset(dst.p, 0, dst.n));
        CUDA_OK(cudaMemset(err.p, 0, 8));
        direct_source_kernel<<<1, 1>>>(p.h(0), src.get<uint64_t>(), ms.lkey(), dst.get<uint64_t>(), md.rkey(), size,
                                       iters, err.get<unsigned long long>());
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaDeviceSynchronize());
        unsigned long long e = 0;
        CUDA_OK(cudaMemcpy(&e, err.p, 8, cudaMemcpyDeviceToHost));
        ASSERT_EQ(e, 0ull) << size << " bytes: a post or its completion failed";
        std::vector<uint8_t> got(dst.n);
        CUDA_OK(cudaMemcpy(got.data(), dst.p, dst.n, cudaMemcpyDeviceToHost));
        size_t wrong = 0, first = iters;
        for (uint32_t i = 0; i < iters; ++i)
            for (uint32_t b = 0; b < 48; ++b) {
                const uint64_t word = 0xd1000000000000ull | (uint64_t(i) << 8) | (b / 8);
                const uint8_t want = b < size ? uint8_t(word >> (8 * (b % 8))) : 0;
                if (got[size_t(i) * 48 + b] != want) {
                    ++wrong;
                    first = std::min<size_t>(first, i);
                }
            }
        EXPECT_EQ(wrong, 0u) << size << "-byte WRITEs: " << wrong << " bytes differ from the source as stored, the first in WRITE " << first;
    }
}

// ---------------------------------------------------------------------------------------

__global__ void small_rdma_kernel(dev::QpHandle qp, uint8_t* src, uint32_t lkey, uint64_t dst, uint32_t rkey,
                                  int* status) {
    dev::write(qp, src + threadIdx.x * 64, 64, lkey, dst + threadIdx.x * 64, rkey, threadIdx.x == 0 ? kSignaled : 0);
    dev::commit<Scope::Block>(qp);
    if (threadIdx.x == 0 && dev::wait_send(qp, 1, nullptr, 5'000'000'000ull) != Status::Ok) *status = 1;
}

// No kernel of the library outlives the user's: right after the user's kernels end,
// cudaDeviceSynchronize returns (also after CPU-committed work launched executors).
TEST(GpuProperties, DeviceSynchronizeReturnsPromptly) {
    GV_SKIP_WITHOUT_GPU();
    gvtest::Pair p(gvtest::gpu_ctx());
    DevBuf src(256 * 64), dst(256 * 64), st(4);
    CUDA_OK(cudaMemset(st.p, 0, 4));
    MemoryRegion ms(p.pd, src.p, src.n, kLocalWrite);
    MemoryRegion md(p.pd, dst.p, dst.n, kAllAccess);
    for (int i = 0; i < 50; ++i) {
        small_rdma_kernel<<<1, 256>>>(p.h(0), src.get(), ms.lkey(), uint64_t(dst.get()), md.rkey(), st.get<int>());
        CUDA_OK(cudaGetLastError());
        auto t0 = std::chrono::steady_clock::now();
        CUDA_OK(cudaDeviceSynchronize());
        double ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        ASSERT_LT(ms_, 1000.0) << "cudaDeviceSynchronize took " << ms_ << " ms after a 256-WQE kernel";
    }
    int s = 0;
    CUDA_OK(cudaMemcpy(&s, st.p, 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(s, 0);
    // Everything is idle: a second synchronize is immediate and no stream has pending work.
    auto t0 = std::chrono::steady_clock::now();
    CUDA_OK(cudaDeviceSynchronize());
    double idle_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(idle_ms, 50.0);
}

// ---------------------------------------------------------------------------------------

// Every block of a grid that fills the GPU sends to its partner block and then waits for
// the partner's SEND to land in its posted receive. All blocks wait for completions at
// once; execution at the doorbell needs no free SM, so all finish.
__global__ void fill_and_wait_kernel(const dev::QpHandle* qps, uint8_t* bufs, uint32_t lkey, int* status) {
    const dev::QpHandle qp = qps[blockIdx.x];
    uint8_t* mine = bufs + size_t(blockIdx.x) * 256;  // [0,128): send data, [128,256): receive
    if (threadIdx.x == 0) {
        for (int i = 0; i < 128; ++i) mine[i] = uint8_t(blockIdx.x + i);
        if (dev::recv(qp, mine + 128, 128, lkey) != Status::Ok) status[blockIdx.x] = 1;
    }
    __syncthreads();
    // Make sure the partner posted its receive; RNR rules would retry anyway.
    if (threadIdx.x == 0) {
        if (dev::send(qp, mine, 128, lkey) != Status::Ok) status[blockIdx.x] = 2;
    }
    dev::commit<Scope::Block>(qp);
    if (threadIdx.x == 0) {
        Completion c;
        Status s1 = dev::wait_recv(qp, 1, &c, 20'000'000'000ull);
        if (s1 != Status::Ok) status[blockIdx.x] = 10 + int(s1);
        else if (c.byte_len != 128) status[blockIdx.x] = 30;
        Status s2 = dev::wait_send(qp, 1, &c, 20'000'000'000ull);
        if (s2 != Status::Ok) status[blockIdx.x] = 20 + int(s2);
        uint32_t partner = blockIdx.x ^ 1;
        for (int i = 0; i < 128; ++i)
            if (mine[128 + i] != uint8_t(partner + i)) status[blockIdx.x] = 40;
    }
}

TEST(GpuProperties, NoDeadlockWhenWaitingBlocksFillEverySm) {
    GV_SKIP_WITHOUT_GPU();
    Context ctx = gvtest::gpu_ctx();
    ProtectionDomain pd(ctx);
    int sms = 0, per_sm = 0;
    CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int threads = 128;
    CUDA_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fill_and_wait_kernel, threads, 0));
    int blocks = sms * per_sm;
    blocks -= blocks % 2;
    std::printf("[ gpu ] %d SMs x %d resident blocks = %d waiting blocks\n", sms, per_sm, blocks);
    std::vector<std::unique_ptr<CompletionQueue>> cqs;
    std::vector<std::unique_ptr<QueuePair>> qps;
    for (int b = 0; b < blocks; ++b) {
        cqs.push_back(std::make_unique<CompletionQueue>(ctx, CqOptions{16}));
        QpOptions o;
        o.send_cq = o.recv_cq = cqs.back().get();
        o.sq_depth = 8;
        o.rq_depth = 8;
        qps.push_back(std::make_unique<QueuePair>(pd, o));
    }
    for (int b = 0; b < blocks; b += 2) {
        qps[b]->connect(qps[b + 1]->endpoint());
        qps[b + 1]->connect(qps[b]->endpoint());
    }
    std::vector<dev::QpHandle> hs;
    for (auto& q : qps) hs.push_back(q->device_handle());
    DevBuf d_hs(hs.size() * sizeof(dev::QpHandle)), bufs(size_t(blocks) * 256), st(blocks * sizeof(int));
    CUDA_OK(cudaMemcpy(d_hs.p, hs.data(), d_hs.n, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(st.p, 0, st.n));
    MemoryRegion mr(pd, bufs.p, bufs.n, kAllAccess);
    auto t0 = std::chrono::steady_clock::now();
    fill_and_wait_kernel<<<blocks, threads>>>(d_hs.get<dev::QpHandle>(), bufs.get(), mr.lkey(), st.get<int>());
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::vector<int> s(blocks);
    CUDA_OK(cudaMemcpy(s.data(), st.p, st.n, cudaMemcpyDeviceToHost));
    for (int b = 0; b < blocks; ++b) ASSERT_EQ(s[b], 0) << "block " << b;
    std::printf("[ gpu ] all %d blocks exchanged SENDs in %.2f ms\n", blocks, ms);
}
