// A real ConnectX under the mlx5 backend (nic.hpp): opened with DevX through libmlx5.
//
//   GPU-memory rings (Place::Gpu): the CQ ring and the QP's work queue (receive ring, then
//     send ring) are cudaMalloc'd, registered as DevX umems (dma-buf first:
//     mlx5dv_devx_umem_reg_ex with MLX5DV_UMEM_MASK_DMABUF on a cuMemGetHandleForAddressRange
//     fd; else nvidia-peermem: mlx5dv_devx_umem_reg on the GPU address), and the CQ and RC QP
//     are created with the PRM's CREATE_CQ / CREATE_QP (commands.hpp) through
//     mlx5dv_devx_obj_create; the state changes are RST2INIT / INIT2RTR / RTR2RTS through
//     mlx5dv_devx_obj_modify. Each QP has its own UAR (mlx5dv_devx_alloc_uar: NC_DEDICATED,
//     else NC, else BF). The CQ ring starts all 0xff (every CQE invalid, as the NIC expects).
//   Host-memory rings (Place::Host): the CQ and QP are created with plain verbs
//     (ibv_create_cq, ibv_create_qp through the verbs control layer) and their rings, doorbell
//     records and BlueFlame register are reached through mlx5dv_init_obj; the backend maps them
//     for kernels (cudaHostRegister). Needs no DevX.
//
// NOTHING HERE HAS RUN ON A CONNECTX: no machine the project had has one. The PRM images are
// unit-tested against rdma-core's layouts, the device path above this file runs against the
// software executor standing in for the NIC (tests/mlx5/), and this file compiles; the first
// run on hardware is `gv_selftest` (docs/mlx5.md).
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "cuda/cuda_rt.hpp"
#include "mlx5/commands.hpp"
#include "mlx5/devx_nic.hpp"
#include "mlx5/gpu_access.hpp"
#include "mlx5/memory.hpp"
#include "verbs/verbs.hpp"

