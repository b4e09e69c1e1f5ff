// CompletionQueue: a ring of 64-byte mlx5 CQEs that kernels or CPU threads poll.
#pragma once

#include <memory>
#include <vector>

#include "gpuverbs/completion.hpp"
#include "gpuverbs/context.hpp"
#include "gpuverbs/device/handles.hpp"

namespace gv {

struct CqOptions {
    /// Entries (rounded up to a power of two, at least 2). Size it for every completion that
    /// can be outstanding: on overrun completions are lost and pollers get CqOverrun.
    uint32_t depth = 1024;
    MemoryKind memory = MemoryKind::Default;
};

class CompletionQueue {
public:
    CompletionQueue(const Context& ctx, const CqOptions& options = {});
    ~CompletionQueue();
    CompletionQueue(CompletionQueue&&) noexcept;
    CompletionQueue& operator=(CompletionQueue&&) noexcept;

    using DeviceHandle = dev::CqHandle;
    /// Handle for kernels and CPU threads. Keep the CompletionQueue alive while it is used.
    DeviceHandle device_handle() const;

    uint32_t depth() const;
    uint32_t cqn() const;
    MemoryKind memory() const;

    /// Polls up to max completions from a CPU thread (host-memory CQs only).
    std::vector<Completion> poll(uint32_t max = 16);
    /// Waits up to timeout_ms for n completions (2^40 ms or more, e.g. kWaitForever: no
    /// deadline); throws TimeoutError with how many came, and CompletionError for the
    /// first failed one unless allow_errors.
    std::vector<Completion> wait(uint32_t n, uint64_t timeout_ms, bool allow_errors = false);

    struct Impl;
    Impl* impl() const { return impl_.get(); }

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace gv
