// The traffic suite (traffic_suite.inc) against the instances that need a GPU: the software
// device executing on GPU 0, driven by kernels (queues in GPU memory, or in host memory) and
// by CPU threads; the mlx5 instance joins here. Without a GPU every test skips with the
// reason.
#include "traffic/traffic_gpu.cuh"
#include "traffic/traffic_suite.inc"

namespace gvtest::traffic {

// ---- mlx5: the place of its instance ----------------------------------------------------
// To be written with the mlx5 backend by its engineers, and added to gpu_instances() below:
// ContextOptions{Backend::Mlx5, 0, <the ConnectX's name>}, a GPU kernel initiator
// (GpuKernel) on GPU-memory buffers (GpuMemory), queues where the NIC and the kernel both
// reach them; the NIC executes, so device_sees_qp_state = false and commit_executes = false.
// Its unavailable() returns why it cannot run here (no ConnectX, or none whose queues a
// kernel can drive: Context::selection() says which), so every test of it skips with that
// reason.
Instance mlx5_instance();

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
            soft_gpu("soft-gpu-cpu-initiator", gv::MemoryKind::Host, true)};
    // + mlx5_instance() once it exists (see above)
}

INSTANTIATE_TEST_SUITE_P(Backends, Traffic, testing::ValuesIn(gpu_instances()), instance_test_name);

}  // namespace
}  // namespace gvtest::traffic
