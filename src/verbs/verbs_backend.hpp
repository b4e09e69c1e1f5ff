// The verbs backend's host side: the table of operations (VerbsBackend), its CQs (the
// user-visible rings the proxy writes) and QPs (the rings the proxy reads, a device QP under
// each). Internal; docs/verbs.md ("The verbs backend") describes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "verbs/port.hpp"
#include "verbs/proxy.hpp"

namespace gv::detail::verbs {

/// Zeroed host memory the proxy and device code share: pinned and mapped for kernels (at the
/// same address, unified addressing) on a context with a GPU, else plain page-aligned memory.
class HostMem {
public:
    HostMem() = default;
    HostMem(size_t bytes, int gpu);
    ~HostMem();
    HostMem(HostMem&& o) noexcept;
    HostMem& operator=(HostMem&& o) noexcept;
    HostMem(const HostMem&) = delete;
    HostMem& operator=(const HostMem&) = delete;
    template <typename T = uint8_t>
    T* at(size_t off) const {
        return reinterpret_cast<T*>(static_cast<uint8_t*>(p_) + off);
    }
    size_t size() const { return bytes_; }

private:
    void* p_ = nullptr;
    size_t bytes_ = 0;
    bool pinned_ = false;
};

class VerbsBackend;

/// A CQ: the ring of mlx5 CQEs device code polls, with the software device's layout (ring,
/// doorbell record, consumer index, overrun flag, QP slot table), in host memory.
class VerbsCq final : public CqBackend {
public:
    static constexpr uint32_t kSlots = 1024;  // QPs per CQ
    VerbsCq(int gpu, const CqOptions& o);
    dev::CqHandle handle() const override;
    uint32_t depth() const override { return cnt_; }
    MemoryKind memory() const override { return MemoryKind::Host; }
    bool host_pollable() const override { return true; }
    CqRing* ring() { return &ring_; }
    /// Removes the unpolled completions of qpn (a QP destroyed or reset), as libmlx5's
    /// mlx5_cq_clean does. Nobody may poll this CQ meanwhile; the QP is detached from its
    /// proxy thread, so no completion of it is being written.
    void clean(uint32_t qpn);

protected:
    void attach_slots(const dev::QpHandle& qp, bool send, bool recv) override;
    void detach_slots(uint32_t qpn) override;

private:
    std::mutex mu_;
    uint32_t cnt_ = 0, cqn_ = 0;
    size_t ring_bytes_ = 0;
    HostMem mem_;
    CqRing ring_;
};

/// A QP: the send and receive rings, doorbell records, posting counters and the state word
/// device code reads, in host memory; a device QP (a Port) under it, driven by a proxy thread.
class VerbsQp final : public QpBackend {
public:
    VerbsQp(VerbsBackend& be, uint32_t pd, const QpOptions& o, VerbsCq* scq, VerbsCq* rcq);
    ~VerbsQp() override;
    dev::QpHandle handle() const override;
    void drive() override;
    /// VerbsQpPart::host_step: the calling CPU thread steps this QP (Proxy::step_inline).
    static void step_from_host(void* self);
    QpState state() const override;
    uint8_t error_syndrome() const override;
    void to_init(const InitAttr& a) override;
    void to_rtr(const RtrAttr& a) override;
    void to_rts(const RtsAttr& a) override;
    void to_error() override;
    void reset() override;
    QpEndpoint endpoint() const override;
    ProxyQp& proxy_qp() { return pq_; }  ///< for tests (proxy_qp_of)

private:
    void set_state(QpState s);
    uint32_t* state_word() const { return mem_.at<uint32_t>(state_off_); }
    uint32_t* syndrome_word() const { return mem_.at<uint32_t>(state_off_ + 4); }

    VerbsBackend& be_;
    VerbsCq* scq_;
    VerbsCq* rcq_;
    QpOptions opts_;
    uint32_t sq_bbs_ = 0, rq_cnt_ = 0, rq_stride_ = 0;
    size_t sq_bytes_ = 0, rq_bytes_ = 0, state_off_ = 0;
    HostMem mem_;
    std::unique_ptr<Port> port_;
    ProxyQp pq_;
};

class VerbsBackend final : public BackendOps {
public:
    VerbsBackend(std::unique_ptr<Provider> provider, int gpu, const VerbsOptions& o);
    ~VerbsBackend() override;
    Backend kind() const override { return Backend::Verbs; }
    std::string name() const override { return provider_->name(); }
    int gpu() const override { return gpu_; }
    uint32_t pd_alloc() override { return provider_->pd_alloc(); }
    void pd_free(uint32_t pd) override { provider_->pd_free(pd); }
    MrInfo mr_register(uint32_t pd, void* addr, size_t length, uint32_t access) override;
    void mr_deregister(const MrInfo& mr) override { provider_->mr_deregister(mr); }
    std::unique_ptr<CqBackend> cq_create(const CqOptions& options) override;
    std::unique_ptr<QpBackend> qp_create(uint32_t pd, const QpOptions& options, CqBackend* send_cq,
                                         CqBackend* recv_cq) override;

    Provider& provider() { return *provider_; }
    Proxy& proxy() { return *proxy_; }
    const VerbsOptions& options() const { return opts_; }
    /// The GPU whose GPUDirect writes the proxy flushes before completing work that wrote
    /// local memory (VerbsOptions::gpudirect_flush), -1: none.
    int gpudirect_flush_gpu() const { return flush_gpu_; }

private:
    std::unique_ptr<Provider> provider_;  // destroyed last: the proxy's QPs are gone by then
    int gpu_;
    VerbsOptions opts_;
    int flush_gpu_ = -1;
    std::unique_ptr<Proxy> proxy_;
};

/// Which GPU's GPUDirect writes the proxy flushes (-1: none) for a context on `gpu` (-1: CPU
/// threads): Never or a CPU context none; Always the GPU (NotSupported, saying why, when it
/// cannot flush); Auto the GPU when it does not order such writes for its own kernels and can
/// flush them (one line on stderr when it can do neither).
int decide_gpudirect_flush(int gpu, VerbsOptions::GpuDirectFlush mode);

/// The proxy of a verbs context, for tests and tools (null for other backends).
Proxy* proxy_of(const Context& ctx);

/// The proxy's state of the verbs QP behind a handle, for tests (null for other backends).
ProxyQp* proxy_qp_of(const dev::QpHandle& h);

}  // namespace gv::detail::verbs