namespace gv::detail::mlx5be {

using verbs::errno_text;

namespace {

constexpr size_t kGpuAlign = 64 * 1024;  // GPU pages: a umem starts on one
constexpr uint64_t kUmemPageSizes = 4096;  // umems of 4 KiB pages: log_page_size 0, page_offset 0

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

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
void register_umem(Umem& u, ibv_context* ctx, void* p, size_t bytes, bool gpu_memory, bool dmabuf, const char* what) {
    std::string dmabuf_err;
    if (gpu_memory && dmabuf) {
        int fd = gpu_dmabuf_fd(p, bytes, &dmabuf_err);
        if (fd >= 0) {
            mlx5dv_devx_umem_in in{};
            in.addr = nullptr;  // with a dma-buf: the offset into it
            in.size = bytes;
            in.access = IBV_ACCESS_LOCAL_WRITE;
            in.pgsz_bitmap = kUmemPageSizes;
            in.comp_mask = MLX5DV_UMEM_MASK_DMABUF;
            in.dmabuf_fd = fd;
            errno = 0;
            u.umem = mlx5dv_devx_umem_reg_ex(ctx, &in);
            int e = errno;
            close(fd);
            if (u.umem) return;
            dmabuf_err = "mlx5dv_devx_umem_reg_ex(dma-buf, " + std::to_string(bytes) + " bytes) failed: " + errno_text(e ? e : EINVAL);
        }
        if (!verbs::peermem_loaded())
            throw NotSupported(std::string(what) + " in GPU memory: " + dmabuf_err +
                               "; and nvidia-peermem is not loaded (fix: `modprobe nvidia-peermem`)");
    }
    mlx5dv_devx_umem_in in{};
    in.addr = p;
    in.size = bytes;
    in.access = IBV_ACCESS_LOCAL_WRITE;
    in.pgsz_bitmap = kUmemPageSizes;
    errno = 0;
    u.umem = mlx5dv_devx_umem_reg_ex(ctx, &in);
    if (!u.umem) {
        int e = errno ? errno : EINVAL;
        throw VerbsError(std::string("mlx5dv_devx_umem_reg_ex(") + what + ", " + hex(reinterpret_cast<uintptr_t>(p)) +
                             ", " + std::to_string(bytes) + " bytes" + (gpu_memory ? ", GPU memory through nvidia-peermem" : "") +
                             ") failed: " + errno_text(e) + (dmabuf_err.empty() ? "" : "; dma-buf before it: " + dmabuf_err),
                         e);
    }
}

/// Runs a DevX command that creates an object (its output in *out); the output's status and
/// syndrome on failure.
mlx5dv_devx_obj* devx_create(ibv_context* ctx, const prm::Cmd& in, const char* what, prm::Cmd& out) {
    errno = 0;
    mlx5dv_devx_obj* o = mlx5dv_devx_obj_create(ctx, in.data(), in.bytes(), out.data(), out.bytes());
    if (!o) {
        int e = errno ? errno : EIO;
        throw VerbsError("mlx5dv_devx_obj_create(" + std::string(what) + ") failed: " + errno_text(e) + "; " +
                             cmd_status_text(what, uint32_t(out.get(prm::cmd_out::status)),
                                             uint32_t(out.get(prm::cmd_out::syndrome))),
                         e);
    }
    return o;
}

void devx_modify(mlx5dv_devx_obj* o, const prm::Cmd& in, const std::string& what) {
    prm::Cmd out(prm::cmd_out::kBits, "out");
    int e = mlx5dv_devx_obj_modify(o, in.data(), in.bytes(), out.data(), out.bytes());
    if (e) {
        if (e < 0) e = -e;
        throw VerbsError("mlx5dv_devx_obj_modify(" + what + ") failed: " + errno_text(e) + "; " +
                             cmd_status_text(in.what(), uint32_t(out.get(prm::cmd_out::status)),
                                             uint32_t(out.get(prm::cmd_out::syndrome))),
                         e);
    }
}

/// A UAR for a QP's doorbell: a dedicated non-cached page where the library offers one, else a
/// non-cached one, else a BlueFlame (write-combining) one.
mlx5dv_devx_uar* alloc_uar(ibv_context* ctx, std::string* tried) {
    struct Kind {
        uint32_t flags;
        const char* name;
    };
    const Kind kinds[] = {
#ifdef MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED
        {MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED, "NC_DEDICATED"},
#endif
        {MLX5DV_UAR_ALLOC_TYPE_NC, "NC"},
        {MLX5DV_UAR_ALLOC_TYPE_BF, "BF"},
    };
    for (const Kind& k : kinds) {
        errno = 0;
        mlx5dv_devx_uar* u = mlx5dv_devx_alloc_uar(ctx, k.flags);
        if (u) return u;
        if (tried) *tried += std::string(tried->empty() ? "" : ", ") + k.name + ": " + errno_text(errno ? errno : ENOMEM);
    }
    return nullptr;
}

uint32_t pdn_of(ibv_pd* pd) {
    mlx5dv_pd dv{};
    mlx5dv_obj o{};
    o.pd.in = pd;
    o.pd.out = &dv;
    if (int e = mlx5dv_init_obj(&o, MLX5DV_OBJ_PD)) throw VerbsError("mlx5dv_init_obj(PD) failed: " + errno_text(e), e);
    return dv.pdn;
}

// ---------------------------------------------------------------------------------------
/// A CQ created with DevX over a GPU-memory umem.
class DevxCq final : public NicCq {
public:
    DevxCq(ibv_context* ctx, int gpu, bool dmabuf, uint32_t cqes, uint32_t uar_page, uint32_t eqn) {
        const size_t ring = size_t(cqes) * 64;
        const size_t bytes = round_up(ring + 64, kGpuAlign);
        mem_ = gpu_alloc(gpu, bytes, kGpuAlign, 0);
        cuda::memset_device(mem_.ptr, 0xff, ring);  // every CQE invalid (opcode 0xf), as the NIC expects
        register_umem(umem_, ctx, mem_.ptr, bytes, true, dmabuf, "CQ ring");
        CqParams p;
        p.log_cq_size = log2u(cqes);
        p.uar_page = uar_page;
        p.eqn = eqn;
        p.cq_umem_id = umem_.id();
        p.cq_umem_offset = 0;
        p.dbr_umem_id = umem_.id();
        p.dbr_offset = ring;
        prm::Cmd out(prm::create_cq_out::kBits, "CREATE_CQ out");
        obj_ = devx_create(ctx, create_cq_cmd(p), "CREATE_CQ", out);
        ring_.cqes = static_cast<mlx5_cqe64*>(mem_.ptr);
        ring_.dbrec = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(mem_.ptr) + ring);
        ring_.log_cnt = p.log_cq_size;
        ring_.cqn = uint32_t(out.get(prm::create_cq_out::cqn));
        ring_.place = Place::Gpu;
    }
    ~DevxCq() override {
        if (obj_) mlx5dv_devx_obj_destroy(obj_);
        umem_.reset();  // the NIC lets go of the memory before it is freed
        gpu_free(mem_);
    }
    const CqRing& ring() const override { return ring_; }

private:
    GpuBlock mem_;
    Umem umem_;
    mlx5dv_devx_obj* obj_ = nullptr;
    CqRing ring_;
};

/// A CQ created with verbs; its ring in libmlx5's host memory.
class VerbsCq final : public NicCq {
public:
    VerbsCq(const verbs::Device& dev, uint32_t cqes) : cq_(dev, int(cqes - 1)) {
        mlx5dv_cq dv{};
        mlx5dv_obj o{};
        o.cq.in = cq_.get();
        o.cq.out = &dv;
        if (int e = mlx5dv_init_obj(&o, MLX5DV_OBJ_CQ)) throw VerbsError("mlx5dv_init_obj(CQ) failed: " + errno_text(e), e);
        if (dv.cqe_size != 64)
            throw NotSupported("libmlx5 made " + std::to_string(dv.cqe_size) +
                               "-byte CQEs (MLX5_CQE_SIZE in the environment?): the device code reads 64-byte CQEs");
        ring_.cqes = static_cast<mlx5_cqe64*>(dv.buf);
        ring_.dbrec = reinterpret_cast<uint32_t*>(dv.dbrec);
        ring_.log_cnt = log2u(dv.cqe_cnt);
        ring_.cqn = dv.cqn;
        ring_.place = Place::Host;
    }
    const CqRing& ring() const override { return ring_; }
    const verbs::Cq& cq() const { return cq_; }

private:
    verbs::Cq cq_;
    CqRing ring_;
};

// ---------------------------------------------------------------------------------------
/// What both QP kinds share: the port's addressing and the endpoint.
struct PortPath {
    verbs::LocalPath path;
    verbs::DeviceCaps caps;
    std::string device;
};

QpEndpoint endpoint_of(const PortPath& p, uint32_t qpn, uint32_t psn) {
    QpEndpoint e;
    e.backend = Backend::Mlx5;
    e.qpn = qpn;
    e.psn = psn;
    e.lid = p.path.lid;
    e.gid = p.path.sgid.gid;
    e.mtu = p.path.active_mtu ? p.path.active_mtu : 1024;
    e.device = p.device;
    return e;
}

uint32_t random_psn() {
    std::random_device rd;
    return rd() & 0xffffff;
}

/// An RC QP created with DevX over GPU-memory umems.
class DevxQp final : public NicQp {
public:
    DevxQp(ibv_context* ctx, ibv_pd* pd, int gpu, bool dmabuf, const QpRequest& r, const PortPath& port)
        : ctx_(ctx), pd_(pd), port_(port), psn_(random_psn()) {
        const size_t rq_bytes = size_t(r.rq_cnt) * r.rq_stride, sq_bytes = size_t(r.sq_bbs) * 64;
        const size_t wq_bytes = rq_bytes + sq_bytes;
        // The work queue and, unless a CPU proxy writes it, the doorbell record after it, in one
        // GPU allocation and one umem.
        const size_t bytes = round_up(wq_bytes + (r.dbrec_host ? 0 : 64), kGpuAlign);
        mem_ = gpu_alloc(gpu, bytes, kGpuAlign, 0);
        register_umem(wq_umem_, ctx, mem_.ptr, bytes, true, dmabuf, "QP work queue");
        uint8_t* base = static_cast<uint8_t*>(mem_.ptr);
        uint32_t dbr_umem = wq_umem_.id();
        uint64_t dbr_off = wq_bytes;
        if (r.dbrec_host) {
            host_dbrec_ = alloc_block(-1, Place::Host, 4096, 4096, 0);
            register_umem(dbr_umem_, ctx, host_dbrec_.p, 4096, false, false, "QP doorbell record");
            dbr_umem = dbr_umem_.id();
            dbr_off = 0;
            ring_.dbrec = host_dbrec_.at<uint32_t>(0);
            ring_.dbrec_place = Place::Host;
        } else {
            ring_.dbrec = reinterpret_cast<uint32_t*>(base + wq_bytes);
            ring_.dbrec_place = Place::Gpu;
        }
        std::string tried;
        uar_ = alloc_uar(ctx, &tried);
        if (!uar_) throw VerbsError("mlx5dv_devx_alloc_uar failed for every kind (" + tried + ")", ENOMEM);
        QpParams p;
        p.pdn = pdn_of(pd);
        p.uar_page = uar_->page_id;
        p.cqn_snd = r.scq->ring().cqn;
        p.cqn_rcv = r.rcq->ring().cqn;
        p.log_sq_size = log2u(r.sq_bbs);
        p.log_rq_size = log2u(r.rq_cnt);
        p.log_rq_stride = log2u(r.rq_stride);
        p.wq_umem_id = wq_umem_.id();
        p.wq_umem_offset = 0;
        p.dbr_umem_id = dbr_umem;
        p.dbr_offset = dbr_off;
        // The timestamp format: free-running first; a device that offers only its default
        // (newer firmware) refuses it, so the default second.
        prm::Cmd out(prm::create_qp_out::kBits, "CREATE_QP out");
        try {
            p.ts_format = prm::kQpcTsFormatFreeRunning;
            obj_ = devx_create(ctx, create_qp_cmd(p), "CREATE_QP", out);
        } catch (const VerbsError& first) {
            p.ts_format = prm::kQpcTsFormatDefault;
            try {
                obj_ = devx_create(ctx, create_qp_cmd(p), "CREATE_QP", out);
            } catch (const VerbsError& second) {
                throw VerbsError(std::string(first.what()) + "; with ts_format DEFAULT: " + second.what(),
                                 second.error_code());
            }
        }
        ring_.rq = base;
        ring_.sq = base + rq_bytes;
        ring_.qpn = uint32_t(out.get(prm::create_qp_out::qpn));
        ring_.sq_log_bb = p.log_sq_size;
        ring_.rq_log_cnt = p.log_rq_size;
        ring_.rq_log_stride = p.log_rq_stride;
        ring_.max_inline = r.max_inline;
        ring_.max_send_sge = r.max_send_sge;
        ring_.max_recv_sge = r.max_recv_sge;
        ring_.place = Place::Gpu;
        ring_.uar = static_cast<uint64_t*>(uar_->reg_addr);
        ring_.uar_io = true;
    }
    ~DevxQp() override {
        if (obj_) mlx5dv_devx_obj_destroy(obj_);
        if (uar_) mlx5dv_devx_free_uar(uar_);
        dbr_umem_.reset();  // the NIC lets go of the memory before it is freed
        wq_umem_.reset();
        free_block(host_dbrec_);
        gpu_free(mem_);
    }
    const QpRing& ring() const override { return ring_; }

