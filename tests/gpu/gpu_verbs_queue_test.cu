// The device-side verbs set driven from CUDA kernels: ring wrap and backpressure with
// block-scope posts, selective signaling with warp-scope posts. (Error CQEs with flushing,
// and selective signaling by one thread, are the traffic suite's: tests/traffic/.)
// The software device executes everything on the GPU; the host checks every byte and every
// completion field. Every wait inside a kernel is bounded.
#include "gpu/gpu_verbs_util.cuh"

using namespace gv;
using gvtest::DevBuf;

namespace {

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
    return kind == 2 ? gvtest::bbs_inline(true, wrap_inline_len(gid)) : 1u;
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
    if (t == 0) pos = atom::load_acquire(&w.a.q.ctr->sq_reserved);
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
            DCHECK_EQ(atom::load_acquire(&w.a.q.ctr->sq_reserved), end);
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
    const uint32_t ring = 1u << w.a.q.sq_log_bb;
    DCHECK_EQ(atom::load_acquire(&w.a.q.ctr->sq_retired), pos);
    for (uint32_t k = 0; k < ring; ++k) DCHECK_EQ(dev::nop(w.a, k == ring - 1 ? kSignaled : 0u, 0), Status::Ok);
    const unsigned long long full = atom::load_acquire(&w.a.q.ctr->sq_reserved);
    DCHECK_EQ(full, pos + ring);
    const uint64_t t1 = atom::now_ns();
    DCHECK_EQ(dev::write(w.a, w.src, 8, w.slkey, w.dst, w.drkey, kSignaled, 1 * kMs), Status::Timeout);
    w.stats[2] = atom::now_ns() - t1;
    DCHECK_EQ(atom::load_acquire(&w.a.q.ctr->sq_reserved), full);  // nothing reserved
    DCHECK_EQ(atom::load_acquire(&w.a.q.ctr->sq_ready), full);
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
    ASSERT_EQ(1u << a.q.sq_log_bb, 128u);
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
// 11. Selective signaling: lane 31 of every warp signals (1 WQE in 32); exactly that many
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

// =============================================================================================
// CPU threads and GPU queues (host_reachable in handles.hpp): from host code, every posting, commit, poll and
// wait call on a QP whose queues are GPU memory returns InvalidArgument (poll_cq 0) instead of
// a host load of GPU memory, a segfault; a QP with host-memory queues on the same GPU
// context is for CPU threads and still works from the host (the GPU executes).
// =============================================================================================

TEST(GpuHostCalls, QueuesInGpuMemoryAreRefused) {
    GV_SKIP_WITHOUT_GPU();
    gvtest::Pair dev_q(gvtest::gpu_ctx(), {}, MemoryKind::Device);
    EXPECT_EQ(dev_q.h(0).q.host_reachable, 0u);
    EXPECT_EQ(dev_q.h(0).scq.host_reachable, 0u);
    EXPECT_EQ(dev_q.scq[0]->device_handle().host_reachable, 0u);
    gvtest::expect_host_calls_refused(dev_q.h(0));
    gvtest::Pair default_q(gvtest::gpu_ctx());  // Default on a GPU context: GPU memory too
    EXPECT_EQ(default_q.h(0).q.host_reachable, 0u);
    gvtest::expect_host_calls_refused(default_q.h(0));

    gvtest::Pair host_q(gvtest::gpu_ctx(), {}, MemoryKind::Host);
    const dev::QpHandle h = host_q.h(0);
    EXPECT_EQ(h.q.host_reachable, 1u);
    EXPECT_EQ(h.scq.host_reachable, 1u);
    DevBuf src(4096), dst(4096);
    std::vector<uint8_t> hsrc(src.n);
    gvtest::fill_random(hsrc.data(), hsrc.size(), 21);
    h2d(src.p, hsrc.data(), hsrc.size());
    CUDA_OK(cudaMemset(dst.p, 0, dst.n));
    MemoryRegion ms(host_q.pd, src.p, src.n, kLocalWrite), md(host_q.pd, dst.p, dst.n, kAllAccess);
    ASSERT_EQ(dev::write(h, src.p, 4096, ms.lkey(), addr_of(dst), md.rkey()), Status::Ok);
    ASSERT_EQ(dev::commit(h), Status::Ok);
    Completion c[1];
    ASSERT_EQ(dev::wait_send(h, 1, c, 10'000'000'000ull), Status::Ok) << gvtest::qp_debug(h);
    CUDA_OK(cudaDeviceSynchronize());
    auto hd = d2h<uint8_t>(dst.p, dst.n);
    EXPECT_EQ(gvtest::first_diff(hsrc.data(), hd.data(), hd.size()), -1);
}

}  // namespace
