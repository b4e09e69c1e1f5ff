// CPU tests never initialise CUDA. A CUDA call in a test process that then forks makes every
// CUDA call of the child fail (cudaErrorInitializationError: CUDA cannot be used in a child
// forked after its parent initialised it), and on a GPU machine a CPU test that touches CUDA
// becomes a GPU test by accident. So every CPU test passes ContextOptions::gpu = -1, and a
// test that must ask CUDA something (ControlPathContext.MissingGpuIsAClearError) asks in a
// child process of its own.
//
// Guarded twice: NoCuda.CpuOnlyWorkMakesNoCudaCall runs the whole CPU data path, and
// no_cuda_guard.cpp, linked into every CPU test binary, fails any of their test processes
// (ctest runs one test per process) in which gpuverbs made a CUDA call (Context::cuda_used).
// In a build without CUDA no call can be made: the guard matters in the CUDA build, whose CPU
// tests run on every machine.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "gpuverbs/gpuverbs.hpp"
#include "gpuverbs/oob.hpp"
#include "gpuverbs/shared_buffer.hpp"
#include "proc_util.hpp"
#include "test_util.hpp"

using namespace gv;

namespace {

/// One WRITE from a to b on a CPU pair, checked; "" or what failed.
std::string write_once(gvtest::Pair& p, uint8_t* src, uint8_t* dst, size_t n) {
    MemoryRegion ms(p.pd, src, n, kLocalWrite), md(p.pd, dst, n, kAllAccess);
    const dev::QpHandle h = p.h(0);
    if (dev::write(h, src, uint32_t(n), ms.lkey(), uint64_t(dst), md.rkey()) != Status::Ok) return "post";
    if (dev::commit(h) != Status::Ok) return "commit";
    if (dev::wait_send(h, 1, nullptr, 5'000'000'000ull) != Status::Ok) return "completion";
    return gvtest::first_diff(src, dst, n) == -1 ? "" : "data";
}

}  // namespace

// The CPU data path end to end: contexts, memory registration (malloc'd, stack, vector and
// shared memory), QPs, posting, the out-of-band exchange, and a forked child doing the same.
// None of it may make a CUDA call, in the parent or in the child.
TEST(NoCuda, CpuOnlyWorkMakesNoCudaCall) {
    ASSERT_FALSE(Context::cuda_used()) << "an earlier test of this process made a CUDA call";
    gvtest::Pair p(gvtest::cpu_context());
    const size_t n = 4096;
    std::vector<uint8_t> src(n, 0x3C);
    auto* dst = static_cast<uint8_t*>(std::calloc(n, 1));
    EXPECT_EQ(write_once(p, src.data(), dst, n), "");
    std::free(dst);
    uint8_t stack_dst[256] = {};
    EXPECT_EQ(write_once(p, src.data(), stack_dst, sizeof stack_dst), "");
    SharedBuffer shared(p.ctx, n);
    EXPECT_EQ(write_once(p, src.data(), shared.as<uint8_t>(), n), "");
    oob::Listener lis = oob::Channel::listen(0);
    const uint16_t port = lis.port();
    pid_t child = gvtest::spawn([port] {
        oob::Channel ch = oob::Channel::connect("127.0.0.1", port, 5000);
        gvtest::Pair q(gvtest::cpu_context());
        std::vector<uint8_t> a(512, 1), b(512, 0);
        if (!write_once(q, a.data(), b.data(), a.size()).empty()) return 3;
        ch.exchange(Backend::Soft, {q.qp[0]->endpoint()}, {}, 5000);
        return Context::cuda_used() ? 4 : 0;
    });
    ASSERT_GT(child, 0);
    {
        oob::Channel ch = lis.accept(5000);
        ch.exchange(Backend::Soft, {p.qp[1]->endpoint()}, {}, 5000);
    }
    gvtest::expect_exit_ok(gvtest::wait_child(child, 15000));
    EXPECT_FALSE(Context::cuda_used()) << "the CPU data path made a CUDA call";
}
