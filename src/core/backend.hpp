// The host-side backend interface: a small table of operations each backend implements
// (after rdma-core's verbs_context_ops). An operation a backend lacks throws NotSupported.
#pragma once

#include <memory>
#include <string>

#include "gpuverbs/completion_queue.hpp"
#include "gpuverbs/queue_pair.hpp"

namespace gv::detail {

struct MrInfo {
    uint32_t key = 0;
    bool device_memory = false;
};

class CqBackend {
public:
    virtual ~CqBackend() = default;
    virtual dev::CqHandle handle() const = 0;
    virtual uint32_t depth() const = 0;
    virtual MemoryKind memory() const = 0;
    /// True when CPU threads can read the ring.
    virtual bool host_pollable() const = 0;
    /// Lets pollers free QP slots (send and/or receive side) of qpn.
    virtual void attach_qp(uint32_t qpn, const dev::QpHandle& qp, bool send, bool recv) = 0;
    virtual void detach_qp(uint32_t qpn) = 0;
};

class QpBackend {
public:
    virtual ~QpBackend() = default;
    virtual dev::QpHandle handle() const = 0;
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
    virtual void mr_deregister(uint32_t key) = 0;
    virtual std::unique_ptr<CqBackend> cq_create(const CqOptions& options) = 0;
    /// Host memory peers in other processes can reach (gv::SharedBuffer).
    virtual void* shared_alloc(size_t bytes) {
        (void)bytes;
        throw NotSupported("SharedBuffer: backend " + name() + " has no memory shared across processes");
    }
    virtual void shared_free(void* p, size_t bytes) { (void)p, (void)bytes; }
    virtual std::unique_ptr<QpBackend> qp_create(uint32_t pd, const QpOptions& options,
                                                 CqBackend* send_cq, CqBackend* recv_cq) = 0;
};

std::unique_ptr<BackendOps> open_soft(int gpu, size_t arena_bytes = 0);
/// Opens a ConnectX through mlx5dv; throws NotSupported with the reason when impossible.
std::unique_ptr<BackendOps> open_mlx5(const std::string& device, int gpu);
/// True when a ConnectX (mlx5) RDMA device is present.
bool mlx5_present();

}  // namespace gv::detail