    void to_init(const InitAttr& a) override {
        InitAttr x = a;
        if (x.port == 1 && port_.path.port != 1) x.port = port_.path.port;
        verbs::Transition t = verbs::init_transition(x, port_.path);
        devx_modify(obj_, rst2init_cmd(ring_.qpn, t.attr), "RST2INIT_QP of QP " + hex(ring_.qpn));
    }
    void to_rtr(const RtrAttr& a) override {
        verbs::Transition t = verbs::rtr_transition(a, port_.path, port_.caps);
        RoceExtra roce;
        if (port_.path.link == verbs::LinkLayer::Ethernet) {
            roce.roce = true;
            roce.v2 = port_.path.sgid.type == verbs::GidType::RoCEv2;
            roce.dmac = resolve_dmac(t.attr.ah_attr);
            roce.udp_sport = uint16_t(0xc000 | ((ring_.qpn ^ a.remote_qpn) & 0x3fff));
        }
        devx_modify(obj_, init2rtr_cmd(ring_.qpn, t.attr, roce), "INIT2RTR_QP of QP " + hex(ring_.qpn));
    }
    void to_rts(const RtsAttr& a) override {
        verbs::Transition t = verbs::rts_transition(a, port_.caps);
        devx_modify(obj_, rtr2rts_cmd(ring_.qpn, t.attr), "RTR2RTS_QP of QP " + hex(ring_.qpn));
    }
    void to_error() override { devx_modify(obj_, qp_2err_cmd(ring_.qpn), "2ERR_QP of QP " + hex(ring_.qpn)); }
    void reset() override { devx_modify(obj_, qp_2rst_cmd(ring_.qpn), "2RST_QP of QP " + hex(ring_.qpn)); }
    QpState state() const override {
        prm::Cmd in = query_qp_cmd(ring_.qpn);
        std::vector<uint8_t> out(prm::query_qp_out::kBits / 8 + 512, 0);
        int e = mlx5dv_devx_obj_query(obj_, in.data(), in.bytes(), out.data(), out.size());
        if (e)
            throw VerbsError("mlx5dv_devx_obj_query(QUERY_QP of QP " + hex(ring_.qpn) + ") failed: " + errno_text(e < 0 ? -e : e),
                             e < 0 ? -e : e);
        return qp_state_from_prm(
            uint32_t(prm::get_field(out.data(), out.size(), prm::at(prm::query_qp_out::qpc, prm::qpc::state))));
    }
    QpEndpoint endpoint() const override { return endpoint_of(port_, ring_.qpn, psn_); }

private:
    /// The destination MAC of a RoCE path, resolved by the kernel: an address handle is created
    /// for the peer's GID and its mlx5 address vector read back (as NVSHMEM does).
    std::array<uint8_t, 6> resolve_dmac(const ibv_ah_attr& attr) {
        ibv_ah_attr a = attr;
        errno = 0;
        ibv_ah* ah = ibv_create_ah(pd_, &a);
        if (!ah) {
            int e = errno ? errno : EINVAL;
            throw VerbsError("ibv_create_ah (resolving the peer's MAC for QP " + hex(ring_.qpn) + ") failed: " + errno_text(e) +
                                 "; expected the peer's GID reachable from the source GID's netdev (a route, a neighbour)",
                             e);
        }
        mlx5dv_ah dv{};
        mlx5dv_obj o{};
        o.ah.in = ah;
        o.ah.out = &dv;
        int e = mlx5dv_init_obj(&o, MLX5DV_OBJ_AH);
        std::array<uint8_t, 6> mac{};
        if (!e) std::memcpy(mac.data(), dv.av->rmac, 6);
        ibv_destroy_ah(ah);
        if (e) throw VerbsError("mlx5dv_init_obj(AH) failed: " + errno_text(e), e);
        return mac;
    }

