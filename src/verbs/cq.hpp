// Completion queue (RAII) with non-blocking and bounded polling.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <string>
#include <vector>

namespace gv::detail::verbs {

class Device;

class Cq {
public:
    /// depth 1..max_cqe of the device, else InvalidUsage naming the limit.
    Cq(const Device& dev, int depth);
    ~Cq();
    Cq(Cq&&) noexcept;
    Cq& operator=(Cq&&) noexcept;
    Cq(const Cq&) = delete;
    Cq& operator=(const Cq&) = delete;

    ibv_cq* get() const { return cq_; }
    int depth() const { return depth_; }

    /// Polls up to max completions without waiting; returns how many. VerbsError when
    /// ibv_poll_cq fails.
    int poll(ibv_wc* out, int max);
    /// Polls until n completions arrived or timeout_ms passed (then TimeoutError saying how
    /// many of n came). Error completions are returned like the others: check wc.status.
    std::vector<ibv_wc> wait(size_t n, int timeout_ms);
    ibv_wc wait_one(int timeout_ms) { return wait(1, timeout_ms).front(); }

private:
    ibv_cq* cq_ = nullptr;
    int depth_ = 0;
    std::string dev_name_;
};

}  // namespace gv::detail::verbs
