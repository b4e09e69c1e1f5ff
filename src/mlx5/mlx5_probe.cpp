// The ConnectX (mlx5) backend's entry points: device discovery, opening a ConnectX (DevX, the
// backend over it), and the probe behind Backend::Auto's mlx5_gpu_queues fact.
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <string>
#include <vector>

#include "core/backend.hpp"
#include "cuda/cuda_rt.hpp"
#include "mlx5/devx_nic.hpp"
#include "mlx5/gpu_access.hpp"
#include "verbs/verbs.hpp"

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

std::unique_ptr<BackendOps> open_mlx5(const std::string& device, int gpu, const Mlx5Options& options) {
    DeviceList d;
    std::string seen, pick;
    for (int i = 0; i < d.n; ++i) {
        std::string name = ibv_get_device_name(d.list[i]);
        bool mlx5 = mlx5dv_is_supported(d.list[i]);
        seen += (seen.empty() ? "" : ", ") + name + (mlx5 ? " (mlx5)" : " (not mlx5)");
        if (mlx5 && pick.empty() && (device.empty() || device == name)) pick = name;
    }
    if (pick.empty()) {
        throw NotSupported(
            "backend mlx5: no ConnectX (mlx5) RDMA device" +
            (device.empty() ? std::string() : " named '" + device + "'") +
            " found; ibv_get_device_list() lists " +
            (d.n ? std::to_string(d.n) + " device(s): " + seen : std::string("no RDMA device")) +
            ". Use Backend::Soft (the software RDMA device) on machines without one; gpuverbs_info says what "
            "this machine has.");
    }
    if (gpu >= 0) {
        if (!cuda::built())
            throw NotSupported("backend mlx5 on GPU " + std::to_string(gpu) +
                               ": gpuverbs was built without CUDA; use ContextOptions::gpu = -1 (CPU threads post)");
        int n = cuda::device_count();
        GV_REQUIRE(gpu < n, "GPU " + std::to_string(gpu) + " asked for, but " + std::to_string(n) + " GPU(s) are visible");
        cuda::set_device(gpu);
    }
    return mlx5be::open_on(std::make_unique<mlx5be::DevxNic>(pick, gpu, options), gpu, options);
}

std::string mlx5_gpu_queues_why_not(const std::string& device) {
    mlx5be::Capabilities c;
    c.cuda_built = cuda::built();
    c.gpu = c.cuda_built && mlx5be::gpu_count() > 0 ? 0 : -1;
    try {
        verbs::Device dev(device, verbs::Device::Open::Mlx5Devx);
        c.devx = true;
    } catch (const Error& e) {
        c.devx_error = e.what();
    }
    c.peermem = verbs::peermem_loaded();
    if (c.gpu >= 0) c.dmabuf = mlx5be::probe_gpu(c.gpu).dmabuf == 1;
    return mlx5be::gpu_queues_why_not(c);
}

}  // namespace gv::detail
