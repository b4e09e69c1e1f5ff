// Where the verbs proxy's work requests go: the small interface between the proxy and a
// device. The real one is a libibverbs device (port.cpp: an RC QP and its own CQ per gpuverbs
// QP, on the control layer of this folder); the sink (sink.hpp) records every work request
// and completes it, so the whole proxy is tested without a device.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/backend.hpp"
#include "verbs/qp.hpp"

namespace gv::detail::verbs {

/// One QP's output: its work requests in, its completions out, and its state machine. The
/// proxy thread that owns the QP posts and polls; the host object moves its state (the
/// providers allow both at once, as libibverbs does).
class Port {
public:
    virtual ~Port() = default;
    virtual uint32_t qpn() const = 0;
    /// What the device granted (the proxy keeps at most this many work requests in flight).
    virtual const QpCaps& caps() const = 0;
    /// ibv_post_send / ibv_post_recv: 0, or an errno with *bad the first one not posted.
    virtual int post_send(ibv_send_wr* wr, ibv_send_wr** bad) = 0;
    virtual int post_recv(ibv_recv_wr* wr, ibv_recv_wr** bad) = 0;
    /// ibv_poll_cq on the QP's own CQ (send and receive completions): how many, or -errno.
    virtual int poll(int n, ibv_wc* wc) = 0;
    /// The state the device reports (ibv_query_qp).
    virtual QpState state() const = 0;
    virtual QpEndpoint endpoint() const = 0;
    virtual void to_init(const InitAttr& a) = 0;
    virtual void to_rtr(const RtrAttr& a) = 0;
    virtual void to_rts(const RtsAttr& a) = 0;
    virtual void to_error() = 0;
    virtual void reset() = 0;
};

/// The device under a verbs context.
class Provider {
public:
    virtual ~Provider() = default;
    virtual std::string name() const = 0;
    virtual uint32_t pd_alloc() = 0;
    virtual void pd_free(uint32_t pd) = 0;
    /// Registers [addr, addr+length): host memory, or GPU memory (`gpu`: dma-buf, else
    /// nvidia-peermem). The keys never equal MLX5_INVALID_LKEY, which ends short receive lists.
    virtual MrInfo mr_register(uint32_t pd, void* addr, size_t length, uint32_t access, bool gpu) = 0;
    virtual void mr_deregister(const MrInfo& mr) = 0;
    /// An RC QP (depths clamped to what the device allows; the granted ones are in caps()).
    virtual std::unique_ptr<Port> qp_create(uint32_t pd, const QpConfig& config) = 0;
};

/// The libibverbs device `name` ("" = the first one). NotSupported without any RDMA device.
std::unique_ptr<Provider> open_device_provider(const std::string& name);

}  // namespace gv::detail::verbs
