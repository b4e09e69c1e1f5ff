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
    gvtest::DevBuf buf{sizeof(DevErr)};
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
std::unique_ptr<gvtest::DevBuf> upload(const std::vector<T>& v) {
    auto b = std::make_unique<gvtest::DevBuf>(std::max<size_t>(16, v.size() * sizeof(T)));
    if (!v.empty()) h2d(b->p, v.data(), v.size() * sizeof(T));
    return b;
}

/// The posting counters of a QP (device or host queue memory).
gv::dev::QpCounters counters(const gv::dev::QpHandle& h) {
    gv::dev::QpCounters c{};
    cudaError_t e = cudaMemcpy(&c, h.q.ctr, sizeof c, cudaMemcpyDefault);
    if (e != cudaSuccess) ADD_FAILURE() << "reading QP counters: " << cudaGetErrorString(e);
    return c;
}

uint64_t addr_of(const gvtest::DevBuf& b, size_t off = 0) { return reinterpret_cast<uint64_t>(b.get() + off); }

/// n connected pairs of QPs (2i sends to 2i+1) on one context and protection domain, each
/// QP with its own CQ (send and receive).
struct Pairs {
    gv::Context ctx;
    gv::ProtectionDomain pd;
    std::vector<std::unique_ptr<gv::CompletionQueue>> cqs;
    std::vector<std::unique_ptr<gv::QueuePair>> qps;
    Pairs(uint32_t n, gv::QpOptions o = {}, uint32_t cq_depth = 1024) : ctx(gvtest::gpu_ctx()), pd(ctx) {
        for (uint32_t i = 0; i < 2 * n; ++i) {
            cqs.push_back(std::make_unique<gv::CompletionQueue>(ctx, gv::CqOptions{cq_depth}));
            o.send_cq = o.recv_cq = cqs.back().get();
            qps.push_back(std::make_unique<gv::QueuePair>(pd, o));
        }
        for (uint32_t i = 0; i < n; ++i) {
            qps[2 * i]->connect(qps[2 * i + 1]->endpoint());
            qps[2 * i + 1]->connect(qps[2 * i]->endpoint());
        }
    }
    std::unique_ptr<gvtest::DevBuf> sender_handles() const {
        std::vector<gv::dev::QpHandle> h;
        for (size_t i = 0; i < qps.size(); i += 2) h.push_back(qps[i]->device_handle());
        return upload(h);
    }
};


/// 32-bit data word w of round r (differs from every other round's word w).
GV_HOST_DEVICE uint32_t word_pat(uint32_t r, uint32_t w) { return r * 0x9E3779B1u ^ (w * 0x85EBCA77u + 0x1234567u); }

/// The consumer block of a producer/consumer kernel: for each round r = 1..rounds, thread 0
/// waits until done(r, *flag) (bounded: a timeout is reported, with the flag's last value
/// and the round, and ends the loop), every thread checks round r's data in dst[0, words)
/// (check_round), and thread 0 acknowledges with *ack = r: the producer waits for that
/// before it overwrites dst.
template <typename Done, typename A>
__device__ void consume_rounds(const uint64_t* flag, Done done, const uint32_t* dst, uint32_t words, uint32_t rounds,
                               A* ack, DevErr* err);

/// Every thread of the block checks its share of dst[0, words) against round r's pattern;
/// the first word that differs (stale data, or data of the wrong place) is reported to err.
__device__ void check_round(const uint32_t* dst, uint32_t words, uint32_t r, DevErr* err) {
    for (uint32_t w = threadIdx.x; w < words; w += blockDim.x) {
        uint32_t got = gv::atom::load_relaxed(dst + w);
        if (got != word_pat(r, w)) {
            dev_fail(err, __LINE__, got, word_pat(r, w));
            break;
        }
    }
}

template <typename Done, typename A>
__device__ void consume_rounds(const uint64_t* flag, Done done, const uint32_t* dst, uint32_t words, uint32_t rounds,
                               A* ack, DevErr* err) {
    __shared__ int stop;
    for (uint32_t r = 1; r <= rounds; ++r) {
        if (threadIdx.x == 0) {
            uint64_t v = 0;
            stop = !gvtest::spin_until(flag, [&](uint64_t x) { return done(r, x); }, kWait, &v);
            if (stop) dev_fail(err, __LINE__, (long long)v, r);
        }
        __syncthreads();
        if (stop) return;
        check_round(dst, words, r, err);
        __syncthreads();
        if (threadIdx.x == 0) gv::atom::store_release(ack, A(r));
    }
}

}  // namespace