    ibv_context* ctx_;
    ibv_pd* pd_;
    PortPath port_;
    uint32_t psn_;
    GpuBlock mem_;
    Block host_dbrec_;
    Umem wq_umem_, dbr_umem_;
    mlx5dv_devx_uar* uar_ = nullptr;
    mlx5dv_devx_obj* obj_ = nullptr;
    QpRing ring_;
};

/// An RC QP created with verbs; its rings, record and BlueFlame register in libmlx5's memory.
class VerbsHostQp final : public NicQp {
public:
    VerbsHostQp(const verbs::Device& dev, const verbs::Pd& pd, const QpRequest& r, const PortPath& port,
                const Mlx5Options& o)
        : qp_(dev, pd, cq_of(r.scq), cq_of(r.rcq), config(r, o)), port_(port) {
        mlx5dv_qp dv{};
        mlx5dv_obj obj{};
        obj.qp.in = qp_.get();
        obj.qp.out = &dv;
        if (int e = mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP)) throw VerbsError("mlx5dv_init_obj(QP) failed: " + errno_text(e), e);
        if (dv.sq.stride != 64)
            throw NotSupported("libmlx5 gave QP " + hex(qp_.qpn()) + " a send stride of " + std::to_string(dv.sq.stride) +
                               " bytes: expected 64-byte WQEBBs");
        ring_.sq = static_cast<uint8_t*>(dv.sq.buf);
        ring_.rq = static_cast<uint8_t*>(dv.rq.buf);
        ring_.dbrec = reinterpret_cast<uint32_t*>(dv.dbrec);
        ring_.qpn = qp_.qpn();
        ring_.sq_log_bb = log2u(dv.sq.wqe_cnt);
        ring_.rq_log_cnt = log2u(dv.rq.wqe_cnt ? dv.rq.wqe_cnt : 1);
        ring_.rq_log_stride = log2u(dv.rq.stride ? dv.rq.stride : 16);
        ring_.max_inline = std::min(qp_.caps().max_inline, kMaxInline);
        ring_.max_send_sge = std::min(qp_.caps().max_send_sge, kMaxSge);
        ring_.max_recv_sge = std::min(qp_.caps().max_recv_sge, kMaxSge);
        ring_.place = Place::Host;
        ring_.dbrec_place = Place::Host;
        ring_.uar = static_cast<uint64_t*>(dv.bf.reg);
        ring_.uar_io = true;
    }
    const QpRing& ring() const override { return ring_; }
    void to_init(const InitAttr& a) override { qp_.to_init(a); }
    void to_rtr(const RtrAttr& a) override { qp_.to_rtr(a); }
    void to_rts(const RtsAttr& a) override { qp_.to_rts(a); }
    void to_error() override { qp_.to_error(); }
    void reset() override { qp_.reset(); }
    QpState state() const override { return QpState(uint32_t(qp_.state())); }
    QpEndpoint endpoint() const override { return endpoint_of(port_, qp_.qpn(), qp_.psn()); }

private:
    static const verbs::Cq& cq_of(NicCq* c) {
        auto* v = dynamic_cast<VerbsCq*>(c);
        if (!v)
            throw InvalidUsage("a QP with host-memory queues (created by libmlx5) needs CQs with host-memory rings "
                               "(CqOptions::memory = MemoryKind::Host)");
        return v->cq();
    }
    static verbs::QpConfig config(const QpRequest& r, const Mlx5Options& o) {
        verbs::QpConfig c;
        c.sq_depth = r.sq_depth;
        c.rq_depth = r.rq_depth;
        c.max_send_sge = r.max_send_sge;
        c.max_recv_sge = r.max_recv_sge;
        c.max_inline = r.max_inline;
        c.port = o.port;
        c.gid_index = o.gid_index;
        return c;
    }
    verbs::RcQp qp_;
    PortPath port_;
    QpRing ring_;
};

}  // namespace

