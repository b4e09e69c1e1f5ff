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
