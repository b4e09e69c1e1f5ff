// gv_post_rate: how many WQEs per second kernels build, publish and ring. The QPs are
// driven as a ConnectX would be (backend mlx5: doorbell record + 8-byte doorbell write),
// with the doorbell aimed at a dummy word and a sink that "completes" every WQE at once
// (the block advances the retired counter itself), so nothing but posting is measured.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"

using namespace gv;
using gvbench::Buffer;
using gvbench::Event;
using gvbench::Failure;
using gvbench::Step;

template <Scope S>
__global__ void post_kernel(const dev::QpHandle* qps, uint32_t rounds, uint64_t raddr, Failure* fail) {
    dev::QpHandle qp = qps[blockIdx.x];
    for (uint32_t r = 0; r < rounds; ++r) {
        Status st;
        if constexpr (S == Scope::Block)
            st = dev::write<Scope::Block>(qp, nullptr, 8, 1, raddr, 1, threadIdx.x == blockDim.x - 1 ? kSignaled : 0);
        else
            st = dev::write<Scope::Thread>(qp, nullptr, 8, 1, raddr, 1, threadIdx.x == blockDim.x - 1 ? kSignaled : 0);
        if (st != Status::Ok)
            gvbench::record_failure(fail, Step::Post, blockIdx.x, qp.q.qpn, r * blockDim.x + threadIdx.x, st);
        // Its status is not checked: commit of an mlx5 handle returns Ok (nothing executes),
        // and a check would cost this kernel registers.
        dev::commit<Scope::Block>(qp);
        // The sink: every published WQE is complete, its slots free again.
        if (threadIdx.x == 0)
            atom::store_release(&qp.q.ctr->sq_retired, atom::load_acquire(&qp.q.ctr->sq_ready, qp.q.sys != 0), qp.q.sys != 0);
        __syncthreads();
    }
}

const char* const kUsage =
    "usage: gv_post_rate [--mem device|host] [-n rounds] [-t threads] [-q qps] [--json]\n"
    "How many WQEs per second kernels build, publish and ring (nothing executes them). Needs a\n"
    "CUDA GPU.\n"
    "      --mem device|host  where the queues live (default device)\n"
    "  -n, --rounds N         WQEs each thread posts, 1 .. 1000000 (default 2000)\n"
    "  -t, --threads N        threads per QP (block), 1 .. 1024 (default 256)\n"
    "  -q, --qps N            one QP count, 1 .. 4096 (default: 1, 8, 66, 132, 264, 528)\n"
    "      --json             one JSON object per row\n"
    "      --help             this text\n"
    "Exit status: 0 measured, 1 failed (the reason on stderr), 2 bad usage.\n";

