// Backend::Auto as a plain function of what is present (core/backend.hpp: choose_backend),
// and a Context opened with it on this machine.
#include <gtest/gtest.h>

#include "core/backend.hpp"
#include "gpuverbs/gpuverbs.hpp"

using gv::Backend;
using gv::detail::BackendChoice;
using gv::detail::BackendFacts;
using gv::detail::choose_backend;

namespace {

BackendFacts facts(std::vector<std::string> names, std::vector<bool> mlx5, bool gpu_queues, bool verbs) {
    BackendFacts f;
    f.devices = std::move(names);
    f.is_mlx5 = std::move(mlx5);
    f.mlx5_gpu_queues = gpu_queues;
    f.mlx5_why_not = gpu_queues ? "" : "the UAR cannot be mapped for the GPU";
    f.verbs_backend = verbs;
    return f;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(BackendSelect, NoDeviceGivesTheSoftwareDevice) {
    for (bool verbs : {false, true}) {
        BackendChoice c = choose_backend(facts({}, {}, true, verbs), "");
        EXPECT_EQ(c.backend, Backend::Soft);
        EXPECT_EQ(c.device, "");
        EXPECT_TRUE(has(c.reason, "no RDMA device present")) << c.reason;
    }
}

TEST(BackendSelect, ConnectXWithGpuQueuesGivesMlx5) {
    BackendChoice c = choose_backend(facts({"mlx5_0"}, {true}, true, true), "");
    EXPECT_EQ(c.backend, Backend::Mlx5);
    EXPECT_EQ(c.device, "mlx5_0");
    // Without GPU queues: verbs through the proxy, saying why not mlx5.
    c = choose_backend(facts({"mlx5_0"}, {true}, false, true), "");
    EXPECT_EQ(c.backend, Backend::Verbs);
    EXPECT_EQ(c.device, "mlx5_0");
    EXPECT_TRUE(has(c.reason, "the UAR cannot be mapped for the GPU")) << c.reason;
    // And without a verbs backend in the build: the software device, with both reasons.
    c = choose_backend(facts({"mlx5_0"}, {true}, false, false), "");
    EXPECT_EQ(c.backend, Backend::Soft);
    EXPECT_TRUE(has(c.reason, "no verbs backend")) << c.reason;
}

TEST(BackendSelect, OtherDevicesGiveVerbs) {
    BackendChoice c = choose_backend(facts({"rxe0"}, {false}, true, true), "");
    EXPECT_EQ(c.backend, Backend::Verbs);
    EXPECT_EQ(c.device, "rxe0");
    EXPECT_TRUE(has(c.reason, "rxe0 is not a ConnectX")) << c.reason;
    c = choose_backend(facts({"rxe0"}, {false}, true, false), "");
    EXPECT_EQ(c.backend, Backend::Soft);
}

TEST(BackendSelect, PrefersTheFirstConnectXUnlessADeviceIsNamed) {
    BackendFacts f = facts({"rxe0", "mlx5_1", "mlx5_2"}, {false, true, true}, true, true);
    BackendChoice c = choose_backend(f, "");
    EXPECT_EQ(c.backend, Backend::Mlx5);
    EXPECT_EQ(c.device, "mlx5_1");
    c = choose_backend(f, "rxe0");
    EXPECT_EQ(c.backend, Backend::Verbs);
    EXPECT_EQ(c.device, "rxe0");
    c = choose_backend(f, "mlx5_2");
    EXPECT_EQ(c.backend, Backend::Mlx5);
    EXPECT_EQ(c.device, "mlx5_2");
}

TEST(BackendSelect, UnknownDeviceNameIsAnErrorListingWhatExists) {
    BackendFacts f = facts({"rxe0", "mlx5_1"}, {false, true}, false, true);
    try {
        choose_backend(f, "mlx5_9");
        FAIL() << "no error for a device that does not exist";
    } catch (const gv::InvalidUsage& e) {
        EXPECT_TRUE(has(e.what(), "'mlx5_9'")) << e.what();
        EXPECT_TRUE(has(e.what(), "rxe0, mlx5_1 (mlx5)")) << e.what();
    }
    EXPECT_THROW(choose_backend(facts({}, {}, false, false), "rxe0"), gv::InvalidUsage);
    EXPECT_THROW(choose_backend(facts({"a"}, {}, false, false), ""), gv::InvalidUsage);  // facts disagree
}

TEST(BackendSelect, ContextSaysWhatItPickedAndWhy) {
    gv::ContextOptions o;
    o.gpu = -1;  // CPU threads: no CUDA in this test
    gv::Context ctx(o);
    BackendChoice expect = choose_backend(gv::detail::probe_backend_facts(), "");
    EXPECT_EQ(ctx.backend(), expect.backend);
    EXPECT_TRUE(has(ctx.selection(), "Backend::Auto chose")) << ctx.selection();
    EXPECT_TRUE(has(ctx.selection(), expect.reason)) << ctx.selection();
    gv::ContextOptions s;
    s.gpu = -1;
    s.backend = Backend::Soft;
    EXPECT_EQ(gv::Context(s).selection(), "Backend::soft asked for");
}

}  // namespace
