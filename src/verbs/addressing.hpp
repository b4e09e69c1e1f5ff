// Addressing facts of a port and the pure rules over them: GID table entries and their types,
// the choice of the source GID, path MTU conversions. No device calls here, so the rules are
// unit-tested on any machine (tests/verbs/verbs_unit_test.cpp).
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace gv::detail::verbs {

enum class LinkLayer { InfiniBand, Ethernet, Unspecified };
const char* link_layer_name(LinkLayer l);
/// From ibv_port_attr::link_layer (IBV_LINK_LAYER_*).
LinkLayer link_layer_from_ibv(uint8_t ll);

/// GID types as the kernel reports them (ibv_gid_type of ibv_query_gid_ex).
enum class GidType { IB, RoCEv1, RoCEv2 };
const char* gid_type_name(GidType t);

using Gid = std::array<uint8_t, 16>;

struct GidEntry {
    uint32_t index = 0;
    Gid gid{};
    GidType type = GidType::IB;
    uint32_t ndev_ifindex = 0;  ///< netdev the GID belongs to (0 on IB ports)
};

/// "fe80::1", "::ffff:10.0.0.1" (IPv4-mapped shown as such).
std::string gid_to_string(const Gid& g);
/// ::ffff:a.b.c.d
bool gid_is_ipv4_mapped(const Gid& g);
bool gid_is_zero(const Gid& g);
bool gid_is_link_local(const Gid& g);  ///< fe80::/10

/// Chooses the source GID of a port from its table (valid entries only, any order).
///   requested_index >= 0: that entry, which must be in the table (else InvalidUsage naming the
///     index and listing the entries present with their types); an IB-type GID on an Ethernet
///     port or a RoCE GID on an IB port is refused the same way.
///   requested_index < 0 (default), Ethernet (RoCE): the first RoCE v2 GID that is IPv4-mapped;
///     else RoCE v2 global IPv6; else RoCE v2 link-local; else RoCE v1 in the same order.
///     An empty table: NotSupported ("no GID: the netdev has no IP address").
///   requested_index < 0, InfiniBand: index 0 (the port GID); peers address it by LID.
GidEntry choose_gid(const std::vector<GidEntry>& table, LinkLayer link, int requested_index);

/// 256..4096 bytes <-> IBV_MTU_*; mtu_from_bytes throws InvalidUsage for other values.
ibv_mtu mtu_from_bytes(uint32_t bytes);
uint32_t mtu_to_bytes(ibv_mtu m);  ///< 0 for a value outside the enum
bool mtu_bytes_valid(uint32_t bytes);

}  // namespace gv::detail::verbs
