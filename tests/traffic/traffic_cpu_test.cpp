// The traffic suite (traffic_suite.inc) against the instances that need no GPU: the software
// device on CPU threads; the verbs instance joins here.
#include "traffic/traffic_env.hpp"
#include "traffic/traffic_suite.inc"

namespace gvtest::traffic {

// ---- verbs: the place of its instance ---------------------------------------------------
// To be written with Backend::Verbs by that backend's engineers, and added to cpu_instances()
// below: a CPU thread initiates on host-memory queues and buffers (CpuThreads, HostMemory)
// of ContextOptions{Backend::Verbs, -1, getenv("RDMA_DEVICE")} (e.g. rxe0 inside the qemu
// VM); a proxy thread executes, so device_sees_qp_state = false and commit_executes =
// false. Its unavailable() returns why it cannot run here (RDMA_DEVICE unset, or no such
// device among ibv_get_device_list()), so every test of it skips with that reason.
Instance verbs_instance();

namespace {

std::vector<Instance> cpu_instances() {
    std::vector<Instance> v;
    v.push_back(soft_cpu_instance());
    // v.push_back(verbs_instance());  once it exists (see above)
    return v;
}

INSTANTIATE_TEST_SUITE_P(Backends, Traffic, testing::ValuesIn(cpu_instances()), instance_test_name);

}  // namespace
}  // namespace gvtest::traffic
