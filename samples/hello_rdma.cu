// hello_rdma: the three steps of an RDMA application in one process, on the software RDMA
// device executing on GPU 0. One block writes its chunks to the peer's buffer (one WRITE
// per thread, one block-scope doorbell), then reads them back; the host checks every byte.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli.hpp"
#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"

__global__ void put_get(gv::dev::QpHandle qp, uint8_t* src, uint32_t src_lkey, uint8_t* back, uint32_t back_lkey,
                        gv::RemoteBuffer dst, uint32_t chunk, int* status) {
    const uint64_t off = uint64_t(threadIdx.x) * chunk;
    // Step 3: every thread posts its WRITE, the block rings the doorbell once.
    if (gv::dev::write(qp, src + off, chunk, src_lkey, dst.addr + off, dst.rkey) != gv::Status::Ok) *status = 1;
    gv::dev::commit<gv::Scope::Block>(qp);
    if (threadIdx.x == 0 && gv::dev::wait_send(qp, blockDim.x, nullptr, 5'000'000'000ull) != gv::Status::Ok)
        *status = 2;
    __syncthreads();
    // And back: one READ per thread.
    if (gv::dev::read(qp, back + off, chunk, back_lkey, dst.addr + off, dst.rkey) != gv::Status::Ok) *status = 3;
    gv::dev::commit<gv::Scope::Block>(qp);
    if (threadIdx.x == 0 && gv::dev::wait_send(qp, blockDim.x, nullptr, 5'000'000'000ull) != gv::Status::Ok)
        *status = 4;
}

const char* const kUsage =
    "usage: hello_rdma\n"
    "The three steps of an RDMA application in one process, on the software RDMA device\n"
    "executing on GPU 0: one block WRITEs its chunks to the peer's buffer and READs them back;\n"
    "every byte is checked. Needs a CUDA GPU (tools/gv_demo --gpu -1 runs on CPU threads).\n"
    "  --help   this text\n"
    "Exit status: 0 verified, 1 failed (the reason on stderr), 2 bad usage.\n";

int run() {
    {
        std::string no_gpu = gvcli::no_gpu_reason();
        if (no_gpu.empty() && gv::Context::gpu_count() == 0) no_gpu = "no CUDA GPU visible";
        if (!no_gpu.empty())
            throw gv::NotSupported(no_gpu + ": hello_rdma needs a CUDA GPU (tools/gv_demo --gpu -1 runs on CPU threads)");
        // Step 1: local configuration.
        gv::Context ctx(gv::ContextOptions{gv::Backend::Soft, 0});
        gv::ProtectionDomain pd(ctx);
        gv::CompletionQueue scq_a(ctx), rcq_a(ctx), scq_b(ctx), rcq_b(ctx);
        gv::QueuePair a(pd, gv::QpOptions{&scq_a, &rcq_a});
        gv::QueuePair b(pd, gv::QpOptions{&scq_b, &rcq_b});
        const uint32_t threads = 256, chunk = 4096;
        const size_t n = size_t(threads) * chunk;
        uint8_t *src, *dst, *back;
        int* status;
        cudaMalloc(&src, n);
        cudaMalloc(&dst, n);
        cudaMalloc(&back, n);
        cudaMalloc(&status, sizeof(int));
        cudaMemset(status, 0, sizeof(int));
        std::vector<uint8_t> h(n), out(n);
        for (size_t i = 0; i < n; ++i) h[i] = uint8_t(i * 7 + 3);
        cudaMemcpy(src, h.data(), n, cudaMemcpyHostToDevice);
        gv::MemoryRegion src_mr(pd, src, n, gv::kLocalWrite);
        gv::MemoryRegion back_mr(pd, back, n, gv::kLocalWrite);
        gv::MemoryRegion dst_mr(pd, dst, n, gv::kLocalWrite | gv::kRemoteWrite | gv::kRemoteRead);
        // Step 2: exchange (in one process the endpoints are handed over directly).
        a.connect(b.endpoint());
        b.connect(a.endpoint());
        // Step 3: the data path on the GPU.
        put_get<<<1, threads>>>(a.device_handle(), src, src_mr.lkey(), back, back_mr.lkey(), dst_mr.remote(), chunk,
                                status);
        cudaError_t e = cudaDeviceSynchronize();
        int st = 0;
        cudaMemcpy(&st, status, sizeof st, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess || st)
            throw gv::Error(std::string("the kernel failed (") + cudaGetErrorString(e) + ", status " +
                            std::to_string(st) + ")");
        for (uint8_t* buf : {dst, back}) {
            cudaMemcpy(out.data(), buf, n, cudaMemcpyDeviceToHost);
            for (size_t i = 0; i < n; ++i)
                if (out[i] != h[i])
                    throw gv::Error(gvcli::format("mismatch in %s at offset %zu: expected 0x%02x, got 0x%02x",
                                                  buf == dst ? "WRITE" : "READ", i, h[i], out[i]));
        }
        std::printf("Validation successful: %u WRITEs and %u READs of %u bytes\n", threads, threads, chunk);
        cudaFree(src);
        cudaFree(dst);
        cudaFree(back);
        cudaFree(status);
        return 0;
    }
}

int main(int argc, char** argv) {
    return gvcli::run(argc, argv, kUsage, [](gvcli::Args& args) {
        while (args.next()) args.unknown();  // no options but --help
        return run();
    });
}
