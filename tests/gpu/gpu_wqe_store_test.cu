// The bytes kernels store into a send ring, against rdma-core's helpers (the oracle of
// tests/unit/mlx5_reader_util.hpp). One-WQEBB WQEs are built in registers and stored whole
// (gpuverbs/device/qp_wqebb.cuh); when a converged warp posts 32 consecutive WQEBBs on one ring
// its lanes store each other's units (a shuffle transposition), so every lane's arguments must
// land in its own WQEBB whatever the path: warp-coalesced (block and warp scope, also across
// the ring's end), per thread (lanes on two QPs). Nothing is committed: no executor reads
// these WQEs. Label gpu; skipped without a GPU.
#include <cuda_runtime.h>

#include <cstring>
#include <memory>
#include <vector>

#include "gpu_util.cuh"
#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"
#include "unit/mlx5_reader_util.hpp"

namespace {

using namespace gv;

enum Kind : uint8_t { kSge = 0, kAtomic = 1, kNop = 2 };

/// What one thread posts in one round.
struct LaneArgs {
    uint8_t kind, opcode;
    uint32_t flags, len, lkey, rkey, imm, qp;
    uint64_t laddr, raddr, swap_add, compare;
};

template <Scope S>
__device__ Status post_one(const dev::QpHandle& h, const LaneArgs& a) {
    if (a.kind == kAtomic)
        return dev::post_atomic<S>(h, a.opcode, reinterpret_cast<void*>(a.laddr), a.lkey, a.raddr, a.rkey, a.swap_add,
                                   a.compare, a.flags);
    if (a.kind == kNop) return dev::nop<S>(h, a.flags);
    const Sge s{a.laddr, a.len, a.lkey};
    return dev::post_sge<S>(h, a.opcode, &s, 1, a.raddr, a.rkey, a.imm, a.flags);
}

/// Round r: thread t posts args[r * blockDim.x + t] on its QP (block scope: every thread of a
/// round posts the same kind, as a collective call needs). Statuses to st. Before round
/// `skip_round`, thread 0 posts `skip` NOPs alone and retires them (moves the ring's start, so
/// that the warp's WQEs run across the ring's end).
template <Scope S>
__global__ void post_rounds(const dev::QpHandle* qps, const LaneArgs* args, uint32_t rounds, uint32_t skip,
                            int* st) {
    if (skip && threadIdx.x == 0) {
        const dev::QpHandle& h = qps[0];
        for (uint32_t i = 0; i < skip; ++i) dev::nop<Scope::Thread>(h, 0);
        atom::store_release(&h.q.ctr->sq_retired, atom::load_acquire(&h.q.ctr->sq_ready));
    }
    __syncthreads();
    for (uint32_t r = 0; r < rounds; ++r) {
        const uint32_t i = r * blockDim.x + threadIdx.x;
        const LaneArgs a = args[i];
        st[i] = int(post_one<S>(qps[a.qp], a));
    }
}

/// The oracle's WQE for a, at ring position pos.
std::vector<uint8_t> expected(const LaneArgs& a, uint32_t qpn, uint64_t pos) {
    mlx5test::WqeSpec s;
    s.opcode = a.kind == kNop ? uint8_t(MLX5_OPCODE_NOP) : a.opcode;
    s.fm_ce_se = dev::fm_ce_se(a.flags);
    s.qpn = qpn;
    if (a.kind == kSge) {
        s.imm_be = mlx5::to_be32(a.imm);  // 0 unless an immediate opcode (random_args)
        if (mlx5::has_raddr(a.opcode)) s.raddr = a.raddr, s.rkey = a.rkey;
        if (a.len) s.data.push_back({a.laddr, a.len, a.lkey});
    } else if (a.kind == kAtomic) {
        s.raddr = a.raddr, s.rkey = a.rkey, s.swap_add = a.swap_add, s.compare = a.compare;
        s.data.push_back({a.laddr, 8, a.lkey});
    }
    return mlx5test::oracle_bytes(s, pos);
}

struct Fixture {
    Context ctx = gvtest::gpu_ctx();
    ProtectionDomain pd{ctx};
    std::vector<std::unique_ptr<CompletionQueue>> cqs;
    std::vector<std::unique_ptr<QueuePair>> qps;
    std::vector<dev::QpHandle> hs;

