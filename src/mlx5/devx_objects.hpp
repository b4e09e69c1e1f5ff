// The pieces of the ConnectX under the mlx5 backend that its CQs and device (devx_nic.cpp) and
// its QPs (devx_qp.cpp) share: umems, DevX object creation, UARs, the verbs CQ, the port's
// path, and the two QP kinds' factories.
#pragma once

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "mlx5/commands.hpp"
#include "mlx5/nic.hpp"
#include "verbs/verbs.hpp"

namespace gv::detail::mlx5be::devx {

constexpr size_t kGpuAlign = 64 * 1024;  // GPU pages: a umem starts on one

/// A registered umem over GPU or host memory.
struct Umem {
    mlx5dv_devx_umem* umem = nullptr;
    Umem() = default;
    Umem(const Umem&) = delete;
    Umem& operator=(const Umem&) = delete;
    ~Umem() { reset(); }
    void reset() {
        if (umem) mlx5dv_devx_umem_dereg(umem);
        umem = nullptr;
    }
    uint32_t id() const { return umem->umem_id; }
};

/// Registers [p, p+bytes) as a umem: GPU memory through dma-buf (when the GPU supports it) or
/// nvidia-peermem, host memory directly.
void register_umem(Umem& u, ibv_context* ctx, void* p, size_t bytes, bool gpu_memory, bool dmabuf, const char* what);

/// Runs a DevX command that creates an object (its output in *out); the output's status and
/// syndrome on failure.
mlx5dv_devx_obj* devx_create(ibv_context* ctx, const prm::Cmd& in, const char* what, prm::Cmd& out);

/// A UAR for a QP's doorbell: a dedicated non-cached page where the library offers one, else a
/// non-cached one, else a BlueFlame (write-combining) one.
mlx5dv_devx_uar* alloc_uar(ibv_context* ctx, std::string* tried);

/// A CQ created with verbs; its ring in libmlx5's host memory.
class VerbsCq final : public NicCq {
public:
    VerbsCq(const verbs::Device& dev, uint32_t cqes);
    const CqRing& ring() const override { return ring_; }
    const verbs::Cq& cq() const { return cq_; }

private:
    verbs::Cq cq_;
    CqRing ring_;
};

/// What both QP kinds share: the port's addressing and the endpoint.
struct PortPath {
    verbs::LocalPath path;
    verbs::DeviceCaps caps;
    std::string device;
};

/// An RC QP created with DevX over GPU-memory umems (devx_qp.cpp).
std::unique_ptr<NicQp> make_devx_qp(ibv_context* ctx, ibv_pd* pd, int gpu, bool dmabuf, const QpRequest& r,
                                    const PortPath& port);

/// An RC QP created with verbs; its rings, record and BlueFlame register in libmlx5's memory
/// (devx_qp.cpp).
std::unique_ptr<NicQp> make_verbs_host_qp(const verbs::Device& dev, const verbs::Pd& pd, const QpRequest& r,
                                          const PortPath& port, const Mlx5Options& o);

}  // namespace gv::detail::mlx5be::devx
