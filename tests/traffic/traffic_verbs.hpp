// The traffic suite's verbs instance (Backend::Verbs on the RDMA device RDMA_DEVICE), shared
// by the suite's CPU binary (traffic_cpu_test.cpp) and the differential check
// (differential.cpp), which runs the same scripts on it and on the software device.
#pragma once

#include <infiniband/verbs.h>

#include <cstdlib>
#include <map>
#include <string>

#include "traffic/traffic_env.hpp"

namespace gvtest::traffic {

// ---- verbs ------------------------------------------------------------------------------
// Backend::Verbs on the RDMA device RDMA_DEVICE (rxe0 inside the Soft-RoCE VM of
// tools/rdma-vm; RDMA_GID_INDEX picks its GID): a CPU thread posts on host-memory queues and
// buffers, a proxy thread executes (so commit does not execute) and publishes the QP's state
// (so the device side sees it, once the proxy found the failure). Skipped, with the reason,
// where RDMA_DEVICE is unset or names no device; GV_REQUIRE_RDMA=1 (the VM tier) makes that a
// failure instead.
inline Instance verbs_instance() {
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
        d["CommitFlagBadLkeyFailsAsACommitDoes"] = lkey;
        d["CommitFlagSmallWriteFromAnotherPdFails"] = lkey;
        d["ReceiveWithBadLkey"] = "rxe completes a receive with a bad key with LOC_QP_OP_ERR (mlx5: LOCAL_PROT_ERR)";
        d["AtomicResultIntoRegionWithoutLocalWrite"] =
            "rxe performs the atomic on the responder before it finds the result's region lacks local write "
            "(LOCAL_PROT_ERR as on mlx5, but the remote word changed)";
        d["PeerQpLacksAccess"] = "rxe NAKs an operation the responder QP does not allow as an invalid request: "
                                 "REMOTE_INVAL_REQ_ERR (mlx5: REMOTE_ACCESS_ERR)";
        const std::string misaligned =
            "rxe fails a misaligned atomic locally with LOC_QP_OP_ERR and leaves the responder in RTS "
            "(mlx5: REMOTE_INVAL_REQ_ERR, the responder to ERROR)";
        d["MisalignedAtomic"] = misaligned;
        d["MisalignedAtomicMovesResponderToError"] = misaligned;
        d["RefusedWriteImmFailsItsReceive"] =
            "rxe completes the receive of a WRITE_IMM it refuses (wrong rkey) with REM_ACCESS_ERR "
            "(mlx5 and the verbs definitions: LOC_ACCESS_ERR)";
        return d;
    };
    return i;
}

}  // namespace gvtest::traffic
