// A stand-in for a ConnectX, for tests on machines without one: it implements the NIC
// interface of the mlx5 backend (src/mlx5/nic.hpp), so the backend's own host objects, handles,
// doorbell handlers, CPU proxy and flush QP run unchanged above it, and kernels (or CPU
// threads) run the backend's own device path: WQEs into its send ring, the doorbell record,
// the 8-byte doorbell store, CQ polling.
//
// Its "hardware": the rings live where the mlx5 backend would have them (GPU memory, or host
// memory the backend maps for kernels, as libmlx5's would be), and each QP's "UAR" is an 8-byte
// word of ordinary memory that a watcher thread observes. On every doorbell the watcher checks
// it (QP number, producer index against the doorbell record), records it, and executes the
// published WQEs up to the doorbell record with the software device's executor, which writes
// the CQEs into the QP's CQ rings: on a CPU-only context it runs the executor itself; on a GPU
// context it launches it (the QP state is GPU memory). Between doorbells it also does what a
// NIC does on its own: retries a SEND waiting for a receive (RNR) and flushes a QP in ERROR.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpuverbs/context.hpp"
#include "mlx5/memory.hpp"
#include "mlx5/nic.hpp"

namespace gv::test {

namespace be = gv::detail::mlx5be;

struct StandinOptions {
    /// What capabilities() reports, so tests reach every decision.
    bool devx = true;
    bool dmabuf = true;
    bool peermem = false;
    bool uar_mappable = true;
    std::string uar_map_error;
    int peer_mapping_override = 1;
    int gdr_writes_ordering = 100;
    be::PcieRelation pcie = be::PcieRelation::SameSwitch;
};

/// One doorbell the watcher saw.
struct SeenDoorbell {
    uint32_t qpn;
    uint32_t pi;         ///< the producer index the 8 bytes carried
    uint32_t dbrec;      ///< the send doorbell record when the watcher read the doorbell
    uint64_t raw;        ///< the 8 bytes as stored
};

class StandinNic final : public be::Nic {
public:
    StandinNic(int gpu, const StandinOptions& o = {});
    ~StandinNic() override;

    std::string name() const override { return "standin-mlx5"; }
    be::Capabilities capabilities(int gpu) override;
    uint32_t pd_alloc() override;
    void pd_free(uint32_t pd) override;
    detail::MrInfo mr_register(uint32_t pd, void* addr, size_t length, uint32_t access) override;
    void mr_deregister(const detail::MrInfo& mr) override;
    std::unique_ptr<be::NicCq> create_cq(uint32_t cqes, be::Place place) override;
    std::unique_ptr<be::NicQp> create_qp(const be::QpRequest& r) override;

    /// Every doorbell seen so far, and the problems found with them (a wrong QP number, an
    /// index beyond the doorbell record, an index going backwards). Shared by the NICs of a
    /// process (the state survives the context).
    struct Log {
        std::mutex mu;
        std::vector<SeenDoorbell> doorbells;
        std::vector<std::string> problems;
        uint64_t executions = 0;
    };
    std::shared_ptr<Log> log() const { return log_; }

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
    std::shared_ptr<Log> log_;
};

/// A Context of the mlx5 backend over a stand-in NIC on `gpu` (-1: CPU threads), and the
/// NIC's doorbell log. Its selection() says what the backend chose (memory, handler, flush).
gv::Context standin_context(int gpu, const StandinOptions& so = {}, const gv::Mlx5Options& mo = {},
                            std::shared_ptr<StandinNic::Log>* log = nullptr);

}  // namespace gv::test