// ---------------------------------------------------------------------------------------
struct DevxNic::Impl {
    std::unique_ptr<verbs::Device> dev;
    bool devx = false;
    std::string devx_error;
    int gpu = -1;
    Mlx5Options opts;
    PortPath port;
    std::map<uint32_t, std::unique_ptr<verbs::Pd>> pds;
    uint32_t next_pd = 1;
    std::map<uint32_t, std::unique_ptr<verbs::Mr>> mrs;  // by lkey
    std::mutex mu;
    mlx5dv_devx_uar* cq_uar = nullptr;  // the UAR page CQs name (arming; unused when polling)
    uint32_t eqn = 0;
    bool dmabuf = false;
};

DevxNic::DevxNic(const std::string& device, int gpu, const Mlx5Options& o) : impl_(std::make_unique<Impl>()) {
    Impl& m = *impl_;
    m.gpu = gpu;
    m.opts = o;
    try {
        m.dev = std::make_unique<verbs::Device>(device, verbs::Device::Open::Mlx5Devx);
        m.devx = true;
    } catch (const VerbsError& e) {
        // No DevX: host-memory queues created with verbs still work.
        m.devx_error = e.what();
        m.dev = std::make_unique<verbs::Device>(device);
    }
    verbs::PortInfo pi = m.dev->port(o.port);
    m.port.device = m.dev->name();
    m.port.caps = m.dev->caps();
    m.port.path.port = o.port;
    m.port.path.link = pi.link_layer;
    m.port.path.lid = pi.lid;
    m.port.path.active_mtu = pi.active_mtu;
    m.port.path.sgid = m.dev->choose_gid(o.port, o.gid_index);
    if (m.devx) {
        std::string tried;
        m.cq_uar = alloc_uar(m.dev->get(), &tried);
        if (!m.cq_uar) {
            m.devx = false;
            m.devx_error = "mlx5dv_devx_alloc_uar failed for every kind (" + tried + ")";
        } else if (int e = mlx5dv_devx_query_eqn(m.dev->get(), 0, &m.eqn)) {
            m.devx = false;
            m.devx_error = "mlx5dv_devx_query_eqn(0) failed: " + errno_text(e < 0 ? -e : e);
        }
    }
}

