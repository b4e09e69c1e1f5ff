// The software device driven by CPU threads through the same queue layer kernels use.
#include <thread>

#include "test_util.hpp"

using namespace gv;
using gvtest::Pair;

namespace {
Context cpu_ctx() { return Context(ContextOptions{Backend::Soft, -1}); }
constexpr uint64_t kTimeout = 5'000'000'000ull;  // 5 s
}  // namespace

TEST(SoftDevice, WriteThenReadBackEveryByte) {
    Pair p(cpu_ctx());
    const size_t n = 1 << 20;
    std::vector<uint8_t> src(n), dst(n, 0), back(n, 0);
    gvtest::fill_random(src.data(), n, 1);
    MemoryRegion ms(p.pd, src.data(), n, kLocalWrite);
    MemoryRegion md(p.pd, dst.data(), n, kAllAccess);
    MemoryRegion mb(p.pd, back.data(), n, kLocalWrite);
    auto a = p.h(0);
    ASSERT_EQ(dev::write(a, src.data(), n, ms.lkey(), uint64_t(dst.data()), md.rkey()), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    Completion c[2];
    ASSERT_EQ(dev::wait_send(a, 1, c, kTimeout), Status::Ok);
    EXPECT_EQ(c[0].wqe_opcode, MLX5_OPCODE_RDMA_WRITE);
    EXPECT_EQ(gvtest::first_diff(src.data(), dst.data(), n), -1);
    ASSERT_EQ(dev::read(a, back.data(), n, mb.lkey(), uint64_t(dst.data()), md.rkey()), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    ASSERT_EQ(dev::wait_send(a, 1, c, kTimeout), Status::Ok);
    EXPECT_EQ(c[0].wqe_opcode, MLX5_OPCODE_RDMA_READ);
    EXPECT_EQ(gvtest::first_diff(src.data(), back.data(), n), -1);
}
