// Kernels post writes and reads on many QPs (one per block), at thread, warp and block
// scope, and poll their completions; the software device executes them on the GPU with the
// committing group. Every byte is verified on the host.
#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "cuda/cuda_rt.hpp"
#include "gpu/gpu_util.cuh"

using namespace gv;
using gvtest::DevBuf;

namespace {

struct Op {
    uint64_t src_off, dst_off;
    uint32_t len;
    uint32_t pad;
};

struct BlockArgs {
    dev::QpHandle qp;
    uint8_t* src;
    uint8_t* dst;
    uint8_t* back;
    uint32_t lkey_src, rkey_dst, lkey_back;
    uint32_t nops;
    const Op* ops;
    int* status;  // first failure per block (0 ok)
};

/// Each thread posts its own WQE (thread scope), the block commits together and thread 0
/// waits for the round's completions: perftest's shape, one QP per block.
template <Scope CommitScope>
__global__ void write_read_kernel(const BlockArgs* all) {
    const BlockArgs& a = all[blockIdx.x];
    for (int phase = 0; phase < 2; ++phase) {
        for (uint32_t base = 0; base < a.nops; base += blockDim.x) {
            uint32_t i = base + threadIdx.x;
            uint32_t n = min(blockDim.x, a.nops - base);
            if (i < a.nops) {
                const Op& op = a.ops[i];
                Status st = phase == 0
                    ? dev::write(a.qp, a.src + op.src_off, op.len, a.lkey_src,
                                 reinterpret_cast<uint64_t>(a.dst + op.dst_off), a.rkey_dst)
                    : dev::read(a.qp, a.back + op.dst_off, op.len, a.lkey_back,
                                reinterpret_cast<uint64_t>(a.dst + op.dst_off), a.rkey_dst);
                if (st != Status::Ok) atomicCAS(a.status + blockIdx.x, 0, 100 + int(st));
            }
            if constexpr (CommitScope == Scope::Block) {
                dev::commit<Scope::Block>(a.qp);
            } else if constexpr (CommitScope == Scope::Warp) {
                if (i < a.nops) dev::commit<Scope::Warp>(a.qp);
            } else {
                if (i < a.nops) dev::commit<Scope::Thread>(a.qp);
            }
            if (threadIdx.x == 0) {
                Completion c[1];
                for (uint32_t k = 0; k < n; ++k) {
                    Status st = dev::wait_send(a.qp, 1, c, 10'000'000'000ull);
                    if (st != Status::Ok) {
                        atomicCAS(a.status + blockIdx.x, 0, st == Status::CompletionError ? 1000 + c[0].status : 200 + int(st));
                        break;
                    }
                }
            }
            __syncthreads();
        }
    }
}

template <Scope S>
void run_many_blocks(uint32_t blocks, uint32_t ops_per_block, uint32_t threads, uint32_t max_len,
                     MemoryKind qmem, uint64_t seed) {
    Context ctx = gvtest::gpu_ctx();
    ProtectionDomain pd(ctx);
    const uint64_t slot = max_len;
    const uint64_t total = uint64_t(blocks) * ops_per_block * slot;
    DevBuf src(total), dst(total), back(total);
    ASSERT_TRUE(src.p && dst.p && back.p) << "cudaMalloc of " << total << " bytes failed";
    std::vector<uint8_t> h_src(total);
    gvtest::fill_random(h_src.data(), total, seed);
    CUDA_OK(cudaMemcpy(src.p, h_src.data(), total, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(dst.p, gvtest::kGuard, total));
    CUDA_OK(cudaMemset(back.p, gvtest::kGuard, total));
    MemoryRegion msrc(pd, src.p, total, kLocalWrite);
    MemoryRegion mdst(pd, dst.p, total, kAllAccess);
    MemoryRegion mback(pd, back.p, total, kLocalWrite);

    std::vector<std::unique_ptr<CompletionQueue>> cqs;
    std::vector<std::unique_ptr<QueuePair>> qps;
    for (uint32_t b = 0; b < 2 * blocks; ++b) {
        cqs.push_back(std::make_unique<CompletionQueue>(ctx, CqOptions{1024, qmem}));
        QpOptions o;
        o.send_cq = o.recv_cq = cqs.back().get();
        o.sq_depth = 512;
        o.memory = qmem;
        qps.push_back(std::make_unique<QueuePair>(pd, o));
    }
    for (uint32_t b = 0; b < blocks; ++b) {
        qps[2 * b]->connect(qps[2 * b + 1]->endpoint());
        qps[2 * b + 1]->connect(qps[2 * b]->endpoint());
    }

    std::mt19937_64 rng(seed);
    std::vector<Op> ops(size_t(blocks) * ops_per_block);
    for (size_t i = 0; i < ops.size(); ++i) {
        // Log-uniform sizes from 1 byte to max_len, random offsets within the op's slot.
        double e = std::uniform_real_distribution<double>(0, std::log2(double(max_len)))(rng);
        uint32_t len = std::max<uint32_t>(1, std::min<uint64_t>(max_len, uint64_t(std::exp2(e))));
        ops[i].len = len;
        ops[i].src_off = i * slot + rng() % (slot - len + 1);
        ops[i].dst_off = i * slot + rng() % (slot - len + 1);
    }
    Op* d_ops;
    CUDA_OK(cudaMalloc(&d_ops, ops.size() * sizeof(Op)));
    CUDA_OK(cudaMemcpy(d_ops, ops.data(), ops.size() * sizeof(Op), cudaMemcpyHostToDevice));
    std::vector<BlockArgs> args(blocks);
    int* d_status;
    CUDA_OK(cudaMalloc(&d_status, blocks * sizeof(int)));
    CUDA_OK(cudaMemset(d_status, 0, blocks * sizeof(int)));
    for (uint32_t b = 0; b < blocks; ++b) {
        args[b] = BlockArgs{qps[2 * b]->device_handle(), src.get(), dst.get(), back.get(),
                            msrc.lkey(), mdst.rkey(), mback.lkey(), ops_per_block,
                            d_ops + size_t(b) * ops_per_block, d_status};
    }
    BlockArgs* d_args;
    CUDA_OK(cudaMalloc(&d_args, args.size() * sizeof(BlockArgs)));
    CUDA_OK(cudaMemcpy(d_args, args.data(), args.size() * sizeof(BlockArgs), cudaMemcpyHostToDevice));

    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    cudaEventRecord(t0);
    write_read_kernel<S><<<blocks, threads>>>(d_args);
    cudaEventRecord(t1);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    float ms = 0;
    cudaEventElapsedTime(&ms, t0, t1);

    std::vector<int> status(blocks);
    CUDA_OK(cudaMemcpy(status.data(), d_status, blocks * sizeof(int), cudaMemcpyDeviceToHost));
    for (uint32_t b = 0; b < blocks; ++b) ASSERT_EQ(status[b], 0) << "block " << b;

    std::vector<uint8_t> h_dst(total), h_back(total);
    CUDA_OK(cudaMemcpy(h_dst.data(), dst.p, total, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(h_back.data(), back.p, total, cudaMemcpyDeviceToHost));
    uint64_t bytes = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        bytes += op.len;
        ASSERT_EQ(gvtest::first_diff(h_src.data() + op.src_off, h_dst.data() + op.dst_off, op.len), -1)
            << "write " << i << " len " << op.len;
        ASSERT_EQ(gvtest::first_diff(h_src.data() + op.src_off, h_back.data() + op.dst_off, op.len), -1)
            << "read " << i << " len " << op.len;
        // Nothing outside the op's range within its slot was touched.
        for (uint64_t o = i * slot; o < (i + 1) * slot; ++o) {
            if (o >= op.dst_off && o < op.dst_off + op.len) continue;
            ASSERT_EQ(h_dst[o], gvtest::kGuard) << "byte outside write " << i << " changed at " << o;
            ASSERT_EQ(h_back[o], gvtest::kGuard) << "byte outside read " << i << " changed at " << o;
        }
    }
    std::printf("[ gpu ] %u blocks x %u ops (%u threads): %zu WQEs, %.1f MB written+read, %.2f ms\n",
                blocks, ops_per_block, threads, ops.size() * 2, 2.0 * bytes / 1e6, ms);
    cudaFree(d_ops);
    cudaFree(d_args);
    cudaFree(d_status);
}

}  // namespace

TEST(GpuDataPath, ManyBlocksBlockCommitRandomSizes) {
    GV_SKIP_WITHOUT_GPU();
    run_many_blocks<Scope::Block>(64, 128, 256, 256 << 10, MemoryKind::Device, 11);
}

TEST(GpuDataPath, ManyBlocksWarpCommit) {
    GV_SKIP_WITHOUT_GPU();
    run_many_blocks<Scope::Warp>(32, 96, 128, 64 << 10, MemoryKind::Device, 12);
}

TEST(GpuDataPath, ManyBlocksThreadCommit) {
    GV_SKIP_WITHOUT_GPU();
    run_many_blocks<Scope::Thread>(32, 64, 64, 16 << 10, MemoryKind::Device, 13);
}

TEST(GpuDataPath, QueuesInHostMemory) {
    GV_SKIP_WITHOUT_GPU();
    run_many_blocks<Scope::Block>(8, 64, 64, 64 << 10, MemoryKind::Host, 14);
}

TEST(GpuDataPath, LargeMessagesUpTo8MiB) {
    GV_SKIP_WITHOUT_GPU();
    run_many_blocks<Scope::Block>(8, 8, 8, 8 << 20, MemoryKind::Device, 15);
}

// CPU threads post WRITEs between GPU-memory regions of a GPU-executed device: each commit
// launches the executor (the benchmarks' CPU-initiated shape). The traffic suite's
// soft-gpu-cpu-initiator instance runs the data-path tests the same way on host-memory
// buffers, which its CPU responders poll.
namespace {
/// An application kernel waiting for data: it says it started (mapped host memory), then spins
/// on *word until it holds `want` or timeout_ns passed, and leaves what it read last in *seen.
__global__ void wait_for_word(const uint64_t* word, uint64_t want, uint64_t timeout_ns, uint32_t* started,
                              uint64_t* seen) {
    gv::atom::store_release(started, 1u, true);
    uint64_t last = 0;
    gvtest::spin_until(word, [want](uint64_t x) { return x == want; }, timeout_ns, &last);
    *seen = last;
}
}  // namespace

// An application kernel is already running and spins until a WRITE that a CPU thread posts
// lands in its memory; the CPU's commit launches the executor, which must run beside it. In a
// fresh process (ctest runs each test alone) this is the executor's first launch: were the
// kernel loaded lazily, at that launch (CUDA's default since 12.2), loading could wait for the
// spinning kernel to end (CUDA may synchronize the GPU to load a kernel) and the two would
// wait for each other until the kernel gave up. The stand-in NIC's CPU-proxy instance failed
// that way, now and then, on the H200. The device loads its executor when it opens.
TEST(GpuDataPath, CpuWriteReachesAKernelAlreadyWaitingForIt) {
    GV_SKIP_WITHOUT_GPU();
    gvtest::Pair p(gvtest::gpu_ctx(), {}, MemoryKind::Host);
    EXPECT_NE(gv::detail::cuda::executor_loaded(0), 0)
        << "the executor kernel is not loaded on GPU 0 although a software device is open there";
    const uint64_t v = 0x600df00d12345678ull;
    DevBuf src(8), dst(8);
    CUDA_OK(cudaMemcpy(src.p, &v, 8, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(dst.p, 0, 8));
    CUDA_OK(cudaDeviceSynchronize());  // src and dst ready before the executor touches them
    MemoryRegion ms(p.pd, src.p, 8, kLocalWrite);
    MemoryRegion md(p.pd, dst.p, 8, kAllAccess);
    uint32_t* started = nullptr;
    uint64_t* seen = nullptr;
    CUDA_OK(cudaHostAlloc(&started, 64, cudaHostAllocMapped));
    *started = 0;
    seen = reinterpret_cast<uint64_t*>(started + 2);
    *seen = 0;
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    constexpr uint64_t kKernelWaitNs = 5000000000ull;
    wait_for_word<<<1, 1, 0, s>>>(dst.get<uint64_t>(), v, kKernelWaitNs, started, seen);
    CUDA_OK(cudaGetLastError());
    const auto t0 = std::chrono::steady_clock::now();
    while (!__atomic_load_n(started, __ATOMIC_ACQUIRE) && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
        std::this_thread::yield();
    ASSERT_EQ(*started, 1u) << "the waiting kernel did not start within 5 s";
    auto a = p.h(0);
    ASSERT_EQ(dev::write(a, src.get(), 8, ms.lkey(), uint64_t(dst.get()), md.rkey(), kSignaled), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    auto c = p.scq[0]->wait(1, 10000);
    CUDA_OK(cudaStreamSynchronize(s));
    EXPECT_EQ(c.size(), 1u);
    EXPECT_EQ(*seen, v) << "the waiting kernel gave up after 5 s: the executor that the CPU's commit launched did "
                           "not run beside it";
    CUDA_OK(cudaStreamDestroy(s));
    CUDA_OK(cudaFreeHost(started));
}

TEST(GpuDataPath, CpuPostsGpuExecutes) {
    GV_SKIP_WITHOUT_GPU();
    gvtest::Pair p(gvtest::gpu_ctx(), {}, MemoryKind::Host);
    const size_t n = 4 << 20;
    DevBuf src(n), dst(n);
    std::vector<uint8_t> h(n), out(n);
    gvtest::fill_random(h.data(), n, 5);
    CUDA_OK(cudaMemcpy(src.p, h.data(), n, cudaMemcpyHostToDevice));
    // A pageable cudaMemcpy may return before its DMA lands: the executor, a kernel on the
    // library's own streams, must not read src before it has.
    CUDA_OK(cudaDeviceSynchronize());
    MemoryRegion ms(p.pd, src.p, n, kLocalWrite);
    MemoryRegion md(p.pd, dst.p, n, kAllAccess);
    auto a = p.h(0);
    for (int k = 0; k < 16; ++k) {
        size_t chunk = n / 16;
        ASSERT_EQ(dev::write(a, src.get() + k * chunk, chunk, ms.lkey(),
                             uint64_t(dst.get() + k * chunk), md.rkey(), k == 15 ? kSignaled : 0),
                  Status::Ok);
    }
    ASSERT_EQ(dev::commit(a), Status::Ok);
    auto c = p.scq[0]->wait(1, 10000);
    EXPECT_EQ(c[0].wqe_opcode, MLX5_OPCODE_RDMA_WRITE);
    CUDA_OK(cudaMemcpy(out.data(), dst.p, n, cudaMemcpyDeviceToHost));
    EXPECT_EQ(gvtest::first_diff(h.data(), out.data(), n), -1);
}
