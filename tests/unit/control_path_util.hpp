// Shared by the control-path tests (control_path_test.cpp, control_path_queues_test.cpp).
#pragma once

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <typeinfo>
#include "test_util.hpp"

namespace {

gv::Context cpu_ctx() { return gv::Context(gv::ContextOptions{gv::Backend::Soft, -1}); }
constexpr uint64_t kTimeout = 5'000'000'000ull;  // 5 s, in ns

/// Runs f, expects it to throw exactly E (or a subclass), returns what().
template <typename E, typename F>
std::string what_of(F&& f, const char* stmt, const char* file, int line) {
    try {
        f();
    } catch (const E& e) {
        return e.what();
    } catch (const std::exception& e) {
        ADD_FAILURE_AT(file, line) << stmt << " threw " << typeid(e).name() << " (" << e.what()
                                   << "), expected " << typeid(E).name();
        return {};
    }
    ADD_FAILURE_AT(file, line) << stmt << " did not throw, expected " << typeid(E).name();
    return {};
}
#define THROWN(E, stmt) what_of<E>([&] { stmt; }, #stmt, __FILE__, __LINE__)

#define EXPECT_HAS(msg, sub)                                 \
    EXPECT_NE(std::string(msg).find(sub), std::string::npos) \
        << "message: \"" << (msg) << "\"\nshould contain: \"" << (sub) << "\""

std::string hexs(uint64_t v) {
    char b[32];
    std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
    return b;
}

bool connectx_present() {
    int n = 0;
    ibv_device** l = ibv_get_device_list(&n);
    bool found = false;
    for (int i = 0; l && i < n; ++i) found |= mlx5dv_is_supported(l[i]);
    if (l) ibv_free_device_list(l);
    return found;
}

/// Two unconnected QPs on one send and one receive CQ, for state-machine tests.
struct Two {
    gv::Context ctx = cpu_ctx();
    gv::ProtectionDomain pd{ctx};
    gv::CompletionQueue scq{ctx, gv::CqOptions{64}}, rcq{ctx, gv::CqOptions{64}};
    gv::QpOptions opts() {
        gv::QpOptions o;
        o.send_cq = &scq;
        o.recv_cq = &rcq;
        return o;
    }
    gv::QueuePair a{pd, opts()}, b{pd, opts()};
};

/// Moves q from RESET to `to` along the legal path (ERROR: straight from RESET).
void bring_to(gv::QueuePair& q, uint32_t peer, gv::QpState to) {
    ASSERT_EQ(q.state(), gv::QpState::Reset);
    if (to == gv::QpState::Reset) return;
    if (to == gv::QpState::Error) {
        q.to_error();
        return;
    }
    q.to_init();
    if (to == gv::QpState::Init) return;
    gv::RtrAttr r;
    r.remote_qpn = peer;
    q.to_rtr(r);
    if (to == gv::QpState::Rtr) return;
    q.to_rts();
}

/// One signaled WRITE from a's handle, waited for; returns its completion.
gv::Completion write_and_wait(const gv::dev::QpHandle& h, const void* src, uint32_t n, uint32_t lkey, void* dst,
                          uint32_t rkey) {
    gv::Completion c{};
    EXPECT_EQ(gv::dev::write(h, src, n, lkey, uint64_t(dst), rkey), gv::Status::Ok);
    gv::dev::commit(h);  // QpError when the WQE failed: the completion says why
    gv::Status st = gv::dev::wait_send(h, 1, &c, kTimeout);
    EXPECT_TRUE(st == gv::Status::Ok || st == gv::Status::CompletionError) << gv::status_name(st);
    return c;
}

}  // namespace
