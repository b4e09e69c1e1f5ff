// Helpers shared by the tests: a connected loopback pair, random data, guard patterns.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"

namespace gvtest {

/// Two connected RC QPs on one context, each with its own send and receive CQ.
struct Pair {
    gv::Context ctx;
    gv::ProtectionDomain pd;
    std::unique_ptr<gv::CompletionQueue> scq[2], rcq[2];
    std::unique_ptr<gv::QueuePair> qp[2];

    explicit Pair(gv::Context c, gv::QpOptions o = {}, gv::MemoryKind mem = gv::MemoryKind::Default,
                  uint32_t cq_depth = 4096, bool connect = true)
        : ctx(std::move(c)), pd(ctx) {
        for (int i = 0; i < 2; ++i) {
            scq[i] = std::make_unique<gv::CompletionQueue>(ctx, gv::CqOptions{cq_depth, mem});
            rcq[i] = std::make_unique<gv::CompletionQueue>(ctx, gv::CqOptions{cq_depth, mem});
            o.send_cq = scq[i].get();
            o.recv_cq = rcq[i].get();
            o.memory = mem;
            qp[i] = std::make_unique<gv::QueuePair>(pd, o);
        }
        if (connect) {
            qp[0]->connect(qp[1]->endpoint());
            qp[1]->connect(qp[0]->endpoint());
        }
    }
    gv::dev::QpHandle h(int i) const { return qp[i]->device_handle(); }
};

inline void fill_random(uint8_t* p, size_t n, uint64_t seed) {
    std::mt19937_64 r(seed);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = r();
        std::memcpy(p + i, &v, 8);
    }
    for (; i < n; ++i) p[i] = uint8_t(r());
}

/// Index of the first differing byte, or -1.
inline long first_diff(const uint8_t* a, const uint8_t* b, size_t n) {
    for (size_t i = 0; i < n; ++i)
        if (a[i] != b[i]) return long(i);
    return -1;
}

constexpr uint8_t kGuard = 0xA5;

/// WQEBBs of a WQE the device API builds with `nonzero` non-empty gather entries.
GV_HOST_DEVICE uint32_t bbs_sge(uint8_t opcode, uint32_t nonzero) {
    const bool send = opcode == MLX5_OPCODE_SEND || opcode == MLX5_OPCODE_SEND_IMM;
    return gv::mlx5::ds_to_bbs((send ? 1 : 2) + nonzero);
}
/// WQEBBs of an inline WRITE (rdma) or SEND of len bytes.
GV_HOST_DEVICE uint32_t bbs_inline(bool rdma, uint32_t len) {
    return gv::mlx5::ds_to_bbs((rdma ? 2 : 1) + gv::mlx5::inline_ds(len));
}

/// A context of the software device executing on CPU threads.
inline gv::Context cpu_context() {
    gv::ContextOptions o;
    o.backend = gv::Backend::Soft;
    o.gpu = -1;
    return gv::Context(o);
}

/// Index of the first byte of [p, p+n) that is not v, or -1.
inline long first_not(const uint8_t* p, size_t n, uint8_t v) {
    uint8_t block[4096];
    std::memset(block, v, sizeof block);
    for (size_t i = 0; i < n; i += sizeof block) {
        size_t k = n - i < sizeof block ? n - i : sizeof block;
        if (std::memcmp(p + i, block, k) == 0) continue;
        for (size_t j = 0; j < k; ++j)
            if (p[i + j] != v) return long(i + j);
    }
    return -1;
}

/// A host buffer registered as one region; every byte starts as `fill`.
struct HostBuf {
    std::vector<uint8_t> bytes;
    std::unique_ptr<gv::MemoryRegion> mr;
    HostBuf(const gv::ProtectionDomain& pd, size_t n, uint32_t access, uint8_t fill = kGuard)
        : bytes(n, fill), mr(std::make_unique<gv::MemoryRegion>(pd, bytes.data(), n, access)) {}
    uint8_t* data() { return bytes.data(); }
    uint8_t* at(size_t off) { return bytes.data() + off; }
    uint64_t addr(size_t off = 0) const { return reinterpret_cast<uint64_t>(bytes.data() + off); }
    size_t size() const { return bytes.size(); }
    uint32_t lkey() const { return mr->lkey(); }
    uint32_t rkey() const { return mr->rkey(); }
};

/// Send-queue WQEBBs reserved so far on a QP (the position its next WQE gets when one
/// thread posts).
inline unsigned long long sq_pos(const gv::dev::QpHandle& h) {
    return __atomic_load_n(&h.q.ctr->sq_reserved, __ATOMIC_ACQUIRE);
}

