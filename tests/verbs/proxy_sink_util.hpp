// Helpers of the tests of the verbs proxy over the sink (proxy_sink_test.cpp,
// proxy_sink_errors_test.cpp): a sink, a verbs context over it, a bounded wait.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "gpuverbs/gpuverbs.hpp"
#include "verbs/sink.hpp"
#include "verbs/verbs_backend.hpp"

namespace gvtest::proxy {

inline std::shared_ptr<gv::detail::verbs::SinkDevice> sink(bool loopback, gv::detail::verbs::SinkOptions o = {}) {
    o.loopback = loopback;
    return std::make_shared<gv::detail::verbs::SinkDevice>(o);
}

inline gv::Context sink_ctx(const std::shared_ptr<gv::detail::verbs::SinkDevice>& s, uint32_t threads = 1,
                            uint32_t sleep_us = 100) {
    gv::VerbsOptions o;
    o.proxy_threads = threads;
    o.max_idle_sleep_us = sleep_us;
    return gv::detail::verbs::open_sink_context(s, o);
}

/// Waits (bounded) until pred holds.
inline bool eventually(const std::function<bool()>& pred, int ms = 5000) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
        if (pred()) return true;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return pred();
}

}  // namespace gvtest::proxy
