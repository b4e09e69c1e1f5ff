#include "verbs/addressing.hpp"

#include <arpa/inet.h>

#include <sstream>

#include "gpuverbs/errors.hpp"

namespace gv::detail::verbs {

const char* link_layer_name(LinkLayer l) {
    switch (l) {
    case LinkLayer::InfiniBand: return "InfiniBand";
    case LinkLayer::Ethernet: return "Ethernet";
    case LinkLayer::Unspecified: break;
    }
    return "unspecified";
}

LinkLayer link_layer_from_ibv(uint8_t ll) {
    switch (ll) {
    case IBV_LINK_LAYER_INFINIBAND: return LinkLayer::InfiniBand;
    case IBV_LINK_LAYER_ETHERNET: return LinkLayer::Ethernet;
    default: return LinkLayer::Unspecified;
    }
}

const char* gid_type_name(GidType t) {
    switch (t) {
    case GidType::IB: return "IB";
    case GidType::RoCEv1: return "RoCE v1";
    case GidType::RoCEv2: return "RoCE v2";
    }
    return "?";
}

bool gid_is_ipv4_mapped(const Gid& g) {
    for (int i = 0; i < 10; ++i)
        if (g[i] != 0) return false;
    return g[10] == 0xff && g[11] == 0xff;
}

bool gid_is_zero(const Gid& g) {
    for (uint8_t b : g)
        if (b) return false;
    return true;
}

bool gid_is_link_local(const Gid& g) { return g[0] == 0xfe && (g[1] & 0xc0) == 0x80; }

std::string gid_to_string(const Gid& g) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (!inet_ntop(AF_INET6, g.data(), buf, sizeof buf)) return "?";
    return buf;
}

namespace {

std::string describe_table(const std::vector<GidEntry>& table) {
    if (table.empty()) return "the table is empty";
    std::ostringstream s;
    s << "entries present:";
    for (const GidEntry& e : table)
        s << " [" << e.index << "] " << gid_to_string(e.gid) << " (" << gid_type_name(e.type) << ")";
    return s.str();
}

// Lower is better; -1: never chosen by default.
int rank(const GidEntry& e) {
    if (gid_is_zero(e.gid)) return -1;
    int base;
    switch (e.type) {
    case GidType::RoCEv2: base = 0; break;
    case GidType::RoCEv1: base = 3; break;
    default: return -1;
    }
    if (gid_is_ipv4_mapped(e.gid)) return base;
    if (!gid_is_link_local(e.gid)) return base + 1;
    return base + 2;
}

}  // namespace

GidEntry choose_gid(const std::vector<GidEntry>& table, LinkLayer link, int requested_index) {
    if (requested_index >= 0) {
        for (const GidEntry& e : table) {
            if (e.index != uint32_t(requested_index)) continue;
            bool ib_gid = e.type == GidType::IB;
            if (link == LinkLayer::Ethernet && ib_gid)
                throw InvalidUsage("GID index " + std::to_string(requested_index) +
                                   " is an IB GID on an Ethernet (RoCE) port; expected a RoCE GID; " +
                                   describe_table(table));
            if (link == LinkLayer::InfiniBand && !ib_gid)
                throw InvalidUsage("GID index " + std::to_string(requested_index) + " is a " +
                                   gid_type_name(e.type) + " GID on an InfiniBand port; " +
                                   describe_table(table));
            return e;
        }
        throw InvalidUsage("GID index " + std::to_string(requested_index) +
                           " is not a valid entry of the port's GID table; " + describe_table(table));
    }
    if (table.empty())
        throw NotSupported(std::string("the port has no GID: on RoCE the netdev has no IP address "
                                       "(add one, e.g. `ip addr add ADDR dev NETDEV`), on InfiniBand "
                                       "the port is not initialized by a subnet manager"));
    if (link == LinkLayer::InfiniBand) {
        for (const GidEntry& e : table)
            if (e.index == 0) return e;
        return table.front();
    }
    const GidEntry* best = nullptr;
    for (const GidEntry& e : table) {
        int r = rank(e);
        if (r < 0) continue;
        if (!best || r < rank(*best) || (r == rank(*best) && e.index < best->index)) best = &e;
    }
    if (!best)
        throw NotSupported("no RoCE GID on the port; " + describe_table(table));
    return *best;
}

bool mtu_bytes_valid(uint32_t bytes) {
    return bytes == 256 || bytes == 512 || bytes == 1024 || bytes == 2048 || bytes == 4096;
}

ibv_mtu mtu_from_bytes(uint32_t bytes) {
    switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    case 4096: return IBV_MTU_4096;
    }
    throw InvalidUsage("path MTU " + std::to_string(bytes) + " bytes: expected 256, 512, 1024, 2048 or 4096");
}

uint32_t mtu_to_bytes(ibv_mtu m) {
    switch (m) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
    }
    return 0;
}

}  // namespace gv::detail::verbs
