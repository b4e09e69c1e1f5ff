// The traffic suite (traffic_suite.inc) against the instances that need a GPU: the software
// device executing on GPU 0, driven by kernels (queues in GPU memory, or in host memory) and
// by CPU threads; the mlx5 backend on a ConnectX and on the stand-in NIC. Without a GPU every
// test skips with the reason.
#include <cstdlib>

#include "core/backend.hpp"
#include "mlx5/standin_nic.hpp"
#include "traffic/traffic_gpu.cuh"
#include "traffic/traffic_suite.inc"

namespace gvtest::traffic {

// ---- mlx5 ----------------------------------------------------------------------------
// The mlx5 backend on GPU 0: a kernel posts into the NIC's send ring (GPU memory), rings its
// doorbell and polls its CQ; GPU-memory buffers. The NIC executes, so the device side sees no QP
// state and commit returns before the WQEs ran. Three instances:
//   mlx5              a real ConnectX (RDMA_DEVICE names one; else the first): skipped, with
//                     the reason, where there is none, or no GPU;
//   mlx5-standin-gpu  the stand-in NIC (tests/mlx5/standin_nic.hpp: the software executor
//                     behind a watched doorbell word), kernels ring the doorbell;
//   mlx5-standin-gpu-proxy  the same, the backend's CPU proxy thread rings it.
Instance mlx5_instance(const char* name, gv::DoorbellHandler h, bool standin);

namespace {

std::string no_gpu();

/// Why no ConnectX can run the suite here ("" when one can).
std::string no_connectx() {
    std::string why = no_gpu();
    if (!why.empty()) return why;
    std::vector<std::string> names;
    std::vector<bool> mlx5;
    gv::detail::list_rdma_devices(&names, &mlx5);
    const char* want = std::getenv("RDMA_DEVICE");
    std::string seen;
    for (size_t i = 0; i < names.size(); ++i) {
        if (mlx5[i] && (!want || !*want || names[i] == want)) return "";
        seen += (seen.empty() ? "" : ", ") + names[i];
    }
    return std::string("no ConnectX (mlx5) RDMA device") + (want && *want ? std::string(" named ") + want : "") +
           (seen.empty() ? ": libibverbs lists none" : ": libibverbs lists " + seen) +
           " (the mlx5-standin-gpu instances run the backend against the stand-in NIC meanwhile)";
}

}  // namespace

Instance mlx5_instance(const char* name, gv::DoorbellHandler h, bool standin) {
    Instance i;
    i.name = name;
    i.context.backend = gv::Backend::Mlx5;
    i.context.gpu = 0;
    if (const char* d = std::getenv("RDMA_DEVICE")) i.context.device = d;
    i.context.mlx5.doorbell = h;
    i.queues = gv::MemoryKind::Device;
    i.buffers = std::make_shared<GpuMemory>();
    i.initiator = std::make_shared<GpuKernel>();
    i.device_sees_qp_state = false;
    i.commit_executes = false;
    if (standin) {
        i.unavailable = no_gpu;
        i.open = [h] {
            gv::Mlx5Options mo;
            mo.doorbell = h;
            return gv::test::standin_context(0, gv::test::StandinOptions{}, mo);
        };
    } else {
        i.unavailable = no_connectx;
    }
    return i;
}

namespace {

std::string no_gpu() {
    if (gv::Context::gpu_count() > 0) return "";
    return "no CUDA GPU visible (cudaGetDeviceCount returned 0): GPU instances need a GPU; run them with "
           "`ctest -L gpu` on a machine that has one";
}

/// The software device on GPU 0; `queues`: where QPs and CQs live. `cpu`: CPU threads post
/// and each commit launches the executor as a kernel; the buffers are host memory, which the
/// CPU lanes fill, check and poll as a CPU application does (the shape of the verbs
/// instance; CPU-posted WRITEs between GPU-memory regions are GpuDataPath.CpuPostsGpuExecutes).
/// Otherwise a kernel posts, on GPU-memory buffers.
Instance soft_gpu(const char* name, gv::MemoryKind queues, bool cpu) {
    Instance i;
    i.name = name;
    i.context.backend = gv::Backend::Soft;
    i.context.gpu = 0;
    i.queues = queues;
    if (cpu) {
        i.buffers = std::make_shared<HostMemory>();
        i.initiator = std::make_shared<CpuThreads>();
        i.device_sees_qp_state = false;  // the QP state is GPU memory
        i.commit_executes = false;       // commit launches the executor and returns
    } else {
        i.buffers = std::make_shared<GpuMemory>();
        i.initiator = std::make_shared<GpuKernel>();
    }
    i.unavailable = no_gpu;
    return i;
}

std::vector<Instance> gpu_instances() {
    return {soft_gpu("soft-gpu", gv::MemoryKind::Device, false),
            soft_gpu("soft-gpu-hostq", gv::MemoryKind::Host, false),
            soft_gpu("soft-gpu-cpu-initiator", gv::MemoryKind::Host, true),
            mlx5_instance("mlx5", gv::DoorbellHandler::Auto, false),
            mlx5_instance("mlx5-standin-gpu", gv::DoorbellHandler::Gpu, true),
            mlx5_instance("mlx5-standin-gpu-proxy", gv::DoorbellHandler::CpuProxy, true)};
}

INSTANTIATE_TEST_SUITE_P(Backends, Traffic, testing::ValuesIn(gpu_instances()), instance_test_name);

}  // namespace
}  // namespace gvtest::traffic
