// MemoryRegion: host or GPU memory registered for RDMA, with access rights.
#pragma once

#include <memory>

#include "gpuverbs/protection_domain.hpp"

namespace gv {

/// What a peer needs to address a region: base address, length and rkey.
struct RemoteBuffer {
    uint64_t addr = 0;
    uint64_t length = 0;
    uint32_t rkey = 0;
    uint32_t access = 0;
};

class MemoryRegion {
public:
    /// Registers [addr, addr+length). addr may be host memory (any: it is pinned and, on a
    /// GPU context, mapped for the GPU) or GPU memory of the context's GPU. Remote write or
    /// remote atomic access requires local write, as in verbs.
    MemoryRegion(const ProtectionDomain& pd, void* addr, size_t length, uint32_t access);
    ~MemoryRegion();
    MemoryRegion(MemoryRegion&&) noexcept;
    MemoryRegion& operator=(MemoryRegion&&) noexcept;

    uint32_t lkey() const;
    uint32_t rkey() const;
    void* addr() const;
    size_t length() const;
    uint32_t access() const;
    /// True when the region is GPU memory.
    bool is_device_memory() const;
    RemoteBuffer remote() const;

    struct Impl;
    Impl* impl() const { return impl_.get(); }

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace gv