    Fixture(uint32_t nqps, uint32_t depth) {
        for (uint32_t q = 0; q < nqps; ++q) {
            cqs.push_back(std::make_unique<CompletionQueue>(ctx, CqOptions{64, MemoryKind::Device}));
            QpOptions o;
            o.send_cq = o.recv_cq = cqs.back().get();
            o.sq_depth = depth;
            qps.push_back(std::make_unique<QueuePair>(pd, o));
            hs.push_back(qps.back()->device_handle());
        }
    }

    /// The send ring of QP q, as the kernels left it.
    std::vector<uint8_t> ring(uint32_t q) const {
        std::vector<uint8_t> r(size_t(mlx5::kWqeBb) << hs[q].q.sq_log_bb);
        EXPECT_EQ(cudaMemcpy(r.data(), hs[q].q.sq, r.size(), cudaMemcpyDeviceToHost), cudaSuccess);
        return r;
    }
};

/// Runs post_rounds<S> with `threads` threads and checks every WQE's bytes: the oracle's ds
/// units, then zeros to the end of its WQEBB. pos_of(i) is where args[i] must be.
template <Scope S, typename PosOf>
void run_and_check(Fixture& f, const std::vector<LaneArgs>& args, uint32_t threads, uint32_t skip, PosOf pos_of) {
    const uint32_t rounds = uint32_t(args.size()) / threads;
    gvtest::DevBuf d_hs(f.hs.size() * sizeof(dev::QpHandle)), d_args(args.size() * sizeof(LaneArgs)),
        d_st(args.size() * sizeof(int));
    ASSERT_TRUE(d_hs.p && d_args.p && d_st.p);
    CUDA_OK(cudaMemcpy(d_hs.p, f.hs.data(), f.hs.size() * sizeof(dev::QpHandle), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_args.p, args.data(), args.size() * sizeof(LaneArgs), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_st.p, 0xff, args.size() * sizeof(int)));
    post_rounds<S><<<1, threads>>>(d_hs.get<dev::QpHandle>(), d_args.get<LaneArgs>(), rounds, skip, d_st.get<int>());
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<int> st(args.size());
    CUDA_OK(cudaMemcpy(st.data(), d_st.p, st.size() * sizeof(int), cudaMemcpyDeviceToHost));
    std::vector<std::vector<uint8_t>> rings;
    for (uint32_t q = 0; q < f.hs.size(); ++q) rings.push_back(f.ring(q));
    for (size_t i = 0; i < args.size(); ++i) {
        SCOPED_TRACE(::testing::Message() << "WQE " << i << " (round " << i / threads << ", thread " << i % threads
                                          << ", QP " << args[i].qp << ")");
        ASSERT_EQ(st[i], int(Status::Ok));
        const uint64_t pos = pos_of(i);
        const std::vector<uint8_t>& r = rings[args[i].qp];
        const size_t off = (pos * mlx5::kWqeBb) % r.size();
        const std::vector<uint8_t> want = expected(args[i], f.hs[args[i].qp].q.qpn, pos);
        ASSERT_LE(want.size(), size_t(mlx5::kWqeBb));
        EXPECT_EQ(mlx5test::hex(r.data() + off, want.size()), mlx5test::hex(want.data(), want.size()));
        const std::vector<uint8_t> zeros(mlx5::kWqeBb - want.size(), 0);
        EXPECT_EQ(mlx5test::hex(r.data() + off + want.size(), zeros.size()), mlx5test::hex(zeros.data(), zeros.size()))
            << "the WQEBB past the WQE's ds units";
    }
}

/// Random arguments for one lane of a round of kind k.
LaneArgs random_args(mlx5test::Rng& rng, Kind k, uint32_t qp) {
    static const uint8_t sge_ops[] = {MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_RDMA_READ,
                                      MLX5_OPCODE_SEND, MLX5_OPCODE_SEND_IMM};
    LaneArgs a{};
    a.kind = k;
    a.qp = qp;
    a.flags = (rng.below(2) ? kSignaled : 0) | (rng.below(3) == 0 ? kFence : 0) | (rng.below(5) == 0 ? kSolicited : 0);
    a.laddr = rng.u64() & ~7ull;
    a.lkey = rng.u32();
    a.raddr = rng.u64() & ~7ull;
    a.rkey = rng.u32();
    if (k == kSge) {
        a.opcode = sge_ops[rng.below(5)];
        a.len = rng.below(4) == 0 ? 0 : 1 + rng.below(1u << 20);  // zero-length: no data segment
        // The API passes an immediate with the *_IMM opcodes only (0 otherwise, as rdma-core
        // leaves the field): post_sge stores whatever it is given.
        const bool imm = a.opcode == MLX5_OPCODE_RDMA_WRITE_IMM || a.opcode == MLX5_OPCODE_SEND_IMM;
        a.imm = imm ? rng.u32() : 0;
    } else if (k == kAtomic) {
        a.opcode = rng.below(2) ? MLX5_OPCODE_ATOMIC_FA : MLX5_OPCODE_ATOMIC_CS;
        a.swap_add = rng.u64();
        a.compare = rng.u64();
    }
    return a;
}

TEST(GpuWqeStore, BlockScopeWarpsStoreEachLanesOwnWqe) {
    GV_SKIP_WITHOUT_GPU();
    mlx5test::Rng rng(0x6776'7771'0000'0001ull);
    SCOPED_TRACE(::testing::Message() << "seed=0x" << std::hex << rng.seed);
    constexpr uint32_t kThreads = 96;  // three warps
    Fixture f(1, 512);
    std::vector<LaneArgs> args;
    for (Kind k : {kSge, kSge, kAtomic, kNop, kSge})
        for (uint32_t t = 0; t < kThreads; ++t) args.push_back(random_args(rng, k, 0));
    run_and_check<Scope::Block>(f, args, kThreads, 0, [](size_t i) { return uint64_t(i); });
}

TEST(GpuWqeStore, WarpScopeAcrossTheRingsEnd) {
    GV_SKIP_WITHOUT_GPU();
    mlx5test::Rng rng(0x6776'7771'0000'0002ull);
    SCOPED_TRACE(::testing::Message() << "seed=0x" << std::hex << rng.seed);
    Fixture f(1, 64);
    const uint32_t ring = 1u << f.hs[0].q.sq_log_bb;  // at least the depth asked for
    ASSERT_GE(ring, 32u);
    const uint32_t skip = ring - 18;  // the warp's 32 WQEs: 18 before the ring's end, 14 after
    std::vector<LaneArgs> args;
    for (uint32_t t = 0; t < 32; ++t) args.push_back(random_args(rng, kSge, 0));
    run_and_check<Scope::Warp>(f, args, 32, skip, [skip](size_t i) { return skip + uint64_t(i); });
}

TEST(GpuWqeStore, ThreadScopeLanesOnTwoQps) {
    GV_SKIP_WITHOUT_GPU();
    mlx5test::Rng rng(0x6776'7771'0000'0003ull);
    SCOPED_TRACE(::testing::Message() << "seed=0x" << std::hex << rng.seed);
    Fixture f(2, 256);
    // Even lanes on QP 0, odd lanes on QP 1: each QP's lanes share a reservation, ranked by
    // lane, so neither QP's WQEs are the warp's 32 consecutive ones.
    std::vector<LaneArgs> args;
    for (uint32_t r = 0; r < 2; ++r)
        for (uint32_t t = 0; t < 32; ++t) args.push_back(random_args(rng, r ? kAtomic : kSge, t & 1));
    run_and_check<Scope::Thread>(f, args, 32, 0, [](size_t i) { return uint64_t(i / 32) * 16 + (i % 32) / 2; });
}

TEST(GpuWqeStore, ThreadScopeWholeWarpOnOneQp) {
    GV_SKIP_WITHOUT_GPU();
    mlx5test::Rng rng(0x6776'7771'0000'0004ull);
    SCOPED_TRACE(::testing::Message() << "seed=0x" << std::hex << rng.seed);
    Fixture f(1, 256);
    std::vector<LaneArgs> args;
    for (uint32_t r = 0; r < 3; ++r)
        for (uint32_t t = 0; t < 32; ++t) args.push_back(random_args(rng, r == 1 ? kAtomic : kSge, 0));
    // One warp: its converged lanes share one reservation per round, ranked by lane.
    run_and_check<Scope::Thread>(f, args, 32, 0, [](size_t i) { return uint64_t(i); });
}

}  // namespace
