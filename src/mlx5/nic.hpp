// What the ConnectX backend asks of a NIC: its capabilities, protection domains and memory
// regions, CQs and RC QPs whose rings it hands back, and the QP state machine. Two
// implementations: a real ConnectX through DevX and libmlx5 (devx_nic.cpp), and, in the tests,
// a stand-in whose "hardware" is the software device's executor (tests/mlx5/standin_nic.*).
// Everything above this interface (mlx5_backend.cpp: the handles, the doorbell handler, the
// CPU proxy, the flush QP, the CQ registry) is the same code for both, and so is everything
// kernels run.
#pragma once

#include <infiniband/mlx5dv.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/backend.hpp"
#include "mlx5/decide.hpp"

namespace gv::detail::mlx5be {

/// A CQ's ring as the NIC writes it.
struct CqRing {
    mlx5_cqe64* cqes = nullptr;  ///< 64-byte CQEs, each starting invalid (opcode 0xf)
    uint32_t* dbrec = nullptr;   ///< [0] consumer index (set_ci), [1] arm
    uint32_t log_cnt = 0;
    uint32_t cqn = 0;
    /// Gpu: GPU memory (the pointers are GPU addresses). Host: host memory in this process
    /// (the pointers are CPU addresses; the backend maps them for kernels).
    Place place = Place::Host;
};

class NicCq {
public:
    virtual ~NicCq() = default;
    virtual const CqRing& ring() const = 0;
};

/// What a QP needs: its sizes (already checked and rounded by qp_layout()), where its rings go,
/// and whether its doorbell record must be host memory a CPU thread writes (CpuProxy).
struct QpRequest {
    uint32_t pd = 0;
    Place place = Place::Host;
    bool dbrec_host = false;
    uint32_t sq_bbs = 0;     ///< send WQEBBs (power of two)
    uint32_t rq_cnt = 0;     ///< receive WQEs (power of two)
    uint32_t rq_stride = 0;  ///< bytes per receive WQE (power of two, >= 16)
    uint32_t sq_depth = 0, rq_depth = 0;  ///< as asked (what a verbs-created QP is sized by)
    uint32_t max_send_sge = 1, max_recv_sge = 1, max_inline = 0;
    NicCq* scq = nullptr;
    NicCq* rcq = nullptr;
};

/// A QP's rings and doorbell as the NIC reads them.
struct QpRing {
    uint8_t* sq = nullptr;
    uint8_t* rq = nullptr;
    uint32_t* dbrec = nullptr;  ///< [MLX5_RCV_DBR], [MLX5_SND_DBR]
    uint32_t qpn = 0;
    uint32_t sq_log_bb = 0, rq_log_cnt = 0, rq_log_stride = 0;
    uint32_t max_inline = 0, max_send_sge = 1, max_recv_sge = 1;
    Place place = Place::Host;  ///< of sq and rq (as CqRing::place)
    Place dbrec_place = Place::Host;
    uint64_t* uar = nullptr;  ///< the doorbell register's CPU mapping
    /// The register is a device's MMIO page (cudaHostRegisterIoMemory maps it for kernels);
    /// false for the stand-in's ordinary memory.
    bool uar_io = true;
};

class NicQp {
public:
    virtual ~NicQp() = default;
    virtual const QpRing& ring() const = 0;
    virtual void to_init(const InitAttr& a) = 0;
    virtual void to_rtr(const RtrAttr& a) = 0;
    virtual void to_rts(const RtsAttr& a) = 0;
    virtual void to_error() = 0;
    virtual void reset() = 0;
    virtual QpState state() const = 0;
    virtual QpEndpoint endpoint() const = 0;
    /// Called first when the backend destroys the QP: once it returns, the NIC reads and
    /// writes none of the QP's rings and records, because the backend unmaps them for
    /// kernels (cudaHostUnregister) next and the NIC's QP is destroyed after. A ConnectX
    /// needs nothing here (it reaches the rings through its own DMA mappings, not through
    /// CUDA's); the stand-in NIC's executor is a kernel that reads them through the very
    /// mappings about to go. May be called more than once.
    virtual void stop() noexcept {}
};

class Nic {
public:
    virtual ~Nic() = default;
    virtual std::string name() const = 0;
    /// The facts the decisions take, for a context on `gpu` (-1: CPU threads). Probes what it
    /// must (the UAR mapping with a throwaway page, the GPU's attributes).
    virtual Capabilities capabilities(int gpu) = 0;
    virtual uint32_t pd_alloc() = 0;
    virtual void pd_free(uint32_t pd) = 0;
    virtual MrInfo mr_register(uint32_t pd, void* addr, size_t length, uint32_t access) = 0;
    virtual void mr_deregister(const MrInfo& mr) = 0;
    virtual std::unique_ptr<NicCq> create_cq(uint32_t cqes, Place place) = 0;
    virtual std::unique_ptr<NicQp> create_qp(const QpRequest& r) = 0;
    /// A caveat Context::selection() carries (the real ConnectX path says it has not run on
    /// hardware yet).
    virtual std::string note() const { return {}; }
};

/// The ring sizes of a QP with these options (the same rules as the software device's, and
/// the PRM's limits): send WQEBBs for sq_depth WQEs of the largest WQE the options allow
/// (at least 4), receive entries and stride. InvalidUsage naming the option beyond a limit.
struct QpLayout {
    uint32_t sq_bbs = 0, rq_cnt = 0, rq_stride = 0;
    size_t rq_bytes = 0, sq_bytes = 0;
};
QpLayout qp_layout(const QpOptions& o);
inline constexpr uint32_t kMaxInline = 972;  ///< 63 ds - ctrl - raddr - the inline header
inline constexpr uint32_t kMaxSge = 8;

/// Opens the backend over a NIC (what open_mlx5 does with a ConnectX, and the tests with the
/// stand-in).
std::unique_ptr<BackendOps> open_on(std::unique_ptr<Nic> nic, int gpu, const Mlx5Options& options);

/// The sentence Context::selection() carries for an opened mlx5 backend: queue memory,
/// doorbell handler, read flush, each with why.
std::string describe(const BackendOps& ops);

}  // namespace gv::detail::mlx5be
