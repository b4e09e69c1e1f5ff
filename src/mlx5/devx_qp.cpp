// The QPs of a real ConnectX under the mlx5 backend (devx_objects.hpp): an RC QP created with
// DevX over GPU-memory umems (CREATE_QP, then RST2INIT / INIT2RTR / RTR2RTS, 2ERR, 2RST and
// QUERY_QP through mlx5dv_devx_obj_modify / _query), or with plain verbs for host-memory
// rings. Like all of devx_nic.cpp (which says more), nothing here has run on a ConnectX.
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "mlx5/commands.hpp"
#include "mlx5/devx_objects.hpp"
#include "mlx5/memory.hpp"
#include "verbs/verbs.hpp"

namespace gv::detail::mlx5be::devx {

using verbs::errno_text;

namespace {

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

uint32_t pdn_of(ibv_pd* pd) {
    mlx5dv_pd dv{};
    mlx5dv_obj o{};
    o.pd.in = pd;
    o.pd.out = &dv;
    if (int e = mlx5dv_init_obj(&o, MLX5DV_OBJ_PD)) throw VerbsError("mlx5dv_init_obj(PD) failed: " + errno_text(e), e);
    return dv.pdn;
}

// ---------------------------------------------------------------------------------------
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

std::unique_ptr<NicQp> make_devx_qp(ibv_context* ctx, ibv_pd* pd, int gpu, bool dmabuf, const QpRequest& r,
                                    const PortPath& port) {
    return std::make_unique<DevxQp>(ctx, pd, gpu, dmabuf, r, port);
}

std::unique_ptr<NicQp> make_verbs_host_qp(const verbs::Device& dev, const verbs::Pd& pd, const QpRequest& r,
                                          const PortPath& port, const Mlx5Options& o) {
    return std::make_unique<VerbsHostQp>(dev, pd, r, port, o);
}

}  // namespace gv::detail::mlx5be::devx
