// The traffic suite (traffic_suite.inc) against the instances that need no GPU: the software
// device on CPU threads; the mlx5 backend over the stand-in NIC on CPU threads (both doorbell
// handlers); the verbs backend on an RDMA device.
#include <cstdlib>
#include <map>
#include <string>

#include "mlx5/standin_nic.hpp"
#include "traffic/traffic_env.hpp"
#include "traffic/traffic_suite.inc"
#include "traffic/traffic_verbs.hpp"

namespace gvtest::traffic {

namespace {

/// The mlx5 backend on a CPU-only context over the stand-in NIC (tests/mlx5/standin_nic.hpp:
/// the software executor behind a watched doorbell word): CPU threads post into the backend's
/// own rings and ring its doorbell (`direct`) or let its CPU proxy thread ring it. The NIC
/// executes: the device side sees no QP state, and commit returns before the WQEs ran.
Instance mlx5_standin_cpu(const char* name, gv::DoorbellHandler h) {
    Instance i;
    i.name = name;
    i.context.backend = gv::Backend::Mlx5;
    i.context.gpu = -1;
    i.queues = gv::MemoryKind::Host;
    i.buffers = std::make_shared<HostMemory>();
    i.initiator = std::make_shared<CpuThreads>();
    i.device_sees_qp_state = false;
    i.commit_executes = false;
    i.open = [h] {
        gv::Mlx5Options mo;
        mo.doorbell = h;
        return gv::test::standin_context(-1, gv::test::StandinOptions{}, mo);
    };
    return i;
}

std::vector<Instance> cpu_instances() {
    std::vector<Instance> v;
    v.push_back(soft_cpu_instance());
    v.push_back(mlx5_standin_cpu("mlx5-standin-cpu", gv::DoorbellHandler::Gpu));
    v.push_back(mlx5_standin_cpu("mlx5-standin-cpu-proxy", gv::DoorbellHandler::CpuProxy));
    v.push_back(verbs_instance());
    return v;
}

INSTANTIATE_TEST_SUITE_P(Backends, Traffic, testing::ValuesIn(cpu_instances()), instance_test_name);

}  // namespace
}  // namespace gvtest::traffic
