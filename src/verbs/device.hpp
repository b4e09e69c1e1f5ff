// An opened libibverbs device (RAII), its capabilities, ports and GID tables.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <vector>

#include "verbs/addressing.hpp"

namespace gv::detail::verbs {

/// "Invalid argument (errno 22)".
std::string errno_text(int err);

/// Names of the RDMA devices libibverbs sees, in its order. Empty when there are none (also
/// when the kernel has no uverbs support). SystemError only when the list cannot be read.
std::vector<std::string> list_devices();

/// Which of `present` to open: `requested` empty = the first. Throws NotSupported naming the fix
/// when `present` is empty, InvalidUsage listing `present` for an unknown name. Pure.
size_t select_device(const std::vector<std::string>& present, const std::string& requested);

/// What the device allows (from ibv_query_device).
struct DeviceCaps {
    uint32_t max_qp_wr = 0;
    uint32_t max_sge = 0;
    uint32_t max_cqe = 0;
    uint32_t max_qp_rd_atom = 0;       ///< incoming RDMA READ/atomic per QP (max_dest_rd_atomic)
    uint32_t max_qp_init_rd_atom = 0;  ///< outgoing RDMA READ/atomic per QP (max_rd_atomic)
    uint64_t max_mr_size = 0;
    ibv_atomic_cap atomic_cap = IBV_ATOMIC_NONE;
    uint8_t phys_port_cnt = 0;
    uint32_t vendor_id = 0;
    uint32_t vendor_part_id = 0;
    uint64_t node_guid = 0;  ///< host byte order
    std::string fw_ver;
};

struct PortInfo {
    uint8_t port = 0;
    ibv_port_state state = IBV_PORT_NOP;
    LinkLayer link_layer = LinkLayer::Unspecified;
    uint32_t active_mtu = 0;  ///< bytes
    uint32_t max_mtu = 0;     ///< bytes
    uint16_t lid = 0;         ///< InfiniBand only
    int gid_tbl_len = 0;
    bool active() const { return state == IBV_PORT_ACTIVE; }
};

class Device {
public:
    /// Opens `name` ("" = the first device). NotSupported when there is no RDMA device at all,
    /// InvalidUsage (listing the devices present) for an unknown name, VerbsError when
    /// ibv_open_device or ibv_query_device fails.
    explicit Device(const std::string& name = "");
    /// How a device is opened: plain verbs, or an mlx5 device with DevX enabled
    /// (mlx5dv_open_device with MLX5DV_CONTEXT_FLAGS_DEVX), which the mlx5 backend needs to
    /// create its queues with PRM commands.
    enum class Open { Verbs, Mlx5Devx };
    /// As above; Open::Mlx5Devx throws NotSupported for a device that is not mlx5, and
    /// VerbsError (the errno and the likely cause) when DevX cannot be enabled.
    Device(const std::string& name, Open how);
    ~Device();
    Device(Device&&) noexcept;
    Device& operator=(Device&&) noexcept;
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    ibv_context* get() const { return ctx_; }
    const std::string& name() const { return name_; }
    const DeviceCaps& caps() const { return caps_; }

    /// Queries a port (1..phys_port_cnt, else InvalidUsage).
    PortInfo port(uint8_t port_num) const;
    /// The port's valid GID entries, with their types (ibv_query_gid_table, or entry by entry
    /// with ibv_query_gid_ex where the table call is not supported).
    std::vector<GidEntry> gid_table(uint8_t port_num) const;
    /// choose_gid() over this port's table and link layer (gid_index < 0: the default rule).
    GidEntry choose_gid(uint8_t port_num, int gid_index = -1) const;

private:
    void check_port(uint8_t port_num) const;

    ibv_context* ctx_ = nullptr;
    std::string name_;
    DeviceCaps caps_;
};

}  // namespace gv::detail::verbs
