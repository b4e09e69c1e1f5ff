// Execution groups: the threads that make one collective call together (a CPU or CUDA
// thread, the active lanes of a warp, a block), with a leader, a barrier and a broadcast.
// Used by the doorbell (the group that commits) and by the software device's executor.
#pragma once

#include "gpuverbs/config.hpp"
#include "gpuverbs/device/handles.hpp"

namespace gv::detail {

// ---- execution groups ---------------------------------------------------------------

/// One thread executes alone (a CPU thread, or a CUDA thread that commits by itself).
struct ThreadGroup {
    GV_HOST_DEVICE uint32_t rank() const { return 0; }
    GV_HOST_DEVICE uint32_t size() const { return 1; }
    GV_HOST_DEVICE bool leader() const { return true; }
    GV_HOST_DEVICE void sync() const {}
    GV_HOST_DEVICE uint64_t bcast(uint64_t v) const { return v; }
};

#if defined(__CUDACC__)
/// The active lanes of a warp execute together; the lowest active lane leads.
struct WarpGroup {
    unsigned mask;
    uint32_t r, n, lead;
    __device__ WarpGroup() {
        mask = __activemask();
        uint32_t lane = threadIdx.x & 31;  // lanes are numbered within the warp
        asm("mov.u32 %0, %%laneid;" : "=r"(lane));
        r = __popc(mask & ((1u << lane) - 1));
        n = __popc(mask);
        lead = __ffs(mask) - 1;
    }
    __device__ uint32_t rank() const { return r; }
    __device__ uint32_t size() const { return n; }
    __device__ bool leader() const { return r == 0; }
    __device__ void sync() const { __syncwarp(mask); }
    __device__ uint64_t bcast(uint64_t v) const {
        // __syncwarp orders the leader's earlier memory writes (the plan) before the
        // other lanes' reads; the shuffle alone does not.
        __syncwarp(mask);
        return __shfl_sync(mask, (unsigned long long)v, lead);
    }
};

/// Every thread of the block executes together; thread 0 leads.
struct BlockGroup {
    __device__ uint32_t rank() const {
        return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    }
    __device__ uint32_t size() const { return blockDim.x * blockDim.y * blockDim.z; }
    __device__ bool leader() const { return rank() == 0; }
    __device__ void sync() const { __syncthreads(); }
    __device__ uint64_t bcast(uint64_t v) const {
        __shared__ unsigned long long slot;
        __syncthreads();  // earlier readers of slot are done
        if (leader()) slot = v;
        __syncthreads();  // also orders the leader's plan writes before everyone's reads
        return slot;
    }
};
#endif


/// The group type of a scope: what the threads that make a collective call at scope S
/// are (a ThreadGroup wherever CUDA groups do not exist).
template <Scope S>
struct ScopeGroup {
    using type = ThreadGroup;
};
#if defined(__CUDACC__)
template <>
struct ScopeGroup<Scope::Warp> {
    using type = WarpGroup;
};
template <>
struct ScopeGroup<Scope::Block> {
    using type = BlockGroup;
};
#endif

}  // namespace gv::detail
