// The device-side verbs set driven from CUDA kernels: warp and block scope, and the weak
// (caller-positioned) form.
// The software device executes everything on the GPU; the host checks every byte and every
// completion field. Every wait inside a kernel is bounded.
#include "gpu/gpu_verbs_util.cuh"

using namespace gv;
using gvtest::DevBuf;

namespace {

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
    auto ring = d2h<uint8_t>(a.q.sq, size_t(64) << a.q.sq_log_bb);
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
        ASSERT_EQ(gvtest::first_not(hd.data() + o0 + lens[id], kScopeSlot - lens[id], kGuard), -1) << "past WRITE " << id;
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
// 8b. Receives posted by every thread of a block at thread, warp or block scope (one reservation
//     and one publication per warp or block), some with an invalid gather count: the receive
//     ring shows the valid ones back to back in lane / thread order and no invalid one, and
//     SENDs then fill them in ring order, every byte and completion checked.
// =============================================================================================

constexpr size_t kRecvSlot = 128;

/// The receive of thread t in round r: slot id = r * blockDim.x + t, lens[id] bytes; an id with
/// id % 7 == 3 asks for two buffers on a QP that takes one (InvalidArgument, nothing posted).
GV_HOST_DEVICE bool recv_invalid(uint32_t id) { return id % 7 == 3; }

template <Scope S>
__global__ void recv_scopes_kernel(dev::QpHandle b, uint64_t dst, uint32_t dlkey, const uint32_t* lens,
                                   uint32_t rounds, DevErr* err) {
    const uint32_t t = threadIdx.x, n = blockDim.x;
    for (uint32_t r = 0; r < rounds; ++r) {
        const uint32_t id = r * n + t;
        const Sge sg[2] = {{dst + uint64_t(id) * kRecvSlot, lens[id], dlkey}, {dst, 1, dlkey}};
        __syncwarp();
        const Status st = dev::post_recv<S>(b, sg, recv_invalid(id) ? 2u : 1u, kWait);
        DCHECK_EQ(st, recv_invalid(id) ? Status::InvalidArgument : Status::Ok);
        __syncthreads();
    }
}

/// One thread sends n messages: message k (sizes[k] bytes from src slot k) fills the k-th
/// receive, then waits for both sides' completions.
__global__ void recv_scopes_send_kernel(dev::QpHandle a, dev::QpHandle b, const uint8_t* src, uint32_t slkey,
                                        const uint32_t* sizes, uint32_t n, Completion* rcqes, DevErr* err) {
    for (uint32_t k = 0; k < n; ++k) {
        const uint32_t fl = k + 1 == n ? kSignaled | kCommit : kCommit;
        DCHECK_EQ(dev::send(a, src + size_t(k) * kRecvSlot, sizes[k], slkey, fl, kWait), Status::Ok);
    }
    DCHECK_EQ(dev::wait_send(a, 1, nullptr, kWait), Status::Ok);
    DCHECK_EQ(dev::wait_recv(b, n, rcqes, kWait), Status::Ok);
}

template <Scope S>
void run_recv_scopes() {
    constexpr uint32_t T = 256, R = 2, N = T * R;
    QpOptions o;
    o.rq_depth = 512;  // every receive of the test in place for the host to read
    o.sq_depth = 512;
    gvtest::Pair p(gvtest::gpu_ctx(), o);
    auto a = p.h(0), b = p.h(1);
    ASSERT_EQ(b.q.max_recv_sge, 1u) << "the invalid receives need a QP of one receive entry";
    const size_t span = size_t(N) * kRecvSlot;
    DevBuf src(span), dst(span), rcq(N * sizeof(Completion));
    std::vector<uint8_t> hsrc(span);
    gvtest::fill_random(hsrc.data(), span, 47);
    h2d(src.p, hsrc.data(), span);
    CUDA_OK(cudaMemset(dst.p, kGuard, span));
    MemoryRegion ms(p.pd, src.p, span, kLocalWrite), md(p.pd, dst.p, span, kAllAccess);
    std::vector<uint32_t> lens(N);
    for (uint32_t id = 0; id < N; ++id) lens[id] = 1u + (id * 29u) % uint32_t(kRecvSlot);
    auto dl = upload(lens);
    Err err;
    recv_scopes_kernel<S><<<1, T>>>(b, addr_of(dst), md.lkey(), dl->get<uint32_t>(), R, err.get());
    LAUNCH_OK();
    err.expect_none("posting the receives");

    // Walk the receive ring: one data segment per valid receive, then the end-of-list entry.
    const auto ctr = counters(b);
    uint32_t valid = 0;
    for (uint32_t id = 0; id < N; ++id) valid += recv_invalid(id) ? 0 : 1;
    ASSERT_EQ(ctr.rq_reserved, valid) << "one entry per valid receive, none for an invalid one";
    ASSERT_EQ(ctr.rq_ready, valid) << "every reserved receive published";
    const size_t stride = size_t(1) << b.q.rq_log_stride;
    auto ring = d2h<uint8_t>(b.q.rq, stride << b.q.rq_log_cnt);
    const uint64_t d0 = addr_of(dst);
    std::vector<uint32_t> order;
    for (uint32_t k = 0; k < valid; ++k) {
        const auto d = mlx5::read_data_seg(reinterpret_cast<const mlx5_wqe_data_seg*>(ring.data() + k * stride));
        ASSERT_EQ(d.lkey, md.lkey()) << "receive " << k;
        ASSERT_EQ((d.addr - d0) % kRecvSlot, 0u) << "receive " << k;
        const uint32_t id = uint32_t((d.addr - d0) / kRecvSlot);
        ASSERT_LT(id, N) << "receive " << k;
        ASSERT_FALSE(recv_invalid(id)) << "receive " << k << " is an invalid post's";
        ASSERT_EQ(d.byte_count, lens[id]) << "receive " << k;
        order.push_back(id);
    }
    for (uint32_t k = 0; k < valid; ++k) {
        const uint32_t id = order[k];
        if (k) ASSERT_LE(order[k - 1] / T, id / T) << "a receive of an earlier round after a later one at " << k;
        if (S == Scope::Block && k) ASSERT_LT(order[k - 1], id) << "block scope: receives in thread order at " << k;
        if (S != Scope::Block && k && order[k - 1] / 32 == id / 32)
            ASSERT_LT(order[k - 1], id) << "a warp's receives in lane order at " << k;
    }
    std::vector<uint32_t> sorted(order);
    std::sort(sorted.begin(), sorted.end());
    ASSERT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) << "a receive posted twice";

