// The ConnectX (mlx5) backend: device discovery. GPU-initiated queues on real ConnectX
// hardware need DevX objects whose memory the GPU reaches; no machine here has a
// ConnectX, so opening one reports clearly what was found and what is missing.
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <string>
#include <vector>

#include "core/backend.hpp"

namespace gv::detail {

namespace {
struct DeviceList {
    ibv_device** list = nullptr;
    int n = 0;
    DeviceList() { list = ibv_get_device_list(&n); }
    ~DeviceList() {
        if (list) ibv_free_device_list(list);
    }
};
}  // namespace

void list_rdma_devices(std::vector<std::string>* names, std::vector<bool>* is_mlx5) {
    DeviceList d;
    for (int i = 0; i < d.n; ++i) {
        names->push_back(ibv_get_device_name(d.list[i]));
        is_mlx5->push_back(mlx5dv_is_supported(d.list[i]));
    }
}

std::unique_ptr<BackendOps> open_mlx5(const std::string& device, int gpu) {
    (void)gpu;
    DeviceList d;
    std::string seen;
    bool found = false;
    for (int i = 0; i < d.n; ++i) {
        std::string name = ibv_get_device_name(d.list[i]);
        bool mlx5 = mlx5dv_is_supported(d.list[i]);
        seen += (seen.empty() ? "" : ", ") + name + (mlx5 ? " (mlx5)" : " (not mlx5)");
        if (mlx5 && (device.empty() || device == name)) found = true;
    }
    if (!found) {
        throw NotSupported(
            "backend mlx5: no ConnectX (mlx5) RDMA device" +
            (device.empty() ? std::string() : " named '" + device + "'") +
            " found; ibv_get_device_list() lists " +
            (d.n ? std::to_string(d.n) + " device(s): " + seen : std::string("no RDMA device")) +
            ". Use Backend::Soft (the software RDMA device) on machines without one.");
    }
    throw NotSupported(
        "backend mlx5: a ConnectX is present, but GPU-initiated mlx5 queues (DevX QPs and CQs "
        "in GPU-reachable memory, UAR mapped for the GPU) are not implemented in this version; "
        "use Backend::Soft");
}

}  // namespace gv::detail
