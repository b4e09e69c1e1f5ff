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

// ---- the same-run ceiling: 64-byte stores into the queues' memory, nothing else -----------
// Each thread writes one 64-byte WQEBB per round into a ring of its block (as many slots as the
// posting kernel's send queues), in one of three layouts:
//   thread  four 16-byte stores into the thread's own 64 bytes (a warp's store instruction
//           touches 32 pieces 64 bytes apart)
//   warp    the warp's 32 WQEBBs (2 KiB, contiguous) written together: lane l stores 16-byte
//           unit 32k + l in store k, so each instruction writes 512 contiguous bytes
//   fields  the stores a WQE of ctrl + raddr + data segments takes field by field (4+4+4+4,
//           8+4+4, 4+4+8 bytes: ten stores, as the builders wrote them until 2026-12-01)
// No atomics, no fences, no ordering: what stores alone reach.
enum class Layout { Thread, Warp, Fields };

template <Layout L>
__global__ void store_kernel(uint8_t* rings, uint32_t ring_bbs, uint32_t rounds) {
    uint8_t* ring = rings + size_t(blockIdx.x) * ring_bbs * 64;
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp0 = tid & ~31u;
    const uint32_t mask = ring_bbs * 64 - 1;
    for (uint32_t r = 0; r < rounds; ++r) {
        const uint32_t slot = r * blockDim.x + tid;
        const uint4 v = make_uint4(r, tid, 0x1234u, slot);
        if constexpr (L == Layout::Thread) {
            auto* p = reinterpret_cast<uint4*>(ring + ((slot * 64) & mask));
            p[0] = v;
            p[1] = v;
            p[2] = v;
            p[3] = v;
        } else if constexpr (L == Layout::Warp) {
            const uint32_t first = r * blockDim.x + warp0;  // the warp's first slot
            for (uint32_t k = 0; k < 4; ++k)
                *reinterpret_cast<uint4*>(ring + ((first * 64 + (k * 32 + lane) * 16) & mask)) = v;
        } else {
            uint8_t* p = ring + ((slot * 64) & mask);
            auto* w = reinterpret_cast<uint32_t*>(p);
            w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
            *reinterpret_cast<uint64_t*>(p + 16) = v.x;
            w[6] = v.y, w[7] = 0;
            w[8] = v.z, w[9] = v.w;
            *reinterpret_cast<uint64_t*>(p + 40) = v.y;
        }
    }
}

const char* const kUsage =
    "usage: gv_post_rate [--mem device|host] [-n rounds] [-t threads] [-q qps] [--json]\n"
    "How many WQEs per second kernels build, publish and ring (nothing executes them). Needs a\n"
    "CUDA GPU. Each QP count's rows start with the same-run ceiling: 64-byte stores alone into\n"
    "the queues' memory, per thread (stores-thread), a warp's 2 KiB together (stores-warp), and\n"
    "field by field (stores-fields).\n"
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
                "%8s %14s %16s %16s\n",
                gvbench::gpu_name().c_str(), mem.c_str(), threads, rounds, "#QPs", "scope", "WQEs/s[M]",
                "ns/WQE/QP");
        // The ceiling's rings: as many 64-byte slots per block as a send queue has WQEBBs.
        uint32_t ring_bbs = 64;
        while (ring_bbs < threads) ring_bbs <<= 1;
        Buffer<uint8_t> rings(size_t(maxq) * ring_bbs * 64,
                              mk == MemoryKind::Host ? gvbench::Mem::HostMapped : gvbench::Mem::Device);
        // Best of runs 1 and 2 (run 0 warms up); between the two records nothing but the launch.
        auto timed = [&](const char* what, uint32_t nq, auto&& launch) {
            Event e0, e1;
            float best = 1e30f;
            for (int rep = 0; rep < 3; ++rep) {
                const cudaError_t rec0 = cudaEventRecord(e0);
                launch();
                const cudaError_t rec1 = cudaEventRecord(e1);
                CUDA_CHECK(rec0);
                CUDA_CHECK(rec1);
                CUDA_CHECK(cudaGetLastError());
                CUDA_CHECK(cudaEventSynchronize(e1));
                const float ms = gvbench::elapsed_ms(e0, e1);
                const Failure f = gvbench::read_failure(d_fail.get());
                if (f.count)
                    throw Error(std::string("the posting kernel failed (") + std::to_string(nq) + " QPs, " + what +
                                ", run " + std::to_string(rep) + " of 0..2 (0: warm-up)): " +
                                gvbench::describe(f, "WRITE"));
                if (rep) best = std::min(best, ms);
            }
            return best;
        };
        auto report = [&](uint32_t nq, const char* what, float ms) {
            const double rate = double(rounds) * threads * nq / (ms / 1e3);
            if (json)
                std::printf("{\"bench\":\"post_rate\",\"mem\":\"%s\",\"qps\":%u,\"scope\":\"%s\",\"threads\":%u,"
                            "\"wqes_per_s\":%.0f}\n",
                            mem.c_str(), nq, what, threads, rate);
            else std::printf("%8u %14s %16.1f %16.1f\n", nq, what, rate / 1e6, 1e9 / (rate / nq));
            std::fflush(stdout);  // each row as it is measured (a run cut short keeps them)
        };
        for (uint32_t nq : qcounts) {
            // The ceiling first, in the same run: 64-byte stores alone, in three layouts.
            report(nq, "stores-thread", timed("stores-thread", nq, [&] {
                       store_kernel<Layout::Thread><<<nq, threads>>>(rings.get(), ring_bbs, rounds);
                   }));
            report(nq, "stores-warp", timed("stores-warp", nq, [&] {
                       store_kernel<Layout::Warp><<<nq, threads>>>(rings.get(), ring_bbs, rounds);
                   }));
            report(nq, "stores-fields", timed("stores-fields", nq, [&] {
                       store_kernel<Layout::Fields><<<nq, threads>>>(rings.get(), ring_bbs, rounds);
                   }));
            report(nq, "thread", timed("thread scope", nq, [&] {
                       post_kernel<Scope::Thread><<<nq, threads>>>(d_hs.get(), rounds, 0x1000, d_fail.get());
                   }));
            report(nq, "block", timed("block scope", nq, [&] {
                       post_kernel<Scope::Block><<<nq, threads>>>(d_hs.get(), rounds, 0x1000, d_fail.get());
                   }));
        }
        return 0;
    });
}