DevxNic::~DevxNic() {
    if (impl_->cq_uar) mlx5dv_devx_free_uar(impl_->cq_uar);
}

std::string DevxNic::name() const { return impl_->dev->name(); }

std::string DevxNic::note() const {
    return "the mlx5 backend has not run on ConnectX hardware yet: run gv_selftest on this machine first";
}

Capabilities DevxNic::capabilities(int gpu) {
    Impl& m = *impl_;
    Capabilities c = probe_capabilities(m.dev->get(), m.dev->name(), m.devx, gpu);
    c.devx_error = m.devx_error;
    m.dmabuf = c.dmabuf;
    return c;
}

uint32_t DevxNic::pd_alloc() {
    std::lock_guard<std::mutex> lock(impl_->mu);
    uint32_t id = impl_->next_pd++;
    impl_->pds[id] = std::make_unique<verbs::Pd>(*impl_->dev);
    return id;
}

void DevxNic::pd_free(uint32_t pd) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->pds.erase(pd);
}

MrInfo DevxNic::mr_register(uint32_t pd, void* addr, size_t length, uint32_t access) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->pds.find(pd);
    GV_REQUIRE(it != impl_->pds.end(), "protection domain " + std::to_string(pd) + " is not of " + name());
    int owner = -1;
    const bool gpu_mem = cuda::built() && cuda::pointer_kind(addr, &owner) == cuda::PtrKind::Device;
    auto mr = std::make_unique<verbs::Mr>(gpu_mem ? verbs::Mr::gpu(*it->second, addr, length, access)
                                                  : verbs::Mr::host(*it->second, addr, length, access));
    MrInfo info;
    info.lkey = mr->lkey();
    info.rkey = mr->rkey();
    info.device_memory = gpu_mem;
    impl_->mrs[info.lkey] = std::move(mr);
    return info;
}

