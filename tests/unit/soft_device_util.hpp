// Shared by the software-device data-path tests (soft_device_test.cpp, soft_device_verbs_test.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <thread>
#include "test_util.hpp"

using namespace gv;
using gvtest::HostBuf;
using gvtest::Pair;

namespace {
Context cpu_ctx() { return gvtest::cpu_context(); }
constexpr uint64_t kTimeout = 5'000'000'000ull;  // 5 s
constexpr uint64_t kLongTimeout = 30'000'000'000ull;

uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/// WQEBBs of a WQE the device API builds.
uint32_t bbs_sge(uint8_t opcode, uint32_t nsge) {
    bool rdma = opcode != MLX5_OPCODE_SEND && opcode != MLX5_OPCODE_SEND_IMM;
    return mlx5::ds_to_bbs((rdma ? 2 : 1) + nsge);
}
uint32_t bbs_inline(bool rdma, uint32_t len) {
    return mlx5::ds_to_bbs((rdma ? 2 : 1) + mlx5::inline_ds(len));
}

/// Waits for n completions on the QP's send CQ and expects every one to succeed.
void wait_ok(const dev::QpHandle& h, uint32_t n, Completion* out = nullptr) {
    std::vector<Completion> tmp(n);
    uint32_t got = 0;
    Status st = dev::wait_send(h, n, out ? out : tmp.data(), kTimeout, &got);
    ASSERT_EQ(st, Status::Ok) << status_name(st) << ", " << got << " of " << n;
}
}  // namespace