    // SEND k fills the receive at ring position k exactly.
    std::vector<uint32_t> sizes(valid);
    for (uint32_t k = 0; k < valid; ++k) sizes[k] = lens[order[k]];
    auto ds = upload(sizes);
    Err err2;
    recv_scopes_send_kernel<<<1, 1>>>(a, b, src.get(), ms.lkey(), ds->get<uint32_t>(), valid, rcq.get<Completion>(),
                                      err2.get());
    LAUNCH_OK();
    err2.expect_none("the SENDs");
    auto c = d2h<Completion>(rcq.p, valid);
    auto hd = d2h<uint8_t>(dst.p, span);
    for (uint32_t k = 0; k < valid; ++k) {
        ASSERT_TRUE(c[k].ok()) << "receive completion " << k;
        ASSERT_EQ(c[k].wqe_counter, uint16_t(k)) << "receive completion " << k;
        ASSERT_EQ(c[k].byte_len, sizes[k]) << "receive completion " << k;
        const size_t o0 = size_t(order[k]) * kRecvSlot;
        ASSERT_EQ(gvtest::first_diff(hsrc.data() + size_t(k) * kRecvSlot, hd.data() + o0, sizes[k]), -1)
            << "SEND " << k << " in receive of slot " << order[k];
        ASSERT_EQ(gvtest::first_not(hd.data() + o0 + sizes[k], kRecvSlot - sizes[k], kGuard), -1)
            << "past SEND " << k;
    }
    for (uint32_t id = 0; id < N; ++id)
        if (recv_invalid(id))
            ASSERT_EQ(gvtest::first_not(hd.data() + size_t(id) * kRecvSlot, kRecvSlot, kGuard), -1)
                << "the slot of invalid receive " << id << " was written";
}

