// The real output of the verbs proxy: a libibverbs device through the control layer of this
// folder (Device, Pd, Mr, Cq, RcQp). Each gpuverbs QP gets an RC QP and a CQ of its own, so
// one proxy thread owns everything a QP's completions touch (proxy.hpp).
#include <infiniband/mlx5dv.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "gpuverbs/errors.hpp"
#include "verbs/port.hpp"
#include "verbs/verbs.hpp"

namespace gv::detail::verbs {

namespace {

QpState from_ibv(ibv_qp_state s) {
    switch (s) {
        case IBV_QPS_RESET: return QpState::Reset;
        case IBV_QPS_INIT: return QpState::Init;
        case IBV_QPS_RTR: return QpState::Rtr;
        case IBV_QPS_RTS: return QpState::Rts;
        case IBV_QPS_SQD: return QpState::Sqd;
        case IBV_QPS_SQE: return QpState::Sqe;
        default: return QpState::Error;
    }
}

class DevicePort final : public Port {
public:
    DevicePort(const Device& dev, const Pd& pd, const QpConfig& c)
        : cq_(dev, int(c.sq_depth + c.rq_depth)), qp_(dev, pd, cq_, cq_, c) {
        // The CQ holds every completion the QP can have outstanding (the proxy keeps no more
        // work requests in flight than it asked for, whatever the provider granted above it).
        caps_ = qp_.caps();
        caps_.sq_depth = std::min(caps_.sq_depth, c.sq_depth);
        caps_.rq_depth = std::min(caps_.rq_depth, c.rq_depth);
    }
    uint32_t qpn() const override { return qp_.qpn(); }
    const QpCaps& caps() const override { return caps_; }
    int post_send(ibv_send_wr* wr, ibv_send_wr** bad) override { return ibv_post_send(qp_.get(), wr, bad); }
    int post_recv(ibv_recv_wr* wr, ibv_recv_wr** bad) override { return ibv_post_recv(qp_.get(), wr, bad); }
    int poll(int n, ibv_wc* wc) override { return ibv_poll_cq(cq_.get(), n, wc); }
    QpState state() const override { return from_ibv(qp_.state()); }
    QpEndpoint endpoint() const override { return qp_.endpoint(); }
    void to_init(const InitAttr& a) override { qp_.to_init(a); }
    void to_rtr(const RtrAttr& a) override { qp_.to_rtr(a); }
    void to_rts(const RtsAttr& a) override { qp_.to_rts(a); }
    void to_error() override { qp_.to_error(); }
    void reset() override { qp_.reset(); }

private:
    Cq cq_;
    RcQp qp_;
    QpCaps caps_;
};

class DeviceProvider final : public Provider {
public:
    explicit DeviceProvider(const std::string& name) : dev_(name) {}
    std::string name() const override { return dev_.name(); }

    uint32_t pd_alloc() override {
        std::lock_guard<std::mutex> lock(mu_);
        const uint32_t id = ++next_pd_;
        pds_.emplace(id, std::make_unique<Pd>(dev_));
        return id;
    }
    void pd_free(uint32_t pd) override {
        std::lock_guard<std::mutex> lock(mu_);
        pds_.erase(pd);
    }

    MrInfo mr_register(uint32_t pd, void* addr, size_t length, uint32_t access, bool gpu) override {
        std::lock_guard<std::mutex> lock(mu_);
        const Pd& p = pd_of(pd);
        auto reg = [&] { return gpu ? Mr::gpu(p, addr, length, access) : Mr::host(p, addr, length, access); };
        Mr mr = reg();
        // A receive WQE's list ends at the first entry with MLX5_INVALID_LKEY (0x100), so no
        // region may have that key. Some providers can hand it out (rxe: index 1, key byte 0):
        // register again (a new key) and drop the first registration.
        for (int i = 0; i < 4 && mr.lkey() == MLX5_INVALID_LKEY; ++i) {
            Mr again = reg();
            mr = std::move(again);
        }
        if (mr.lkey() == MLX5_INVALID_LKEY)
            throw VerbsError("memory registration on " + dev_.name() + " keeps getting lkey 0x100 "
                             "(MLX5_INVALID_LKEY, the end marker of receive lists)", 0);
        MrInfo info;
        info.lkey = mr.lkey();
        info.rkey = mr.rkey();
        info.device_memory = gpu;
        mrs_.emplace(info.lkey, std::move(mr));
        return info;
    }
    void mr_deregister(const MrInfo& m) override {
        std::lock_guard<std::mutex> lock(mu_);
        mrs_.erase(m.lkey);
    }

    std::unique_ptr<Port> qp_create(uint32_t pd, const QpConfig& c) override {
        QpConfig x = c;
        const DeviceCaps& d = dev_.caps();
        x.sq_depth = std::max(1u, std::min(x.sq_depth, d.max_qp_wr));
        x.rq_depth = std::max(1u, std::min(x.rq_depth, d.max_qp_wr));
        x.max_recv_sge = std::max(1u, std::min(x.max_recv_sge, d.max_sge));
        // The CQ holds both queues' completions.
        if (x.sq_depth + x.rq_depth > d.max_cqe) {
            const uint32_t half = std::max(1u, d.max_cqe / 2);
            x.sq_depth = std::min(x.sq_depth, half);
            x.rq_depth = std::min(x.rq_depth, d.max_cqe - x.sq_depth);
        }
        std::lock_guard<std::mutex> lock(mu_);
        return std::make_unique<DevicePort>(dev_, pd_of(pd), x);
    }

private:
    const Pd& pd_of(uint32_t pd) const {
        auto it = pds_.find(pd);
        GV_REQUIRE(it != pds_.end(), "protection domain " + std::to_string(pd) + " is not of " + dev_.name());
        return *it->second;
    }

    Device dev_;
    std::mutex mu_;
    uint32_t next_pd_ = 0;
    std::map<uint32_t, std::unique_ptr<Pd>> pds_;
    std::map<uint32_t, Mr> mrs_;
};

}  // namespace

std::unique_ptr<Provider> open_device_provider(const std::string& name) {
    return std::make_unique<DeviceProvider>(name);
}

}  // namespace gv::detail::verbs
