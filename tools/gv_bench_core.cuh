// The measured kernels (bandwidth and latency), the CPU initiator on a GPU context, and the
// memcpy ceiling (the options and the output: gv_bench_host.hpp).
// Part of tools/gv_bench.cu (one translation unit for the four tools; these helpers stay in its
// anonymous namespace).
#pragma once

namespace {

/// The context of a GPU-initiated run: the software device, or the mlx5 backend on the ConnectX
/// --device names (mlx5: the first one), on GPU --gpu, which drives its queues.
inline ContextOptions context_for(const Opts& o) { return gvcli::device_context(o.device, o.gpu); }

// One QP's work for a kernel block or a CPU initiator thread (gv_bench_cpu.hpp).
using Job = CpuJob;

// Block-uniform: true when some block of the kernel recorded a failure in *fail.
__device__ bool block_stop(Failure* fail) {
    __shared__ int stop;
    if (threadIdx.x == 0) stop = atomicAdd(&fail->count, 0u);
    __syncthreads();
    bool r = stop != 0;
    __syncthreads();  // everyone read `stop` before thread 0 may write it again
    return r;
}

// op: 0 write, 1 read, 2 send. Blocks [0, Q) post; for send, blocks [Q, 2Q) receive (with
// nq = 0 every block receives: the two-process server of send_bw). Every failed call is
// recorded in *fail (the first one with its QP, work request and status; the waits keep no
// completion, which would cost the kernel registers: the host adds the failed QP's state and
// syndrome). kStop (two-process mode): leave at the first failure, since every later wait on
// a dead peer would wait out its own timeout.
/// Threads per block of bw_kernel at most. A kernel that commits at block scope inlines the
/// software device's executor (146 registers a thread unbounded, ptxas for sm_90); 512 threads
/// need at most 128, which __launch_bounds__ makes ptxas fit (24 bytes spilled).
inline constexpr uint32_t kMaxBlockThreads = 512;

template <bool kStop>
__global__ void __launch_bounds__(kMaxBlockThreads) bw_kernel(const Job* jobs, uint32_t nq, int op, uint32_t size, uint32_t iters,
                          Failure* fail, uint32_t rx_rounds) {
    if (blockIdx.x >= nq) {  // receiver of a send_bw pair
        const uint32_t q = blockIdx.x - nq;
        const Job& j = jobs[q];
        // rx_rounds 2 (--rx-rounds, the default): receives stay posted a round ahead of the
        // sender (the receive queue holds two rounds: add_qp), as perftest's receiver keeps its
        // rx-depth of receives posted; a sender that starts its next round before this block
        // reposted would find no receive and wait under the RNR rules, which measures the
        // receiver's turnaround, not SEND bandwidth. 1: the next round is posted once this one
        // completed (that RNR path, measured on purpose).
        auto post_round = [&](uint32_t base) {
            const uint32_t n = min(blockDim.x, iters - base);
            if (threadIdx.x < n) {
                uint64_t off = gvbench::msg_off(base + threadIdx.x, size, j.slice);
                Status st = dev::recv(j.peer, j.dst + off, size, j.dkey);
                if (st != Status::Ok)
                    record_failure(fail, Step::PostRecv, q, j.peer.q.qpn, base + threadIdx.x, st);
            }
        };
        post_round(0);
        for (uint32_t base = 0; base < iters; base += blockDim.x) {
            uint32_t n = min(blockDim.x, iters - base);
            const bool more = base + blockDim.x < iters;
            if (more && rx_rounds > 1) post_round(base + blockDim.x);
            __syncthreads();
            if (threadIdx.x == 0) {
                Status st = dev::wait_recv(j.peer, n, nullptr, 20'000'000'000ull);
                if (st != Status::Ok) record_failure(fail, Step::WaitRecv, q, j.peer.q.qpn, base + n - 1, st);
            }
            __syncthreads();
            if constexpr (kStop) {
                if (block_stop(fail)) return;
            }
            if (more && rx_rounds == 1) post_round(base + blockDim.x);
        }
        return;
    }
    const Job& j = jobs[blockIdx.x];
    for (uint32_t base = 0; base < iters; base += blockDim.x) {
        uint32_t n = min(blockDim.x, iters - base);
        uint32_t i = base + threadIdx.x;
        if (threadIdx.x < n) {
            uint64_t off = gvbench::msg_off(i, size, j.slice);
            uint32_t fl = threadIdx.x == n - 1 ? kSignaled : 0;
            Status st;
            if (op == 0) st = dev::write(j.qp, j.src + off, size, j.lkey, uint64_t(j.dst + off), j.rkey, fl);
            else if (op == 1) st = dev::read(j.qp, j.src + off, size, j.lkey, uint64_t(j.dst + off), j.rkey, fl);
            else st = dev::send(j.qp, j.src + off, size, j.lkey, fl);
            if (st != Status::Ok) record_failure(fail, Step::Post, blockIdx.x, j.qp.q.qpn, i, st);
        }
        const Status cs = dev::commit<Scope::Block>(j.qp);
        if (threadIdx.x == 0) {
            if (cs != Status::Ok) record_failure(fail, Step::Commit, blockIdx.x, j.qp.q.qpn, base + n - 1, cs);
            const Status ws = dev::wait_send(j.qp, 1, nullptr, 20'000'000'000ull);
            if (ws != Status::Ok)
                record_failure(fail, Step::WaitSend, blockIdx.x, j.qp.q.qpn, base + n - 1, ws);
        }
        __syncthreads();
        if constexpr (kStop) {
            if (block_stop(fail)) return;
        }
    }
}

// Ping-pong: the initiator writes i to the peer's slot and stamps until the peer's answer i
// lands in its own slot; the responder waits for i, then answers with i. kSide -1 (loopback):
// block 0 of two initiates with job a (QP 0), block 1 answers with job b (QP 1). kSide 0 / 1
// (two-process): the one block is the initiator / the responder, with job a (QP 0). A failure
// is recorded in *fail and ends the block (the peer's next wait then times out).
// kOneCall: each WRITE posted and committed in one call (kCommit; on the software device it
// executes in the posting thread: detail/soft/direct.cuh); else in two calls (write, then commit).
// A template parameter, so that each form's kernel is what a user's kernel with constant flags
// compiles to (a run-time flag would put both forms' code in one kernel).
template <int kSide, bool kOneCall = true>
__global__ void lat_kernel(Job a, Job b, uint32_t size, uint32_t iters, unsigned long long* stamps,
                           Failure* fail) {
    constexpr uint32_t commit_flag = kOneCall ? uint32_t(kCommit) : 0u;
    const bool initiator = kSide < 0 ? blockIdx.x == 0 : kSide == 0;
    const bool responder = kSide < 0 ? blockIdx.x == 1 : kSide == 1;
    const Job& me = kSide < 0 ? (blockIdx.x == 0 ? a : b) : a;
    const uint32_t q = kSide < 0 ? blockIdx.x : 0;
    volatile uint64_t* mine = reinterpret_cast<uint64_t*>(me.src + 4096);  // where the peer's writes land
    uint64_t* out = reinterpret_cast<uint64_t*>(me.src);                    // what we send
    if (threadIdx.x != 0) return;
    for (uint32_t i = 1; i <= iters; ++i) {
        if (responder) {
            uint64_t t0 = atom::now_ns();
            while (atom::load_acquire(reinterpret_cast<uint64_t*>(const_cast<uint64_t*>(mine)) + (size / 8 - 1)) != i)
                if (atom::now_ns() - t0 > 5'000'000'000ull) {
                    record_failure(fail, Step::AwaitPing, q, me.qp.q.qpn, i - 1, Status::Timeout);
                    return;
                }
        } else {
            stamps[i - 1] = atom::now_ns();
        }
        out[size / 8 - 1] = i;
        const Status ws = dev::write(me.qp, out, size, me.lkey, uint64_t(me.dst + 4096), me.rkey,
                                     ((i % 64) == 0 ? kSignaled : 0) | commit_flag);
        const Status cs = kOneCall ? Status::Ok : dev::commit(me.qp);
        if (ws != Status::Ok || cs != Status::Ok) {
            record_failure(fail, ws != Status::Ok ? Step::Post : Step::Commit, q, me.qp.q.qpn, i - 1,
                           ws != Status::Ok ? ws : cs);
            return;
        }
        if (i % 64 == 0) {
            const Status st = dev::wait_send(me.qp, 1, nullptr, 5'000'000'000ull);
            if (st != Status::Ok) {
                record_failure(fail, Step::WaitSend, q, me.qp.q.qpn, i - 1, st);
                return;
            }
        }
        if (initiator) {
            uint64_t t0 = atom::now_ns();
            while (atom::load_acquire(reinterpret_cast<uint64_t*>(const_cast<uint64_t*>(mine)) + (size / 8 - 1)) != i)
                if (atom::now_ns() - t0 > 5'000'000'000ull) {
                    record_failure(fail, Step::AwaitPong, q, me.qp.q.qpn, i - 1, Status::Timeout);
                    return;
                }
            stamps[i - 1] = atom::now_ns() - stamps[i - 1];
        }
    }
}

// Launches lat_kernel<kSide>, its WRITEs posted and committed in one call or in two (--separate-commit).
template <int kSide>
void launch_lat(bool one_call, uint32_t blocks, const Job& a, const Job& b, uint32_t size, uint32_t iters,
                unsigned long long* stamps, Failure* fail) {
    if (one_call) lat_kernel<kSide, true><<<blocks, 32>>>(a, b, size, iters, stamps, fail);
    else lat_kernel<kSide, false><<<blocks, 32>>>(a, b, size, iters, stamps, fail);
}

// CPU-initiated on a GPU context: gv_bench_cpu.hpp's initiator, yielding every idle turn.
void cpu_bw(const Job& j, uint32_t q, int op, uint32_t size, uint32_t iters, uint32_t list, Failure* fail) {
    cpu_initiator(j, q, op, size, iters, list, fail, nullptr, CpuWait::Yield);
}

// Bytes per second of a cudaMemcpy device to device of `bytes`, best of five.
double memcpy_ceiling(size_t bytes) {
    Buffer<uint8_t> a(bytes), b(bytes);
    Event e0, e1;
    CUDA_CHECK(cudaMemcpy(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice));
    float best = 1e30f;
    for (int r = 0; r < 5; ++r) {
        // Between the two records nothing but the copy: their results are checked after.
        const cudaError_t rec0 = cudaEventRecord(e0);
        const cudaError_t copy = cudaMemcpy(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice);
        const cudaError_t rec1 = cudaEventRecord(e1);
        CUDA_CHECK(rec0);
        CUDA_CHECK(copy);
        CUDA_CHECK(rec1);
        CUDA_CHECK(cudaEventSynchronize(e1));
        best = std::min(best, gvbench::elapsed_ms(e0, e1));
    }
    return bytes / (best / 1e3) / 1e9;
}

// Bytes per second of a cudaMemcpyPeer of `bytes` from GPU `from` to GPU `to`, best of five,
// with peer access enabled both ways (as the software device runs; without it CUDA stages the
// copy through host memory): the ceiling of a peer-GPU run. Timed on `from`'s stream.
double memcpy_peer_ceiling(int from, int to, size_t bytes) {
    for (auto [a, b] : {std::pair<int, int>{from, to}, std::pair<int, int>{to, from}}) {
        CUDA_CHECK(cudaSetDevice(a));
        const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
        else CUDA_CHECK(e);
    }
    CUDA_CHECK(cudaSetDevice(to));
    Buffer<uint8_t> dst(bytes);
    CUDA_CHECK(cudaSetDevice(from));
    Buffer<uint8_t> src(bytes);
    Event e0, e1;
    CUDA_CHECK(cudaMemcpyPeer(dst.get(), to, src.get(), from, bytes));
    float best = 1e30f;
    for (int r = 0; r < 5; ++r) {
        const cudaError_t rec0 = cudaEventRecord(e0);
        const cudaError_t copy = cudaMemcpyPeerAsync(dst.get(), to, src.get(), from, bytes, 0);
        const cudaError_t rec1 = cudaEventRecord(e1);
        CUDA_CHECK(rec0);
        CUDA_CHECK(copy);
        CUDA_CHECK(rec1);
        CUDA_CHECK(cudaEventSynchronize(e1));
        best = std::min(best, gvbench::elapsed_ms(e0, e1));
    }
    return bytes / (best / 1e3) / 1e9;
}

// --gpu and --peer-gpu name visible GPUs, and the two have peer access (else the software
// device refuses to connect them; say so before anything is set up).
void check_gpus(const Opts& o) {
    const int n = Context::gpu_count();
    const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
    const std::string hint = vis ? std::string(" (CUDA_VISIBLE_DEVICES=") + vis + ")" : "";
    for (auto [name, g] : {std::pair<const char*, int>{"--gpu", o.gpu}, {"--peer-gpu", o.peer_gpu}})
        if (g >= n)
            throw NotSupported(std::string(name) + " " + std::to_string(g) + ": " + std::to_string(n) +
                               " CUDA GPU(s) visible" + hint);
    if (o.peer_gpu < 0) return;
    int a = 0;
    CUDA_CHECK(cudaDeviceCanAccessPeer(&a, o.gpu, o.peer_gpu));
    if (!a)
        throw NotSupported("GPU " + std::to_string(o.gpu) + " cannot reach the memory of GPU " +
                           std::to_string(o.peer_gpu) + " (cudaDeviceCanAccessPeer = 0): no peer-to-peer path");
}

// ", GPU 0 -> GPU 1 (peer)" for the headers of peer-GPU runs.
std::string peer_where(const Opts& o) {
    if (o.peer_gpu < 0) return "";
    return ", GPU " + std::to_string(o.gpu) + " -> GPU " + std::to_string(o.peer_gpu) + " (" +
           gvbench::gpu_name(o.peer_gpu) + ")";
}

// The direction bytes move in a run of `op` between this GPU and the peer's: READ moves them
// from the peer to us.
double peer_ceiling(const Opts& o, size_t bytes) {
    const bool read = o.op == "read";
    const double c = memcpy_peer_ceiling(read ? o.peer_gpu : o.gpu, read ? o.gpu : o.peer_gpu, bytes);
    CUDA_CHECK(cudaSetDevice(o.gpu));
    return c;
}

}  // namespace