// A default-constructed handle (no QP behind it) in the posting calls at thread and warp scope,
// from two blocks of two warps: InvalidArgument each time, no hang, no fault. These are the
// scopes whose publication ends in a warp barrier over the group reserve_group formed, which it
// forms none of for such a handle (sq_publish_group / publish_group return before the barrier);
// block scope's barrier is the whole block's. Block-scope posts and the commits at warp and
// block scope are left out: each instantiates another drain in this kernel (125 s of nvcc for
// the file against 35 s without them, on the development machine).
__global__ void default_handle_kernel(uint64_t* buf, DevErr* err) {
    const dev::QpHandle h{};
    uint64_t* x = buf + blockIdx.x * blockDim.x + threadIdx.x;
    const Status bad = Status::InvalidArgument;
    DCHECK_EQ(dev::write(h, x, 8, 1, 0, 1), bad);
    DCHECK_EQ(dev::write<Scope::Warp>(h, x, 8, 1, 0, 1), bad);
    DCHECK_EQ(dev::send(h, x, 8, 1), bad);
    DCHECK_EQ(dev::write_inline(h, x, 8, 0, 1), bad);
    DCHECK_EQ(dev::recv(h, x, 8, 1), bad);
    DCHECK_EQ(dev::recv<Scope::Warp>(h, x, 8, 1), bad);
    DCHECK_EQ(dev::commit(h), bad);
    DCHECK_EQ(dev::wait_send(h, 1, nullptr, kMs), bad);
    DCHECK_EQ(dev::wait_recv(h, 1, nullptr, kMs), bad);
}

TEST(GpuVerbsScopes, DefaultConstructedHandleFailsEveryCall) {
    GV_SKIP_WITHOUT_GPU();
    DevBuf buf(2 * 64 * sizeof(uint64_t));
    Err err;
    default_handle_kernel<<<2, 64>>>(buf.get<uint64_t>(), err.get());
    LAUNCH_OK();
    err.expect_none();
}

TEST(GpuVerbsScopes, ThreadScopeReceives) {
    GV_SKIP_WITHOUT_GPU();
    run_recv_scopes<Scope::Thread>();
}

TEST(GpuVerbsScopes, WarpScopeReceives) {
    GV_SKIP_WITHOUT_GPU();
    run_recv_scopes<Scope::Warp>();
}

TEST(GpuVerbsScopes, BlockScopeReceives) {
    GV_SKIP_WITHOUT_GPU();
    run_recv_scopes<Scope::Block>();
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
            DCHECK_EQ(sp.mask, (1u << a.q.sq_log_bb) - 1);
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
            DCHECK_EQ(atom::load_acquire(&a.q.ctr->sq_reserved), base + nw);
            DCHECK_EQ(atom::load_acquire(&a.q.ctr->sq_ready), base + nw);
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
        ASSERT_EQ(gvtest::first_not(hd.data() + o0 + wlen, kWSlot - wlen, kGuard), -1) << "past WRITE " << id;
        ASSERT_EQ(gvtest::first_diff(hpeer.data() + (id % 64) * 32, hb.data() + o0, rlen), -1) << "READ " << id;
        ASSERT_EQ(gvtest::first_not(hb.data() + o0 + rlen, kWSlot - rlen, kGuard), -1) << "past READ " << id;
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
                uint64_t seen = 0;
                if (!gvtest::wait_at_least<uint64_t>(dst_flag + 1, r, kWait, &seen)) {
                    dev_fail(err, __LINE__, seen, r);
                    stop = 1;
                }
            }
            __syncthreads();
            if (stop) return;
        }
    } else if (blockIdx.x == 1) {  // responder: waits for the whole flag value of round r
        consume_rounds(dst_flag, [](uint32_t r, uint64_t v) { return v == flag_of(r); }, dst, words, rounds,
                       dst_flag + 1, err);
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

}  // namespace
