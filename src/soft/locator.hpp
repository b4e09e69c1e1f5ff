// Where a software-device QP lives, for a peer in another process on the same host
// (docs/cross-process.md): the software device's part of a QpEndpoint (EndpointExtra).
#pragma once

#include <cstdint>
#include <string>

#include "gpuverbs/queue_pair.hpp"
#include "soft/peer_gpu.hpp"

namespace gv::detail::soft {

/// pid 0: no locator (a peer of this process, found by QP number). arena_size 0 (and then
/// fd, base and qp_context 0): the QP cannot be reached from another process (its state,
/// queues or CQs are not in its device's shared arena, e.g. host-memory queues on a GPU
/// device).
struct Locator {
    uint32_t pid = 0;         ///< owning process
    uint32_t arena_fd = 0;    ///< its descriptor of the shared arena (/proc/<pid>/fd/<fd>)
    uint64_t arena_base = 0;  ///< the arena's address, the same in every process mapping it
    uint64_t arena_size = 0;
    uint64_t qp_context = 0;  ///< the QP's soft::QpContext inside the arena
    /// The GPU the QP's device executes on (its arena's GPU); zero: CPU threads. Set by every
    /// encoder of this version, also without an arena: a peer of this process on another GPU
    /// is found by it (docs/two-gpus.md).
    GpuUuid gpu_uuid{};
    /// False when decoded from no locator (0 bytes) or one of an older gpuverbs (32 bytes):
    /// no GPU identity; the peer is then taken to be on this QP's GPU.
    bool uuid_known = true;
    bool operator==(const Locator& o) const {
        return pid == o.pid && arena_fd == o.arena_fd && arena_base == o.arena_base &&
               arena_size == o.arena_size && qp_context == o.qp_context && gpu_uuid == o.gpu_uuid &&
               uuid_known == o.uuid_known;
    }
};

/// Bytes of an encoded locator in EndpointExtra (little-endian): u32 pid, u32 arena fd,
/// u64 arena base, u64 arena size, u64 QP context address, 16 bytes of the device's GPU UUID
/// (zero: CPU threads). No locator: 0 bytes. Decoding also takes the 32 bytes of the version
/// before GPU identities (kLegacyLocatorBytes), whose peer is taken to be on this QP's GPU.
inline constexpr uint8_t kLocatorBytes = 48;
inline constexpr uint8_t kLegacyLocatorBytes = 32;

/// What is wrong with a locator ("" when nothing): pid <= 4194304; an arena has a pid, a
/// descriptor < 2^31, a page-aligned base and size below 2^57, and an 8-aligned QP context
/// inside it; without an arena, fd, base and context are 0.
std::string check_locator(const Locator& l);
/// The same for the bytes of an endpoint's extra part (size 0, kLocatorBytes or
/// kLegacyLocatorBytes).
std::string check_extra(const EndpointExtra& x);

EndpointExtra encode(const Locator& l);
/// Decodes an extra part; throws RemoteError saying what is wrong when check_extra fails.
Locator decode(const EndpointExtra& x);

}  // namespace gv::detail::soft