/// The queue counters of a software-device QP, for failure messages.
inline std::string qp_debug(const gv::dev::QpHandle& h) {
    auto ld = [](const unsigned long long* p) {
        return std::to_string(__atomic_load_n(p, __ATOMIC_ACQUIRE));
    };
    std::string s = "sq reserved " + ld(&h.q.ctr->sq_reserved) + " ready " + ld(&h.q.ctr->sq_ready) +
                    " retired " + ld(&h.q.ctr->sq_retired) + ", dbrec " +
                    std::to_string(gv::mlx5::read_sq_dbrec(h.q.dbrec, true));
    if (h.soft.ctx && !h.soft.host_doorbell)  // the device's state is host memory
        s += ", executed to " + ld(&h.soft.ctx->sq_ci) + ", lock " +
             std::to_string(__atomic_load_n(&h.soft.ctx->lock, __ATOMIC_ACQUIRE)) + ", state " +
             std::to_string(__atomic_load_n(&h.soft.ctx->state, __ATOMIC_ACQUIRE));
    return s;
}

/// Polls up to n completions from a CQ without waiting, driving qp meanwhile.
inline std::vector<gv::Completion> poll_some(const gv::dev::QpHandle& qp, const gv::dev::CqHandle& cq,
                                             uint32_t n) {
    std::vector<gv::Completion> out(n);
    gv::dev::drive(qp);
    out.resize(gv::dev::poll_cq(cq, out.data(), n));
    return out;
}

/// From host code, every posting, commit, poll and wait call on h is refused without touching
/// its queues: InvalidArgument (poll_cq: 0 completions, get_position: nothing free, cq_overrun:
/// false). For a handle whose queues a CPU thread must not touch (GPU memory).
inline void expect_host_calls_refused(const gv::dev::QpHandle& h) {
    using gv::Status;
    namespace dev = gv::dev;
    uint8_t buf[64] = {};
    uint64_t old = 0;
    const gv::Sge sg{reinterpret_cast<uint64_t>(buf), sizeof buf, 1};
    const uint64_t ra = 0x10000, ms = 1'000'000;  // a remote address, a 1 ms timeout
#define GVTEST_REFUSED(call) EXPECT_EQ((call), Status::InvalidArgument) << #call
    GVTEST_REFUSED(dev::write(h, buf, 64, 1, ra, 1));
    GVTEST_REFUSED(dev::write_imm(h, buf, 64, 1, ra, 1, 7));
    GVTEST_REFUSED(dev::read(h, buf, 64, 1, ra, 1));
    GVTEST_REFUSED(dev::send(h, buf, 64, 1));
    GVTEST_REFUSED(dev::send_imm(h, buf, 64, 1, 7));
    GVTEST_REFUSED(dev::write_inline(h, buf, 8, ra, 1));
    GVTEST_REFUSED(dev::send_inline(h, buf, 8));
    GVTEST_REFUSED(dev::fetch_add(h, &old, 1, ra, 1, 1));
    GVTEST_REFUSED(dev::compare_swap(h, &old, 1, ra, 1, 0, 1));
    GVTEST_REFUSED(dev::put_signal(h, buf, 64, 1, ra, 1, &old, 1, ra + 64, 1, 1));
    GVTEST_REFUSED(dev::nop(h));
    GVTEST_REFUSED(dev::post_sge(h, MLX5_OPCODE_RDMA_WRITE, &sg, 1, ra, 1, 0, gv::kSignaled));
    GVTEST_REFUSED(dev::post_inline(h, MLX5_OPCODE_SEND, buf, 8, 0, 0, 0, gv::kSignaled));
    GVTEST_REFUSED(dev::post_atomic(h, MLX5_OPCODE_ATOMIC_FA, &old, 1, ra, 1, 1, 0));
    GVTEST_REFUSED(dev::write(h, buf, 64, 1, ra, 1, gv::kSignaled, ms));  // bounded form too
    GVTEST_REFUSED(dev::recv(h, buf, 64, 1));
    GVTEST_REFUSED(dev::recv(h, nullptr, 0, 0, ms));
    GVTEST_REFUSED(dev::post_recv(h, &sg, 1));
    GVTEST_REFUSED(dev::commit(h));
    GVTEST_REFUSED(dev::commit_weak(h, 1));
    GVTEST_REFUSED(dev::commit_weak(h, 0));
    EXPECT_EQ(dev::get_position(h).free, 0u);
    GVTEST_REFUSED(dev::write_weak(h, 0, buf, 64, 1, ra, 1));
    GVTEST_REFUSED(dev::read_weak(h, 0, buf, 64, 1, ra, 1));
    GVTEST_REFUSED(dev::send_weak(h, 0, buf, 64, 1));
    GVTEST_REFUSED(dev::write_inline_weak(h, 0, buf, 8, ra, 1));
    GVTEST_REFUSED(dev::fetch_add_weak(h, 0, &old, 1, ra, 1, 1));
    gv::Completion c[4];
    GVTEST_REFUSED(dev::wait_send(h, 1, c, ms));
    GVTEST_REFUSED(dev::wait_recv(h, 1, c, ms));
    GVTEST_REFUSED(dev::wait_cq(h, h.scq, 1, nullptr, ms));
#undef GVTEST_REFUSED
    EXPECT_EQ(dev::poll_cq(h.scq, c, 4), 0u);
    EXPECT_EQ(dev::poll_cq(h.rcq, c, 4), 0u);
    EXPECT_FALSE(dev::cq_overrun(h.scq));
}

}  // namespace gvtest