void DevxNic::mr_deregister(const MrInfo& mr) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->mrs.erase(mr.lkey);
}

std::unique_ptr<NicCq> DevxNic::create_cq(uint32_t cqes, Place place) {
    Impl& m = *impl_;
    if (place == Place::Gpu) {
        GV_REQUIRE(m.devx, "GPU-memory CQ rings need DevX: " + m.devx_error);
        return std::make_unique<DevxCq>(m.dev->get(), m.gpu, m.dmabuf, cqes, m.cq_uar->page_id, m.eqn);
    }
    return std::make_unique<VerbsCq>(*m.dev, cqes);
}

std::unique_ptr<NicQp> DevxNic::create_qp(const QpRequest& r) {
    Impl& m = *impl_;
    verbs::Pd* pd = nullptr;
    {
        std::lock_guard<std::mutex> lock(m.mu);
        auto it = m.pds.find(r.pd);
        GV_REQUIRE(it != m.pds.end(), "protection domain " + std::to_string(r.pd) + " is not of " + name());
        pd = it->second.get();
    }
    if (r.place == Place::Gpu) {
        GV_REQUIRE(m.devx, "GPU-memory QP rings need DevX: " + m.devx_error);
        return std::make_unique<DevxQp>(m.dev->get(), pd->get(), m.gpu, m.dmabuf, r, m.port);
    }
    return std::make_unique<VerbsHostQp>(*m.dev, *pd, r, m.port, m.opts);
}

