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
// software executor standing in for the NIC (tests/mlx5/), and this file and devx_qp.cpp
// compile; the first run on hardware is `gv_selftest` (docs/mlx5.md).
//
// This file: the umems, DevX objects and UARs (devx_objects.hpp), the CQs, the device and its
// probes. The QPs and their state changes are devx_qp.cpp.
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <map>
#include <sstream>

#include "cuda/cuda_rt.hpp"
#include "mlx5/commands.hpp"
#include "mlx5/devx_nic.hpp"
#include "mlx5/devx_objects.hpp"
#include "mlx5/gpu_access.hpp"
#include "mlx5/memory.hpp"
#include "verbs/verbs.hpp"

namespace gv::detail::mlx5be {

using devx::alloc_uar;
using devx::devx_create;
using devx::kGpuAlign;
using devx::make_devx_qp;
using devx::make_verbs_host_qp;
using devx::PortPath;
using devx::register_umem;
using devx::Umem;
using devx::VerbsCq;
using verbs::errno_text;

namespace {

constexpr uint64_t kUmemPageSizes = 4096;  // umems of 4 KiB pages: log_page_size 0, page_offset 0

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

}  // namespace

void devx::register_umem(Umem& u, ibv_context* ctx, void* p, size_t bytes, bool gpu_memory, bool dmabuf, const char* what) {
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

mlx5dv_devx_obj* devx::devx_create(ibv_context* ctx, const prm::Cmd& in, const char* what, prm::Cmd& out) {
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

mlx5dv_devx_uar* devx::alloc_uar(ibv_context* ctx, std::string* tried) {
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

namespace {

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

}  // namespace

devx::VerbsCq::VerbsCq(const verbs::Device& dev, uint32_t cqes) : cq_(dev, int(cqes - 1)) {
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
        return make_devx_qp(m.dev->get(), pd->get(), m.gpu, m.dmabuf, r, m.port);
    }
    return make_verbs_host_qp(*m.dev, *pd, r, m.port, m.opts);
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
