#include "verbs/device.hpp"

#include <infiniband/mlx5dv.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "gpuverbs/errors.hpp"

namespace gv::detail::verbs {

std::string errno_text(int err) {
    return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

namespace {

constexpr const char* kNoDeviceFix =
    "load a driver or Soft-RoCE (`modprobe rdma_rxe && rdma link add rxe0 type rxe netdev "
    "NETDEV`), or use Backend::Soft";

struct DeviceList {
    ibv_device** list = nullptr;
    int n = 0;
    DeviceList() {
        errno = 0;
        list = ibv_get_device_list(&n);
        if (!list) {
            int e = errno;
            // ENOSYS: no kernel uverbs support: no device, not a failure to read the list.
            if (e != ENOSYS && e != 0) throw SystemError("ibv_get_device_list failed", e);
            n = 0;
        }
    }
    ~DeviceList() {
        if (list) ibv_free_device_list(list);
    }
    std::vector<std::string> names() const {
        std::vector<std::string> v;
        for (int i = 0; i < n; ++i) v.emplace_back(ibv_get_device_name(list[i]));
        return v;
    }
};

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
}

GidType gid_type_from_ibv(uint32_t t) {
    switch (t) {
    case IBV_GID_TYPE_ROCE_V1: return GidType::RoCEv1;
    case IBV_GID_TYPE_ROCE_V2: return GidType::RoCEv2;
    default: return GidType::IB;
    }
}

GidEntry to_entry(const ibv_gid_entry& g) {
    GidEntry e;
    e.index = g.gid_index;
    std::memcpy(e.gid.data(), g.gid.raw, 16);
    e.type = gid_type_from_ibv(g.gid_type);
    e.ndev_ifindex = g.ndev_ifindex;
    return e;
}

}  // namespace

std::vector<std::string> list_devices() { return DeviceList().names(); }

size_t select_device(const std::vector<std::string>& present, const std::string& requested) {
    if (present.empty())
        throw NotSupported(std::string("no RDMA device: libibverbs found none") +
                           (requested.empty() ? "" : " (asked for '" + requested + "')") + "; " +
                           kNoDeviceFix);
    if (requested.empty()) return 0;
    for (size_t i = 0; i < present.size(); ++i)
        if (present[i] == requested) return i;
    throw InvalidUsage("no RDMA device named '" + requested + "'; devices present: " + join(present));
}

Device::Device(const std::string& name) : Device(name, Open::Verbs) {}

Device::Device(const std::string& name, Open how) {
    DeviceList dl;
    size_t i = select_device(dl.names(), name);
    name_ = ibv_get_device_name(dl.list[i]);
    errno = 0;
    if (how == Open::Mlx5Devx) {
        if (!mlx5dv_is_supported(dl.list[i]))
            throw NotSupported("RDMA device " + name_ + " is not a ConnectX (mlx5): DevX needs an mlx5 device");
        mlx5dv_context_attr attr{};
        attr.flags = MLX5DV_CONTEXT_FLAGS_DEVX;
        ctx_ = mlx5dv_open_device(dl.list[i], &attr);
        if (!ctx_) {
            int e = errno ? errno : EOPNOTSUPP;
            throw VerbsError("mlx5dv_open_device(" + name_ + ", MLX5DV_CONTEXT_FLAGS_DEVX) failed: " +
                                 errno_text(e) +
                                 "; DevX needs the mlx5_ib kernel driver with DevX support (Linux >= 5.1; "
                                 "EOPNOTSUPP: the kernel or firmware does not offer it; EPERM: the user "
                                 "lacks the right, e.g. inside a restricted container)",
                             e);
        }
    } else {
        ctx_ = ibv_open_device(dl.list[i]);
    }
    if (!ctx_) {
        int e = errno ? errno : ENODEV;
        throw VerbsError("ibv_open_device(" + name_ + ") failed: " + errno_text(e) +
                         "; expected an accessible /dev/infiniband/uverbs* (permissions, or the "
                         "device is being removed)", e);
    }
    ibv_device_attr a{};
    if (int e = ibv_query_device(ctx_, &a)) {
        ibv_close_device(ctx_);
        ctx_ = nullptr;
        throw VerbsError("ibv_query_device(" + name_ + ") failed: " + errno_text(e), e);
    }
    caps_.max_qp_wr = uint32_t(a.max_qp_wr);
    caps_.max_sge = uint32_t(a.max_sge);
    caps_.max_cqe = uint32_t(a.max_cqe);
    caps_.max_qp_rd_atom = uint32_t(a.max_qp_rd_atom);
    caps_.max_qp_init_rd_atom = uint32_t(a.max_qp_init_rd_atom);
    caps_.max_mr_size = a.max_mr_size;
    caps_.atomic_cap = a.atomic_cap;
    caps_.phys_port_cnt = a.phys_port_cnt;
    caps_.vendor_id = a.vendor_id;
    caps_.vendor_part_id = a.vendor_part_id;
    caps_.node_guid = be64toh(a.node_guid);
    caps_.fw_ver = a.fw_ver;
}

Device::~Device() {
    if (ctx_) ibv_close_device(ctx_);
}

Device::Device(Device&& o) noexcept
    : ctx_(std::exchange(o.ctx_, nullptr)), name_(std::move(o.name_)), caps_(o.caps_) {}

Device& Device::operator=(Device&& o) noexcept {
    if (this != &o) {
        if (ctx_) ibv_close_device(ctx_);
        ctx_ = std::exchange(o.ctx_, nullptr);
        name_ = std::move(o.name_);
        caps_ = o.caps_;
    }
    return *this;
}

void Device::check_port(uint8_t port_num) const {
    if (!ctx_) throw InvalidUsage("verbs::Device used after it was moved from");
    if (port_num < 1 || port_num > caps_.phys_port_cnt)
        throw InvalidUsage("port " + std::to_string(port_num) + " of " + name_ +
                           ": expected 1.." + std::to_string(caps_.phys_port_cnt));
}

PortInfo Device::port(uint8_t port_num) const {
    check_port(port_num);
    ibv_port_attr a{};
    if (int e = ibv_query_port(ctx_, port_num, &a))
        throw VerbsError("ibv_query_port(" + name_ + ", " + std::to_string(port_num) +
                         ") failed: " + errno_text(e), e);
    PortInfo p;
    p.port = port_num;
    p.state = a.state;
    p.link_layer = link_layer_from_ibv(a.link_layer);
    p.active_mtu = mtu_to_bytes(a.active_mtu);
    p.max_mtu = mtu_to_bytes(a.max_mtu);
    p.lid = a.lid;
    p.gid_tbl_len = a.gid_tbl_len;
    return p;
}

std::vector<GidEntry> Device::gid_table(uint8_t port_num) const {
    PortInfo p = port(port_num);
    std::vector<GidEntry> out;
    // The whole device's table (every port), then this port's entries.
    size_t max = 0;
    for (uint8_t i = 1; i <= caps_.phys_port_cnt; ++i) max += size_t(i == port_num ? p.gid_tbl_len : port(i).gid_tbl_len);
    std::vector<ibv_gid_entry> all(max ? max : 1);
    ssize_t n = ibv_query_gid_table(ctx_, all.data(), all.size(), 0);
    if (n >= 0) {
        for (ssize_t i = 0; i < n; ++i)
            if (all[size_t(i)].port_num == port_num) out.push_back(to_entry(all[size_t(i)]));
        return out;
    }
    // Older kernels: entry by entry. ENODATA / EINVAL: an empty slot.
    for (int i = 0; i < p.gid_tbl_len; ++i) {
        ibv_gid_entry g{};
        int e = ibv_query_gid_ex(ctx_, port_num, uint32_t(i), &g, 0);
        if (e == 0) {
            out.push_back(to_entry(g));
        } else if (e != ENODATA && e != EINVAL && e != ENOENT) {
            throw VerbsError("ibv_query_gid_ex(" + name_ + ", port " + std::to_string(port_num) +
                             ", index " + std::to_string(i) + ") failed: " + errno_text(e), e);
        }
    }
    return out;
}

GidEntry Device::choose_gid(uint8_t port_num, int gid_index) const {
    PortInfo p = port(port_num);
    try {
        return verbs::choose_gid(gid_table(port_num), p.link_layer, gid_index);
    } catch (const InvalidUsage& e) {
        throw InvalidUsage(name_ + " port " + std::to_string(port_num) + ": " + e.what());
    } catch (const NotSupported& e) {
        throw NotSupported(name_ + " port " + std::to_string(port_num) + ": " + e.what());
    }
}

}  // namespace gv::detail::verbs