// ---------------------------------------------------------------------------------------
std::string nic_sysfs(const std::string& name) {
    char real[PATH_MAX];
    std::string link = "/sys/class/infiniband/" + name + "/device";
    return realpath(link.c_str(), real) ? std::string(real) : std::string();
}

std::string probe_uar_mapping(ibv_context* ctx, bool devx, int gpu) {
    if (gpu < 0) return "no GPU";
    if (devx) {
        std::string tried;
        mlx5dv_devx_uar* u = alloc_uar(ctx, &tried);
        if (!u) return "mlx5dv_devx_alloc_uar failed (" + tried + ")";
        std::string err = try_map_io(gpu, u->reg_addr, 8);
        mlx5dv_devx_free_uar(u);
        return err;
    }
    // Without DevX: the BlueFlame register of a throwaway verbs QP.
    ibv_pd* pd = ibv_alloc_pd(ctx);
    if (!pd) return "ibv_alloc_pd failed: " + errno_text(errno);
    ibv_cq* cq = ibv_create_cq(ctx, 2, nullptr, nullptr, 0);
    std::string err;
    ibv_qp* qp = nullptr;
    if (!cq) {
        err = "ibv_create_cq failed: " + errno_text(errno);
    } else {
        ibv_qp_init_attr a{};
        a.send_cq = a.recv_cq = cq;
        a.qp_type = IBV_QPT_RC;
        a.cap.max_send_wr = a.cap.max_recv_wr = 1;
        a.cap.max_send_sge = a.cap.max_recv_sge = 1;
        qp = ibv_create_qp(pd, &a);
        if (!qp) {
            err = "ibv_create_qp failed: " + errno_text(errno);
        } else {
            mlx5dv_qp dv{};
            mlx5dv_obj o{};
            o.qp.in = qp;
            o.qp.out = &dv;
            if (int e = mlx5dv_init_obj(&o, MLX5DV_OBJ_QP)) err = "mlx5dv_init_obj(QP) failed: " + errno_text(e);
            else err = try_map_io(gpu, dv.bf.reg, 8);
        }
    }
    if (qp) ibv_destroy_qp(qp);
    if (cq) ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    return err;
}

Capabilities probe_capabilities(ibv_context* ctx, const std::string& name, bool devx, int gpu) {
    Capabilities c;
    c.cuda_built = cuda::built();
    c.gpu = gpu;
    c.devx = devx;
    c.peermem = verbs::peermem_loaded();
    c.peer_mapping_override = peer_mapping_override_from_params(read_file("/proc/driver/nvidia/params"));
    if (gpu >= 0) {
        GpuFacts g = probe_gpu(gpu);
        c.dmabuf = g.dmabuf == 1;
        c.gdr_writes_ordering = g.gdr_writes_ordering;
        c.pcie = pcie_relation(g.sysfs, nic_sysfs(name));
        c.uar_map_error = probe_uar_mapping(ctx, devx, gpu);
        c.uar_mappable = c.uar_map_error.empty();
    }
    return c;
}

}  // namespace gv::detail::mlx5be
