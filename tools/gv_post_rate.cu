// gv_post_rate: how many WQEs per second kernels build, publish and ring. The QPs are
// driven as a ConnectX would be (backend mlx5: doorbell record + 8-byte doorbell write),
// with the doorbell aimed at a dummy word and a sink that "completes" every WQE at once
// (the block advances the retired counter itself), so nothing but posting is measured.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"

using namespace gv;

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            std::fprintf(stderr, "gv_post_rate: %s: %s\n", #call, cudaGetErrorString(e_));       \
            std::exit(1);                                                                          \
        }                                                                                          \
    } while (0)

template <Scope S>
__global__ void post_kernel(const dev::QpHandle* qps, uint32_t rounds, uint64_t raddr, int* err) {
    dev::QpHandle qp = qps[blockIdx.x];
    for (uint32_t r = 0; r < rounds; ++r) {
        Status st;
        if constexpr (S == Scope::Block)
            st = dev::write<Scope::Block>(qp, nullptr, 8, 1, raddr, 1, threadIdx.x == blockDim.x - 1 ? kSignaled : 0);
        else
            st = dev::write<Scope::Thread>(qp, nullptr, 8, 1, raddr, 1, threadIdx.x == blockDim.x - 1 ? kSignaled : 0);
        if (st != Status::Ok) atomicAdd(err, 1);
        dev::commit<Scope::Block>(qp);
        // The sink: every published WQE is complete, its slots free again.
        if (threadIdx.x == 0)
            atom::store_release(&qp.ctr->sq_retired, atom::load_acquire(&qp.ctr->sq_ready, qp.sys != 0), qp.sys != 0);
        __syncthreads();
    }
}

int main(int argc, char** argv) {
    uint32_t rounds = 2000, threads = 256;
    std::vector<uint32_t> qcounts{1, 8, 66, 132, 264, 528};
    std::string mem = "device";
    bool json = false;
    for (int i = 1; i < argc; ++i) {
        std::string s = argv[i];
        if (s == "--mem" && i + 1 < argc) mem = argv[++i];
        else if ((s == "-n" || s == "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
        else if ((s == "-t" || s == "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
        else if ((s == "-q" || s == "--qps") && i + 1 < argc) qcounts = {uint32_t(std::atoi(argv[++i]))};
        else if (s == "--json") json = true;
        else {
            std::fprintf(stderr, "usage: %s [--mem device|host] [-n rounds] [-t threads] [-q qps] [--json]\n", argv[0]);
            return 2;
        }
    }
    if (mem != "device" && mem != "host") {
        std::fprintf(stderr, "gv_post_rate: --mem %s: expected device or host\n", mem.c_str());
        return 2;
    }
    if (threads < 1 || threads > 1024 || rounds < 1) {
        std::fprintf(stderr, "gv_post_rate: threads must be 1..1024 and rounds >= 1\n");
        return 2;
    }
    try {
        if (Context::gpu_count() == 0) throw NotSupported("no CUDA GPU visible");
        Context ctx(ContextOptions{Backend::Soft, 0});
        ProtectionDomain pd(ctx);
        MemoryKind mk = mem == "host" ? MemoryKind::Host : MemoryKind::Device;
        uint32_t maxq = 0;
        for (auto q : qcounts) maxq = std::max(maxq, q);
        std::vector<std::unique_ptr<CompletionQueue>> cqs;
        std::vector<std::unique_ptr<QueuePair>> qps;
        std::vector<dev::QpHandle> hs;
        uint64_t* uars;  // one dummy doorbell register per QP, in the queues' memory kind
        if (mk == MemoryKind::Host) CK(cudaHostAlloc(&uars, maxq * 64, cudaHostAllocMapped));
        else CK(cudaMalloc(&uars, maxq * 64));
        for (uint32_t q = 0; q < maxq; ++q) {
            cqs.push_back(std::make_unique<CompletionQueue>(ctx, CqOptions{64, mk}));
            QpOptions o;
            o.send_cq = o.recv_cq = cqs.back().get();
            o.sq_depth = std::max<uint32_t>(threads, 64);
            o.memory = mk;
            qps.push_back(std::make_unique<QueuePair>(pd, o));
            dev::QpHandle h = qps.back()->device_handle();
            h.backend = BackendKind::Mlx5;  // doorbell record + UAR write, no executor
            h.sys = 1;                      // what a NIC reading the queue needs
            h.uar = uars + q * 8;
            hs.push_back(h);
        }
        dev::QpHandle* d_hs;
        int* d_err;
        CK(cudaMalloc(&d_hs, hs.size() * sizeof(dev::QpHandle)));
        CK(cudaMemcpy(d_hs, hs.data(), hs.size() * sizeof(dev::QpHandle), cudaMemcpyHostToDevice));
        CK(cudaMalloc(&d_err, sizeof(int)));
        CK(cudaMemset(d_err, 0, sizeof(int)));
        cudaDeviceProp prop;
        CK(cudaGetDeviceProperties(&prop, 0));
        if (!json)
            std::printf("# gv_post_rate: %s, queues in %s memory, %u threads per QP (block), %u rounds\n"
                        "%8s %8s %16s %16s\n",
                        prop.name, mem.c_str(), threads, rounds, "#QPs", "scope", "WQEs/s[M]", "ns/WQE/QP");
        for (uint32_t nq : qcounts) {
            for (int scope = 0; scope < 2; ++scope) {
                cudaEvent_t e0, e1;
                cudaEventCreate(&e0);
                cudaEventCreate(&e1);
                float best = 1e30f;
                for (int rep = 0; rep < 3; ++rep) {
                    cudaEventRecord(e0);
                    if (scope == 0) post_kernel<Scope::Thread><<<nq, threads>>>(d_hs, rounds, 0x1000, d_err);
                    else post_kernel<Scope::Block><<<nq, threads>>>(d_hs, rounds, 0x1000, d_err);
                    cudaEventRecord(e1);
                    CK(cudaGetLastError());
                    CK(cudaEventSynchronize(e1));
                    float ms;
                    cudaEventElapsedTime(&ms, e0, e1);
                    if (rep) best = std::min(best, ms);
                }
                int err = 0;
                CK(cudaMemcpy(&err, d_err, sizeof(int), cudaMemcpyDeviceToHost));
                if (err) throw Error(std::to_string(err) + " posts failed");
                double wqes = double(rounds) * threads * nq;
                double rate = wqes / (best / 1e3);
                const char* sn = scope == 0 ? "thread" : "block";
                if (json)
                    std::printf("{\"bench\":\"post_rate\",\"mem\":\"%s\",\"qps\":%u,\"scope\":\"%s\",\"threads\":%u,"
                                "\"wqes_per_s\":%.0f}\n",
                                mem.c_str(), nq, sn, threads, rate);
                else
                    std::printf("%8u %8s %16.1f %16.1f\n", nq, sn, rate / 1e6, 1e9 / (rate / nq));
            }
        }
        return 0;
    } catch (const Error& e) {
        std::fprintf(stderr, "gv_post_rate: %s\n", e.what());
        return 1;
    }
}
