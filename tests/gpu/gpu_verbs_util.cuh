// Shared by the device verbs tests (gpu_verbs_*test.cu): kernels report failures through a
// DevErr record; host helpers.
#pragma once

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>
#include "gpu/gpu_util.cuh"

using namespace gv;
using gvtest::DevBuf;

namespace {

constexpr uint64_t kUs = 1'000ull;
constexpr uint64_t kMs = 1'000'000ull;
constexpr uint64_t kWait = 5'000 * kMs;  // bound of every wait inside a kernel
constexpr uint8_t kGuard = gvtest::kGuard;

// ---- failures reported by kernels -------------------------------------------------------

struct DevErr {
    int count;
    int line;
    long long got, want;
};

__device__ void dev_fail(DevErr* e, int line, long long got, long long want) {
    if (atomicAdd(&e->count, 1) == 0) {
        e->line = line;
        e->got = got;
        e->want = want;
    }
}

// Device-side checks; the kernel's DevErr* is named `err`. Enums and pointers compare as
// integers.
#define DCHECK_EQ(x, y)                                                  \
    do {                                                                 \
        long long dx_ = (long long)(x), dy_ = (long long)(y);            \
        if (dx_ != dy_) dev_fail(err, __LINE__, dx_, dy_);               \
    } while (0)
#define DCHECK(c)                                                        \
    do {                                                                 \
        if (!(c)) dev_fail(err, __LINE__, 0, 1);                         \
    } while (0)

/// Host side of a DevErr: zeroed on creation, checked after the kernel.
struct Err {
    DevBuf buf{sizeof(DevErr)};
    Err() { cudaMemset(buf.p, 0, sizeof(DevErr)); }
    DevErr* get() const { return buf.get<DevErr>(); }
    void expect_none(const std::string& what = "") const {
        DevErr e{};
        ASSERT_EQ(cudaMemcpy(&e, buf.p, sizeof e, cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_EQ(e.count, 0) << what << ": " << e.count << " device checks failed, the first at "
                              << __FILE__ << ":" << e.line << " (got " << e.got << ", expected " << e.want
                              << ")";
    }
};

#define LAUNCH_OK()                            \
    do {                                       \
        CUDA_OK(cudaGetLastError());           \
        CUDA_OK(cudaDeviceSynchronize());      \
    } while (0)

// ---- host helpers ---------------------------------------------------------------------------

template <typename T = uint8_t>
std::vector<T> d2h(const void* p, size_t count) {
    std::vector<T> v(count);
    if (count) {
        cudaError_t e = cudaMemcpy(v.data(), p, count * sizeof(T), cudaMemcpyDefault);
        if (e != cudaSuccess) ADD_FAILURE() << "cudaMemcpy to host: " << cudaGetErrorString(e);
    }
    return v;
}

void h2d(void* d, const void* s, size_t n) {
    cudaError_t e = cudaMemcpy(d, s, n, cudaMemcpyDefault);
    if (e != cudaSuccess) ADD_FAILURE() << "cudaMemcpy to device: " << cudaGetErrorString(e);
}

template <typename T>
std::unique_ptr<DevBuf> upload(const std::vector<T>& v) {
    auto b = std::make_unique<DevBuf>(std::max<size_t>(16, v.size() * sizeof(T)));
    if (!v.empty()) h2d(b->p, v.data(), v.size() * sizeof(T));
    return b;
}

/// The posting counters of a QP (device or host queue memory).
dev::QpCounters counters(const dev::QpHandle& h) {
    dev::QpCounters c{};
    cudaError_t e = cudaMemcpy(&c, h.q.ctr, sizeof c, cudaMemcpyDefault);
    if (e != cudaSuccess) ADD_FAILURE() << "reading QP counters: " << cudaGetErrorString(e);
    return c;
}

uint64_t addr_of(const DevBuf& b, size_t off = 0) { return reinterpret_cast<uint64_t>(b.get() + off); }

long first_not(const uint8_t* p, size_t n, uint8_t v) {
    for (size_t i = 0; i < n; ++i)
        if (p[i] != v) return long(i);
    return -1;
}

/// n connected pairs of QPs (2i sends to 2i+1) on one context and protection domain, each
/// QP with its own CQ (send and receive).
struct Pairs {
    Context ctx;
    ProtectionDomain pd;
    std::vector<std::unique_ptr<CompletionQueue>> cqs;
    std::vector<std::unique_ptr<QueuePair>> qps;
    Pairs(uint32_t n, QpOptions o = {}, uint32_t cq_depth = 1024) : ctx(gvtest::gpu_ctx()), pd(ctx) {
        for (uint32_t i = 0; i < 2 * n; ++i) {
            cqs.push_back(std::make_unique<CompletionQueue>(ctx, CqOptions{cq_depth}));
            o.send_cq = o.recv_cq = cqs.back().get();
            qps.push_back(std::make_unique<QueuePair>(pd, o));
        }
        for (uint32_t i = 0; i < n; ++i) {
            qps[2 * i]->connect(qps[2 * i + 1]->endpoint());
            qps[2 * i + 1]->connect(qps[2 * i]->endpoint());
        }
    }
    std::unique_ptr<DevBuf> sender_handles() const {
        std::vector<dev::QpHandle> h;
        for (size_t i = 0; i < qps.size(); i += 2) h.push_back(qps[i]->device_handle());
        return upload(h);
    }
};

uint32_t bbs_sge(uint8_t opcode, uint32_t nonzero_entries) {
    bool send = opcode == MLX5_OPCODE_SEND || opcode == MLX5_OPCODE_SEND_IMM;
    return mlx5::ds_to_bbs((send ? 1 : 2) + nonzero_entries);
}
GV_HOST_DEVICE uint32_t bbs_inline(bool rdma, uint32_t len) {
    return mlx5::ds_to_bbs((rdma ? 2 : 1) + mlx5::inline_ds(len));
}

/// 32-bit data word w of round r (differs from every other round's word w).
GV_HOST_DEVICE uint32_t word_pat(uint32_t r, uint32_t w) { return r * 0x9E3779B1u ^ (w * 0x85EBCA77u + 0x1234567u); }

}  // namespace
