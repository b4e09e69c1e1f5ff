#include "soft/locator.hpp"

#include "gpuverbs/errors.hpp"

namespace gv::detail::soft {

namespace {
constexpr uint32_t kMaxPid = 4194304;             // PID_MAX_LIMIT on 64-bit Linux
constexpr uint64_t kMaxUserAddress = 1ull << 57;  // 5-level paging's user space

void put(EndpointExtra& x, size_t off, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; ++i) x.bytes[off + i] = uint8_t(v >> (8 * i));
}
uint64_t get(const EndpointExtra& x, size_t off, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t(x.bytes[off + i]) << (8 * i);
    return v;
}
}  // namespace

std::string check_locator(const Locator& l) {
    const bool any = l.pid || l.arena_fd || l.arena_base || l.arena_size || l.qp_context;
    if (any && l.pid == 0) return "software-device locator without a pid";
    if (l.pid > kMaxPid) return "pid " + std::to_string(l.pid) + " out of range (at most 4194304)";
    if (l.arena_size == 0) {
        if (l.arena_fd || l.arena_base || l.qp_context)
            return "software-device locator without an arena names an arena descriptor or address";
        return {};
    }
    if (l.arena_fd > 0x7fffffffu) return "arena descriptor " + std::to_string(l.arena_fd) + " out of range";
    if (l.arena_base == 0 || (l.arena_base & 4095) || (l.arena_size & 4095))
        return "arena at " + hex(l.arena_base) + " of " + std::to_string(l.arena_size) +
               " bytes is not page-aligned";
    if (l.arena_base >= kMaxUserAddress || l.arena_size > kMaxUserAddress - l.arena_base)
        return "arena at " + hex(l.arena_base) + " of " + std::to_string(l.arena_size) +
               " bytes is not a user address range";
    if (l.qp_context < l.arena_base || l.qp_context - l.arena_base >= l.arena_size || (l.qp_context & 7))
        return "QP context address " + hex(l.qp_context) + " is not an aligned address inside the arena";
    return {};
}

EndpointExtra encode(const Locator& l) {
    EndpointExtra x;
    if (l.pid == 0 && l.arena_fd == 0 && l.arena_base == 0 && l.arena_size == 0 && l.qp_context == 0 &&
        !is_gpu(l.gpu_uuid))
        return x;
    x.size = kLocatorBytes;
    put(x, 0, l.pid, 4);
    put(x, 4, l.arena_fd, 4);
    put(x, 8, l.arena_base, 8);
    put(x, 16, l.arena_size, 8);
    put(x, 24, l.qp_context, 8);
    for (size_t i = 0; i < l.gpu_uuid.size(); ++i) x.bytes[32 + i] = l.gpu_uuid[i];
    return x;
}

namespace {
Locator unpack(const EndpointExtra& x) {
    Locator l;
    l.uuid_known = x.size == kLocatorBytes;  // no locator, or an older one: no GPU identity
    if (x.size != kLocatorBytes && x.size != kLegacyLocatorBytes) return l;
    l.pid = uint32_t(get(x, 0, 4));
    l.arena_fd = uint32_t(get(x, 4, 4));
    l.arena_base = get(x, 8, 8);
    l.arena_size = get(x, 16, 8);
    l.qp_context = get(x, 24, 8);
    if (l.uuid_known)
        for (size_t i = 0; i < l.gpu_uuid.size(); ++i) l.gpu_uuid[i] = x.bytes[32 + i];
    return l;
}
}  // namespace

std::string check_extra(const EndpointExtra& x) {
    if (x.size == 0) return {};
    if (x.size != kLocatorBytes && x.size != kLegacyLocatorBytes)
        return "software-device endpoint part of " + std::to_string(x.size) + " bytes, expected 0, " +
               std::to_string(kLegacyLocatorBytes) + " or " + std::to_string(kLocatorBytes);
    Locator l = unpack(x);
    if (l.pid == 0) return "software-device locator without a pid";
    return check_locator(l);
}

Locator decode(const EndpointExtra& x) {
    std::string err = check_extra(x);
    if (!err.empty()) throw RemoteError("peer endpoint: " + err);
    return unpack(x);
}

}  // namespace gv::detail::soft
