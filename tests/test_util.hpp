// Helpers shared by the tests: a connected loopback pair, random data, guard patterns.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
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

}  // namespace gvtest
