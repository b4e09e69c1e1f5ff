#include "verbs/cq.hpp"

#include <cerrno>
#include <chrono>
#include <thread>
#include <utility>

#include "gpuverbs/errors.hpp"
#include "verbs/device.hpp"

namespace gv::detail::verbs {

Cq::Cq(const Device& dev, int depth) : dev_name_(dev.name()) {
    if (!dev.get()) throw InvalidUsage("verbs::Cq on a moved-from Device");
    if (depth < 1 || uint32_t(depth) > dev.caps().max_cqe)
        throw InvalidUsage("CQ depth " + std::to_string(depth) + " on " + dev.name() + ": expected 1.." +
                           std::to_string(dev.caps().max_cqe) + " (the device's max_cqe)");
    errno = 0;
    cq_ = ibv_create_cq(dev.get(), depth, nullptr, nullptr, 0);
    if (!cq_) {
        int e = errno ? errno : ENOMEM;
        throw VerbsError("ibv_create_cq(" + dev.name() + ", depth " + std::to_string(depth) +
                         ") failed: " + errno_text(e), e);
    }
    depth_ = cq_->cqe;
}

Cq::~Cq() {
    if (cq_) ibv_destroy_cq(cq_);
}

Cq::Cq(Cq&& o) noexcept : cq_(std::exchange(o.cq_, nullptr)), depth_(o.depth_), dev_name_(std::move(o.dev_name_)) {}

Cq& Cq::operator=(Cq&& o) noexcept {
    if (this != &o) {
        if (cq_) ibv_destroy_cq(cq_);
        cq_ = std::exchange(o.cq_, nullptr);
        depth_ = o.depth_;
        dev_name_ = std::move(o.dev_name_);
    }
    return *this;
}

int Cq::poll(ibv_wc* out, int max) {
    if (!cq_) throw InvalidUsage("verbs::Cq used after it was moved from");
    int n = ibv_poll_cq(cq_, max, out);
    if (n < 0) {
        int e = -n;
        throw VerbsError("ibv_poll_cq(" + dev_name_ + ") failed: " + errno_text(e), e);
    }
    return n;
}

std::vector<ibv_wc> Cq::wait(size_t n, int timeout_ms) {
    std::vector<ibv_wc> got(n);
    size_t have = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const auto limit = std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
    unsigned spins = 0;
    while (have < n) {
        have += size_t(poll(got.data() + have, int(n - have)));
        if (have == n) break;
        if (std::chrono::steady_clock::now() - t0 > limit)
            throw TimeoutError("CQ of " + dev_name_ + ": " + std::to_string(have) + " of " + std::to_string(n) +
                               " completions within " + std::to_string(timeout_ms) + " ms");
        if (++spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return got;
}

}  // namespace gv::detail::verbs
