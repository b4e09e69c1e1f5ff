// The GPU side of the traffic suite's environment: buffers in GPU memory, and a kernel that
// runs a script (one block per lane, every thread of the block calling run_lane: the leader
// posts, waits and polls at thread scope, the block commits at block scope, fills and checks
// together).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "traffic/traffic_env.hpp"

namespace gvtest::traffic {

/// cudaMalloc'd memory of the context's GPU (GPU 0).
class GpuMemory : public Memory {
public:
    const char* name() const override { return "GPU memory"; }
    bool host() const override { return false; }
    void* alloc(size_t bytes) override {
        void* p = nullptr;
        return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
    }
    void release(void* p) override { cudaFree(p); }
    void fill(void* p, uint8_t v, size_t n) override { check(cudaMemset(p, v, n), "cudaMemset"); }
    void upload(void* dst, const void* src, size_t n) override {
        check(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "cudaMemcpy to the GPU");
    }
    void download(void* dst, const void* src, size_t n) override {
        check(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), "cudaMemcpy from the GPU");
    }

private:
    static void check(cudaError_t e, const char* what) {
        if (e != cudaSuccess) ADD_FAILURE() << what << ": " << cudaGetErrorString(e);
    }
};

/// The threads of one block run a lane together; thread 0 leads.
struct GpuBlockLane {
    __device__ bool leader() const { return threadIdx.x == 0; }
    __device__ uint32_t rank() const { return threadIdx.x; }
    __device__ uint32_t size() const { return blockDim.x; }
    __device__ void sync() const { __syncthreads(); }
    __device__ uint64_t bcast(uint64_t v) const {
        __shared__ unsigned long long slot;
        __syncthreads();  // earlier readers of slot are done
        if (leader()) slot = v;
        __syncthreads();
        return slot;
    }
    __device__ gv::Status commit(const gv::dev::QpHandle& qp) const { return gv::dev::commit<gv::Scope::Block>(qp); }
    __device__ StepResult reduce_check(uint64_t bad, uint64_t first) const {
        __shared__ unsigned long long sbad, sfirst;
        __syncthreads();
        if (leader()) {
            sbad = 0;
            sfirst = ~0ull;
        }
        __syncthreads();
        if (bad) {
            atomicAdd(&sbad, (unsigned long long)bad);
            atomicMin(&sfirst, (unsigned long long)first);
        }
        __syncthreads();
        return StepResult{gv::Status::Ok, uint32_t(sbad), sfirst, 0};
    }
};

__global__ void traffic_lanes_kernel(RunView v) { run_lane(v, blockIdx.x, GpuBlockLane{}); }

/// A GPU kernel: one block of kThreads threads per lane, all lanes at once.
class GpuKernel : public Initiator {
public:
    static constexpr uint32_t kThreads = 128;
    const char* name() const override { return "a GPU kernel (one block of 128 threads per lane)"; }

    void run(RunData& d) override {
        Dev qps(d.qps), steps(d.steps), begin(d.lane_begin), sges(d.sges), cqes(d.cqes), results(d.results),
            stopped(d.stopped);
        uint32_t zero = 0;
        Dev abort(&zero, 1);
        for (const Dev* b : {&qps, &steps, &begin, &sges, &cqes, &results, &stopped, &abort})
            if (!b->error.empty()) {
                d.error = b->error;
                return;
            }
        RunView v{qps.as<gv::dev::QpHandle>(), steps.as<Step>(), begin.as<uint32_t>(), sges.as<gv::Sge>(),
                  cqes.as<gv::Completion>(), results.as<StepResult>(), stopped.as<int32_t>(), abort.as<uint32_t>(), 0};
        traffic_lanes_kernel<<<d.lanes(), kThreads>>>(v);
        cudaError_t e = cudaGetLastError();
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
        if (e != cudaSuccess) {
            d.error = std::string("the script's kernel (") + std::to_string(d.lanes()) + " blocks of " +
                      std::to_string(kThreads) + " threads): " + cudaGetErrorString(e);
            return;
        }
        for (auto [dst, src] : {std::pair<void*, const Dev*>{d.cqes.data(), &cqes}, {d.results.data(), &results},
                                {d.stopped.data(), &stopped}})
            if (cudaMemcpy(dst, src->p, src->n, cudaMemcpyDeviceToHost) != cudaSuccess) {
                d.error = "copying the script's results from the GPU";
                return;
            }
    }

private:
    /// A device copy of a host vector.
    struct Dev {
        void* p = nullptr;
        size_t n = 0;
        std::string error;
        template <typename T>
        explicit Dev(const std::vector<T>& v) : Dev(v.data(), v.size()) {}
        template <typename T>
        Dev(const T* data, size_t count) : n(count * sizeof(T)) {
            cudaError_t e = cudaMalloc(&p, n ? n : 1);
            if (e == cudaSuccess && n) e = cudaMemcpy(p, data, n, cudaMemcpyHostToDevice);
            if (e != cudaSuccess) error = "copying the script to the GPU: " + std::string(cudaGetErrorString(e));
        }
        ~Dev() { cudaFree(p); }
        Dev(const Dev&) = delete;
        Dev& operator=(const Dev&) = delete;
        template <typename T>
        T* as() const {
            return static_cast<T*>(p);
        }
    };
};

}  // namespace gvtest::traffic
