// The software device's CQ (its ring, QP slots and cleaning) and the factory of its QPs,
// shared by soft_backend.cpp (CQs, registration, the backend's operations) and soft_qp.cpp
// (QPs: the verbs state machine, connecting to a peer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/backend.hpp"
#include "soft/soft_device.hpp"

namespace gv::detail::softdev {

class SoftCq final : public CqBackend {
public:
    static constexpr uint32_t kSlots = 1024;  // QPs per CQ
    SoftCq(std::shared_ptr<SoftDevice> dev, const CqOptions& o);
    ~SoftCq() override;
    dev::CqHandle handle() const override;
    /// A QP completing here connected to a peer on another GPU (docs/two-gpus.md): from now on
    /// executors of both GPUs produce into this CQ (slots: system-scope RMWs), and the CQE
    /// stores, the doorbell record and the overrun flag are ordered at system scope; handles
    /// taken from now on poll at system scope. Sticky for the CQ's life (other QPs may share it).
    void mark_cross_gpu();
    uint32_t depth() const override { return cnt_; }
    MemoryKind memory() const override { return memory_; }
    bool host_pollable() const override { return !device_; }
    soft::CqState* state() const { return s_.at<soft::CqState>(0); }
    const SoftDevice* device() const { return dev_.get(); }
    /// Ring and state in the device's shared arena (reachable from peer processes).
    bool in_arena() const { return q_.arena && s_.arena; }

    void attach_slots(const dev::QpHandle& qp, bool send, bool recv) override;
    /// Removes the unpolled completions of qpn when it is reset or destroyed (clean_cq_ring,
    /// core/cq_clean.hpp, says why and how); the consumer index advances past the gap.
    void clean(uint32_t qpn);
    void detach_slots(uint32_t qpn) override;

private:
    std::shared_ptr<SoftDevice> dev_;
    std::mutex mu_;
    bool device_ = false;
    bool xgpu_ = false;  ///< mark_cross_gpu() ran
    MemoryKind memory_;
    uint32_t cnt_ = 0, cqn_ = 0;
    size_t ring_bytes_ = 0;
    Mem q_, s_;
    std::vector<dev::CqQpSlot> slots_;
};

/// A QP of the software device `dev` in protection domain `pd`, completing into scq and rcq
/// (soft_qp.cpp).
std::unique_ptr<QpBackend> make_soft_qp(std::shared_ptr<SoftDevice> dev, uint32_t pd, const QpOptions& o,
                                        SoftCq* scq, SoftCq* rcq);

}  // namespace gv::detail::softdev
