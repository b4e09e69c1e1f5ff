// Linked into every CPU test binary (gv_unit_tests, gv_traffic_tests, gv_verbs_unit_tests): a
// global environment that fails the test process when gpuverbs made a CUDA call in it
// (Context::cuda_used). CPU tests pass ContextOptions::gpu = -1 and ask CUDA nothing in the
// test process; tests/unit/no_cuda_test.cpp says why.
#include <gtest/gtest.h>

#include "gpuverbs/context.hpp"

namespace {

class NoCudaInCpuTests : public ::testing::Environment {
public:
    void TearDown() override {
        EXPECT_FALSE(gv::Context::cuda_used())
            << "a CPU test made a CUDA call (through gpuverbs): CPU tests pass ContextOptions::gpu = -1 "
               "and ask CUDA nothing in the test process (do it in a child: see "
               "ControlPathContext.MissingGpuIsAClearError)";
    }
};

::testing::Environment* const kNoCuda = ::testing::AddGlobalTestEnvironment(new NoCudaInCpuTests);

}  // namespace