int main(int argc, char** argv) {
    return gvcli::run(argc, argv, kUsage, [&](gvcli::Args& args) {
        uint32_t rounds = 2000, threads = 256;
        std::vector<uint32_t> qcounts{1, 8, 66, 132, 264, 528};
        std::string mem = "device";
        bool json = false;
        while (args.next()) {
            if (args.is("--mem")) mem = args.one_of({"device", "host"});
            else if (args.is("-n", "--rounds")) rounds = uint32_t(args.integer(1, 1000000));
            else if (args.is("-t", "--threads")) threads = uint32_t(args.integer(1, 1024));
            else if (args.is("-q", "--qps")) qcounts = {uint32_t(args.integer(1, 4096))};
            else if (args.is("--json")) json = true;
            else args.unknown();
        }
        gvbench::require_gpu();
        Context ctx(ContextOptions{Backend::Soft, 0});
        ProtectionDomain pd(ctx);
        MemoryKind mk = mem == "host" ? MemoryKind::Host : MemoryKind::Device;
        const uint32_t maxq = *std::max_element(qcounts.begin(), qcounts.end());
        std::vector<std::unique_ptr<CompletionQueue>> cqs;
        std::vector<std::unique_ptr<QueuePair>> qps;
        std::vector<dev::QpHandle> hs;
        // Per QP, 64 bytes in the queues' memory kind: a dummy doorbell register, and the
        // doorbell lock and last-rung index the mlx5 path keeps beside it (both start at 0).
        Buffer<uint64_t> uars(maxq * 8,
                              mk == MemoryKind::Host ? gvbench::Mem::HostMapped : gvbench::Mem::Device);
        {
            const std::vector<uint64_t> zero(size_t(maxq) * 8, 0);
            CUDA_CHECK(cudaMemcpy(uars.get(), zero.data(), zero.size() * 8, cudaMemcpyDefault));
        }
        for (uint32_t q = 0; q < maxq; ++q) {
            cqs.push_back(std::make_unique<CompletionQueue>(ctx, CqOptions{64, mk}));
            QpOptions o;
            o.send_cq = o.recv_cq = cqs.back().get();
            o.sq_depth = std::max<uint32_t>(threads, 64);
            o.memory = mk;
            qps.push_back(std::make_unique<QueuePair>(pd, o));
            dev::QpHandle h = qps.back()->device_handle();
            h.backend = Backend::Mlx5;  // doorbell record + UAR write, no executor
            h.q.sys = 1;  // what a NIC reading the queue needs
            h.mlx5.uar = uars.get() + q * 8;
            h.mlx5.db_lock = reinterpret_cast<uint32_t*>(uars.get() + q * 8 + 1);
            h.mlx5.db_last = reinterpret_cast<uint32_t*>(uars.get() + q * 8 + 2);
            hs.push_back(h);
        }
        Buffer<dev::QpHandle> d_hs(hs.size());
        CUDA_CHECK(
            cudaMemcpy(d_hs.get(), hs.data(), hs.size() * sizeof(dev::QpHandle), cudaMemcpyHostToDevice));
        Buffer<Failure> d_fail(1);
        CUDA_CHECK(cudaMemset(d_fail.get(), 0, sizeof(Failure)));
        if (!json)
            std::printf(
                "# gv_post_rate: %s, queues in %s memory, %u threads per QP (block), %u rounds\n"
                "%8s %8s %16s %16s\n",
                gvbench::gpu_name().c_str(), mem.c_str(), threads, rounds, "#QPs", "scope", "WQEs/s[M]",
                "ns/WQE/QP");
        for (uint32_t nq : qcounts) {
            for (int scope = 0; scope < 2; ++scope) {
                const char* sn = scope == 0 ? "thread" : "block";
                Event e0, e1;
                float best = 1e30f;
                for (int rep = 0; rep < 3; ++rep) {
                    // Between the two records nothing but the launch: their results are checked after.
                    const cudaError_t rec0 = cudaEventRecord(e0);
                    if (scope == 0)
                        post_kernel<Scope::Thread><<<nq, threads>>>(d_hs.get(), rounds, 0x1000, d_fail.get());
                    else post_kernel<Scope::Block><<<nq, threads>>>(d_hs.get(), rounds, 0x1000, d_fail.get());
                    const cudaError_t rec1 = cudaEventRecord(e1);
                    CUDA_CHECK(rec0);
                    CUDA_CHECK(rec1);
                    CUDA_CHECK(cudaGetLastError());
                    CUDA_CHECK(cudaEventSynchronize(e1));
                    const float ms = gvbench::elapsed_ms(e0, e1);
                    const Failure f = gvbench::read_failure(d_fail.get());
                    if (f.count)
                        throw Error(std::string("the posting kernel failed (") + std::to_string(nq) +
                                    " QPs, " + sn + " scope, run " + std::to_string(rep) +
                                    " of 0..2 (0: warm-up)): " + gvbench::describe(f, "WRITE"));
                    if (rep) best = std::min(best, ms);
                }
                double wqes = double(rounds) * threads * nq;
                double rate = wqes / (best / 1e3);
                if (json)
                    std::printf("{\"bench\":\"post_rate\",\"mem\":\"%s\",\"qps\":%u,\"scope\":\"%s\",\"threads\":%u,"
                                "\"wqes_per_s\":%.0f}\n",
                                mem.c_str(), nq, sn, threads, rate);
                else
                    std::printf("%8u %8s %16.1f %16.1f\n", nq, sn, rate / 1e6, 1e9 / (rate / nq));
                std::fflush(stdout);  // each row as it is measured (a run cut short keeps them)
            }
        }
        return 0;
    });
}
