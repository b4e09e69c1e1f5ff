// Shared by the software-device tests driven by CPU threads (soft_device_test.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace {
gv::Context cpu_ctx() { return gvtest::cpu_context(); }
constexpr uint64_t kTimeout = 5'000'000'000ull;  // 5 s
constexpr uint64_t kLongTimeout = 30'000'000'000ull;

uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/// Waits for n completions on the QP's send CQ and expects every one to succeed.
void wait_ok(const gv::dev::QpHandle& h, uint32_t n, gv::Completion* out = nullptr) {
    std::vector<gv::Completion> tmp(n);
    uint32_t got = 0;
    gv::Status st = gv::dev::wait_send(h, n, out ? out : tmp.data(), kTimeout, &got);
    ASSERT_EQ(st, gv::Status::Ok) << gv::status_name(st) << ", " << got << " of " << n;
}
}  // namespace
