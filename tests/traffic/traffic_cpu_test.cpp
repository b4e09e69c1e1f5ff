// The traffic suite (traffic_suite.inc) against the instances that need no GPU: the software
// device on CPU threads; the mlx5 backend over the stand-in NIC on CPU threads (both doorbell
// handlers); the verbs backend on an RDMA device.
#include <infiniband/verbs.h>

#include <cstdlib>
#include <map>
#include <string>

#include "mlx5/standin_nic.hpp"
#include "traffic/traffic_env.hpp"
#include "traffic/traffic_suite.inc"

namespace gvtest::traffic {

// ---- verbs ------------------------------------------------------------------------------
// Backend::Verbs on the RDMA device RDMA_DEVICE (rxe0 inside the Soft-RoCE VM of
// tools/rdma-vm; RDMA_GID_INDEX picks its GID): a CPU thread posts on host-memory queues and
// buffers, a proxy thread executes (so commit does not execute) and publishes the QP's state
// (so the device side sees it, once the proxy found the failure). Skipped, with the reason,
// where RDMA_DEVICE is unset or names no device; GV_REQUIRE_RDMA=1 (the VM tier) makes that a
// failure instead.
Instance verbs_instance() {
    Instance i;
    i.name = "verbs";
    const char* dev = std::getenv("RDMA_DEVICE");
    const char* gid = std::getenv("RDMA_GID_INDEX");
    i.context.backend = gv::Backend::Verbs;
    i.context.gpu = -1;
    i.context.device = dev ? dev : "";
    i.context.verbs.gid_index = gid && *gid ? std::atoi(gid) : -1;
    i.queues = gv::MemoryKind::Host;
    i.buffers = std::make_shared<HostMemory>();
    i.initiator = std::make_shared<CpuThreads>();
    i.device_sees_qp_state = true;
    i.commit_executes = false;
    const std::string want = i.context.device;
    i.unavailable = [want]() -> std::string {
        const char* req = std::getenv("GV_REQUIRE_RDMA");
        if (req && std::string(req) == "1") return "";  // run, and fail where the device is missing
        if (want.empty())
            return "RDMA_DEVICE is unset: run it where an RDMA device exists, e.g. in the Soft-RoCE VM "
                   "(ctest -L rdma-vm, or tools/rdma-vm/run.sh exec \"$PWD\" -- build/tests/gv_traffic_tests)";
        int n = 0;
        ibv_device** list = ibv_get_device_list(&n);
        bool found = false;
        for (int k = 0; k < n; ++k) found = found || want == ibv_get_device_name(list[k]);
        if (list) ibv_free_device_list(list);
        if (!found) return "RDMA_DEVICE=" + want + ": libibverbs lists no such device";
        return "";
    };
    // Where Soft-RoCE (Linux 6.1's rdma_rxe) reports otherwise than a ConnectX; the proxy
    // carries the device's statuses unchanged (docs/verbs.md, "Errors and ERROR").
    i.deviations = [want] {
        std::map<std::string, std::string> d;
        if (want.rfind("rxe", 0) != 0) return d;
        const std::string small =
            "rxe completes a receive too small for the SEND with LOC_QP_OP_ERR and the SEND with REM_OP_ERR "
            "(mlx5: LOCAL_LENGTH_ERR and REMOTE_INVAL_REQ_ERR)";
        const std::string lkey = "rxe fails a bad local key with LOC_QP_OP_ERR (mlx5: LOCAL_PROT_ERR)";
        d["SendIntoReceiveWithoutBuffer"] = small;
        d["ReceiveTooSmall"] = small;
        d["BadLkey"] = lkey;
        d["UnsignaledBadWqeStillCompletes"] = lkey;
        d["LkeyOfAnotherPd"] = lkey;
        d["ReceiveWithBadLkey"] = "rxe completes a receive with a bad key with LOC_QP_OP_ERR (mlx5: LOCAL_PROT_ERR)";
        d["AtomicResultIntoRegionWithoutLocalWrite"] =
            "rxe performs the atomic on the responder before it finds the result's region lacks local write "
            "(LOCAL_PROT_ERR as on mlx5, but the remote word changed)";
        d["PeerQpLacksAccess"] = "rxe NAKs an operation the responder QP does not allow as an invalid request: "
                                 "REMOTE_INVAL_REQ_ERR (mlx5: REMOTE_ACCESS_ERR)";
        d["MisalignedAtomic"] = "rxe fails a misaligned atomic locally with LOC_QP_OP_ERR (mlx5: REMOTE_INVAL_REQ_ERR)";
        return d;
    };
    return i;
}

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
