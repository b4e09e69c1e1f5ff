// ProtectionDomain: memory regions and QPs of one domain may be used together only.
#pragma once

#include <memory>

#include "gpuverbs/context.hpp"

namespace gv {

class ProtectionDomain {
public:
    explicit ProtectionDomain(const Context& ctx);
    ~ProtectionDomain();
    ProtectionDomain(ProtectionDomain&&) noexcept;
    ProtectionDomain& operator=(ProtectionDomain&&) noexcept;

    const Context& context() const;
    /// Backend-specific number of the domain.
    uint32_t handle() const;

    struct Impl;
    Impl* impl() const { return impl_.get(); }

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace gv
