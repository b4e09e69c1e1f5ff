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

// ---- a completion lost to a full CQ (gpu_plan_ahead_test.cu, gpu_warp_run_test.cu) -----------

// Every thread posts one signaled WRITE of len bytes into its own slot; one block commit;
// thread 0 waits for all T completions, which a CQ of 4 cannot hold.
__global__ void __launch_bounds__(512) overrun_kernel(gv::dev::QpHandle a, const uint8_t* src, uint8_t* dst, uint32_t len,
                                                      uint32_t lkey, uint32_t rkey, uint32_t* out) {
    const uint32_t t = threadIdx.x;
    gv::Status st = gv::dev::write<gv::Scope::Block>(a, src + size_t(t) * len, len, lkey, uint64_t(dst + size_t(t) * len), rkey,
                                         gv::kSignaled, kWait);
    if (st != gv::Status::Ok) atomicAdd(&out[2], 1u);
    // The commit executes the WQEs; the lost completion moves the QP to ERROR on the way, which
    // the commit reports (QpError) to every thread.
    const gv::Status cs = gv::dev::commit<gv::Scope::Block>(a);
    if (t == 0) out[3] = uint32_t(cs);
    if (t == 0) {
        uint32_t got = 0;
        out[0] = uint32_t(gv::dev::wait_send(a, blockDim.x, nullptr, kWait, &got));
        out[1] = got;
    }
}

/// A block of T threads posts one signaled WRITE of len bytes each into a CQ of 4 and commits at
/// block scope (overrun_kernel): the QP goes to ERROR at the first completion the CQ cannot
/// hold. Checks the statuses, that the WRITEs whose data landed are exactly the first depth + 1,
/// and that not one byte of the flushed ones landed; then calls after(pair) for checks of the
/// caller's own (the warp's runs: that the warp executed some of them).
template <typename After>
void run_overrun(uint32_t T, uint32_t len, After after) {
    SCOPED_TRACE(testing::Message() << "WRITEs of " << len << " bytes, " << T << " threads");
    gv::QpOptions o;
    o.sq_depth = 1024;
    gvtest::Pair p(gvtest::gpu_ctx(), o, gv::MemoryKind::Default, 4);
    const uint32_t depth = p.scq[0]->depth();
    const size_t n = size_t(T) * len;
    gvtest::DevBuf src(n), dst(n), out(16);
    ASSERT_TRUE(src.p && dst.p && out.p);
    gv::MemoryRegion ms(p.pd, src.p, n, gv::kLocalWrite), md(p.pd, dst.p, n, gv::kAllAccess);
    std::vector<uint8_t> hsrc(n);
    gvtest::fill_random(hsrc.data(), n, T + len);
    h2d(src.p, hsrc.data(), n);
    CUDA_OK(cudaMemset(dst.p, kGuard, n));
    CUDA_OK(cudaMemset(out.p, 0, 16));
    overrun_kernel<<<1, T>>>(p.h(0), src.get(), dst.get(), len, ms.lkey(), md.rkey(), out.get<uint32_t>());
    LAUNCH_OK();
    const auto res = d2h<uint32_t>(out.p, 4);
    EXPECT_EQ(res[2], 0u) << "posts that failed";
    EXPECT_EQ(gv::Status(res[3]), gv::Status::QpError) << "the commit's status";
    EXPECT_EQ(gv::Status(res[0]), gv::Status::CqOverrun) << "wait_send's status (polled " << res[1] << ")";
    EXPECT_LE(res[1], depth);
    EXPECT_EQ(p.qp[0]->state(), gv::QpState::Error);
    // The WRITEs whose data landed are a prefix: those completed (at most `depth`) and the one
    // whose completion found the CQ full. The next one was planned while that one was copied;
    // it, and everything after it, is flushed: not one byte of theirs may land.
    const auto got = d2h(dst.p, n);
    uint32_t landed = 0;
    while (landed < T && std::memcmp(&got[size_t(landed) * len], &hsrc[size_t(landed) * len], len) == 0) ++landed;
    EXPECT_GE(landed, res[1]);
    EXPECT_EQ(landed, depth + 1) << "WRITEs whose data landed, of " << T << " (CQ depth " << depth << ")";
    for (uint32_t w = landed; w < T; ++w)
        for (size_t i = 0; i < len; ++i)
            ASSERT_EQ(got[size_t(w) * len + i], kGuard) << "flushed WRITE " << w << " wrote byte " << i;
    after(p);
}

void run_overrun(uint32_t T, uint32_t len) {
    run_overrun(T, len, [](gvtest::Pair&) {});
}

}  // namespace
