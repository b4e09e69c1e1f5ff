// Shared by the mlx5 layer's tests (mlx5_conformance_test.cpp, mlx5_reader*_test.cpp): a
// seeded random source whose seed every failure prints, byte comparison with a hex dump,
// and a send ring of random garbage at WQEBB-aligned memory.
#pragma once

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace mlx5test {

struct Rng {
    uint64_t seed;
    std::mt19937_64 r;
    explicit Rng(uint64_t s) : seed(s), r(s) {}
    uint64_t u64() { return r(); }
    uint32_t u32() { return uint32_t(r()); }
    uint16_t u16() { return uint16_t(r()); }
    uint8_t u8() { return uint8_t(r()); }
    uint32_t below(uint32_t n) { return uint32_t(r() % n); }
    void fill(void* p, size_t n) { gvtest::fill_random(static_cast<uint8_t*>(p), n, r()); }
};

// Every random test's Rng is called `rng`; a failure names its seed and iteration.
#define TRACE_ITER(i)                 \
    SCOPED_TRACE(::testing::Message() \
                 << "seed=0x" << std::hex << rng.seed << std::dec << " iteration=" << (i))

inline std::string hex(const uint8_t* p, size_t n) {
    std::string s;
    char b[4];
    for (size_t i = 0; i < n; ++i) {
        std::snprintf(b, sizeof b, "%02x%s", p[i], (i % 4 == 3 && i + 1 < n) ? " " : "");
        s += b;
    }
    return s;
}

inline ::testing::AssertionResult same_bytes(const void* got, const void* want, size_t n) {
    const auto* g = static_cast<const uint8_t*>(got);
    const auto* w = static_cast<const uint8_t*>(want);
    long d = gvtest::first_diff(g, w, n);
    if (d < 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "first difference at byte " << d << "\n   got: " << hex(g, n) << "\n  want: " << hex(w, n);
}

/// A send ring of 2^log_bb WQEBBs, 64-byte aligned.
struct Ring {
    uint32_t log_bb;
    std::vector<uint8_t> storage;
    uint8_t* base;
    explicit Ring(uint32_t log) : log_bb(log), storage((64u << log) + 64) {
        base = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
    }
    size_t bytes() const { return size_t(64) << log_bb; }
    uint32_t bbs() const { return 1u << log_bb; }
};

/// Positions that start anywhere, often in the last two blocks of the ring (where a WQE of
/// two blocks wraps), and far beyond the first pass.
inline uint64_t pick_pos(Rng& rng, uint32_t ring_bb, int i) {
    uint64_t pass = rng.u64() % (1ull << 40) / ring_bb;
    uint64_t slot = (i % 2) ? ring_bb - 1 - rng.below(2) : rng.below(ring_bb);
    return pass * ring_bb + slot;
}

}  // namespace mlx5test
