// A real ConnectX under the mlx5 backend (devx_nic.cpp says how; nothing of it has run on a
// ConnectX yet), and the probes that build its capabilities.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <string>

#include "mlx5/nic.hpp"

namespace gv::detail::mlx5be {

class DevxNic final : public Nic {
public:
    /// Opens `device` with DevX (mlx5dv_open_device, MLX5DV_CONTEXT_FLAGS_DEVX); without DevX
    /// it opens it with plain verbs, and only host-memory queues are possible (capabilities()
    /// says why). The port and source GID come from `o`.
    DevxNic(const std::string& device, int gpu, const Mlx5Options& o);
    ~DevxNic() override;
    std::string name() const override;
    Capabilities capabilities(int gpu) override;
    uint32_t pd_alloc() override;
    void pd_free(uint32_t pd) override;
    MrInfo mr_register(uint32_t pd, void* addr, size_t length, uint32_t access) override;
    void mr_deregister(const MrInfo& mr) override;
    std::unique_ptr<NicCq> create_cq(uint32_t cqes, Place place) override;
    std::unique_ptr<NicQp> create_qp(const QpRequest& r) override;
    std::string note() const override;

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

/// The sysfs path of an RDMA device's PCI function (/sys/class/infiniband/NAME/device
/// resolved), "" when there is none.
std::string nic_sysfs(const std::string& name);

/// Whether a UAR page of this device maps into `gpu` (a throwaway one: a DevX UAR, or without
/// DevX the BlueFlame page of a throwaway verbs QP): "" when it does, else the failed call and
/// its error.
std::string probe_uar_mapping(ibv_context* ctx, bool devx, int gpu);

/// The capabilities of an opened device for a context on `gpu` (-1: CPU threads): the GPU's
/// dma-buf support and GPUDirect write ordering, nvidia-peermem, the UAR mapping, the driver's
/// PeerMappingOverride, the PCIe relation. devx_error is left for the caller.
Capabilities probe_capabilities(ibv_context* ctx, const std::string& name, bool devx, int gpu);

}  // namespace gv::detail::mlx5be
