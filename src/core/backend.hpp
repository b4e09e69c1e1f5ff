// The host-side backend interface: a small table of operations each backend implements
// (after rdma-core's verbs_context_ops). An operation a backend lacks throws NotSupported.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpuverbs/completion_queue.hpp"
#include "gpuverbs/queue_pair.hpp"

namespace gv::detail {

/// A registered memory region as the backend knows it. A NIC hands out two keys (the
/// software device gives one value for both).
struct MrInfo {
    uint32_t lkey = 0;
    uint32_t rkey = 0;
    bool device_memory = false;
};

class QpBackend;

/// A CQ of a backend, and the one registry of the QPs that complete into it: attach()
/// lets pollers free the QP's queue slots (the backend's slot table) and host-side waits
/// drive the QP (QpBackend::drive).
class CqBackend {
public:
    virtual ~CqBackend() = default;
    virtual dev::CqHandle handle() const = 0;
    virtual uint32_t depth() const = 0;
    virtual MemoryKind memory() const = 0;
    /// True when CPU threads can read the ring.
    virtual bool host_pollable() const = 0;

    /// Registers qp's send side, receive side or both with this CQ.
    void attach(QpBackend* qp, bool send, bool recv);
    /// Undoes attach (a QP never attached: nothing happens).
    void detach(QpBackend* qp);
    /// Lets every attached QP make progress that waits for no doorbell (host waits).
    void drive_attached();

protected:
    /// The backend's part of attach / detach: the slot table pollers free queue slots by.
    virtual void attach_slots(const dev::QpHandle& qp, bool send, bool recv) = 0;
    virtual void detach_slots(uint32_t qpn) = 0;

private:
    std::mutex mu_;
    std::vector<QpBackend*> qps_;
};

class QpBackend {
public:
    virtual ~QpBackend() = default;
    virtual dev::QpHandle handle() const = 0;
    /// Progress a host-side waiter makes for this QP when it finds nothing to poll (the
    /// software device's RNR retries and flushes). Nothing by default.
    virtual void drive() {}
    virtual QpState state() const = 0;
    virtual uint8_t error_syndrome() const = 0;
    virtual void to_init(const InitAttr&) = 0;
    virtual void to_rtr(const RtrAttr&) = 0;
    virtual void to_rts(const RtsAttr&) = 0;
    virtual void to_error() = 0;
    virtual void reset() = 0;
    virtual QpEndpoint endpoint() const = 0;
};

class BackendOps {
public:
    virtual ~BackendOps() = default;
    virtual Backend kind() const = 0;
    virtual std::string name() const = 0;
    virtual int gpu() const = 0;
    virtual uint32_t pd_alloc() = 0;
    virtual void pd_free(uint32_t pd) = 0;
    virtual MrInfo mr_register(uint32_t pd, void* addr, size_t length, uint32_t access) = 0;
    virtual void mr_deregister(const MrInfo& mr) = 0;
    virtual std::unique_ptr<CqBackend> cq_create(const CqOptions& options) = 0;
    /// Zeroed memory peers can reach once it is registered (gv::SharedBuffer). A NIC reaches
    /// whatever is registered with it, so by default this is plain memory of the context's
    /// kind: GPU memory on a GPU context (cudaMalloc on gpu()), page-aligned host memory on a
    /// CPU one (an anonymous mapping). The software device overrides both with its shared
    /// arena, the memory peer processes map.
    virtual void* shared_alloc(size_t bytes);
    virtual void shared_free(void* p, size_t bytes) noexcept;
    virtual std::unique_ptr<QpBackend> qp_create(uint32_t pd, const QpOptions& options,
                                                 CqBackend* send_cq, CqBackend* recv_cq) = 0;
    /// What the backend chose when it opened and why (queue memory, doorbell handler, ...),
    /// appended to Context::selection(); empty when there is nothing to say.
    virtual std::string details() const { return {}; }
};

// ---- choosing a backend (Backend::Auto) --------------------------------------------------

/// What Backend::Auto decides on: facts about the machine and the build.
struct BackendFacts {
    /// RDMA devices libibverbs lists, in its order, and which of them are ConnectX (mlx5).
    std::vector<std::string> devices;
    std::vector<bool> is_mlx5;
    /// Kernels can drive a ConnectX's queues themselves (the mlx5 backend is usable here).
    bool mlx5_gpu_queues = false;
    std::string mlx5_why_not;  ///< why not, when a ConnectX exists but cannot be driven
    /// The verbs proxy backend exists in this build.
    bool verbs_backend = false;
};

struct BackendChoice {
    Backend backend = Backend::Soft;
    std::string device;  ///< the RDMA device to open (empty for soft)
    std::string reason;  ///< why, in a sentence, for logs and Context::selection()
};

/// Backend::Auto as a plain function: mlx5 when a ConnectX's queues can be driven by
/// kernels, else verbs when an RDMA device exists (and the verbs backend is built), else the
/// software device. `wanted` (ContextOptions::device) restricts the choice to that device;
/// a name no device has is an InvalidUsage error listing what exists.
BackendChoice choose_backend(const BackendFacts& facts, const std::string& wanted);
/// The facts of this machine and build.
BackendFacts probe_backend_facts();

/// What is wrong with an endpoint's backend-specific part for `backend` ("" when nothing):
/// the out-of-band records' check of EndpointExtra, by the rules of the backend that reads it.
std::string check_endpoint_extra(Backend backend, const EndpointExtra& extra);

// ---- opening a backend -------------------------------------------------------------------

std::unique_ptr<BackendOps> open_soft(int gpu, size_t arena_bytes = 0);
/// Opens the verbs backend on the libibverbs device `device` ("" = the first one): the
/// proxy threads start. NotSupported, saying what is missing and the fix, without any RDMA
/// device. gpu >= 0: queues are pinned host memory mapped for that GPU's kernels.
std::unique_ptr<BackendOps> open_verbs(const std::string& device, int gpu, const VerbsOptions& options);
namespace verbs {
class Provider;
}
/// The verbs backend over any Provider (src/verbs/port.hpp): the device, or the sink.
std::unique_ptr<BackendOps> open_verbs_on(std::unique_ptr<verbs::Provider> provider, int gpu,
                                          const VerbsOptions& options);
/// Opens a ConnectX through mlx5dv and DevX (src/mlx5/, docs/mlx5.md); throws NotSupported
/// with the reason when impossible.
std::unique_ptr<BackendOps> open_mlx5(const std::string& device, int gpu, const Mlx5Options& options = {});
/// Why kernels cannot drive the queues of ConnectX `device` on this machine ("" when they can):
/// probes DevX, the GPU's dma-buf support and nvidia-peermem (Backend::Auto's mlx5_gpu_queues).
std::string mlx5_gpu_queues_why_not(const std::string& device);
/// The RDMA devices libibverbs lists, and for each whether it is a ConnectX (mlx5).
void list_rdma_devices(std::vector<std::string>* names, std::vector<bool>* is_mlx5);

}  // namespace gv::detail

namespace gv {
/// What a Context holds: its backend, and the sentence saying why it was chosen.
struct Context::Impl {
    std::unique_ptr<detail::BackendOps> ops;
    std::string selection;
};
}  // namespace gv
