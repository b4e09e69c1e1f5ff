// Helpers of the real-device tests: which device (RDMA_DEVICE, RDMA_GID_INDEX), the skip
// without one (GV_REQUIRE_RDMA=1 turns it into a failure: the VM tier sets it), a loopback pair
// of RC QPs on one device, and posting one work request with a bounded wait for its completion.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "verbs/verbs.hpp"

namespace gvtest::verbs {

namespace v = gv::detail::verbs;

inline std::string env_or(const char* name, const char* def) {
    const char* s = std::getenv(name);
    return s && *s ? s : def;
}
inline std::string device_name() { return env_or("RDMA_DEVICE", ""); }
inline int gid_index() { return std::atoi(env_or("RDMA_GID_INDEX", "-1").c_str()); }
inline bool rdma_required() { return env_or("GV_REQUIRE_RDMA", "0") == "1"; }

/// Skips the test (with the reason) when no RDMA device is present; fails instead when
/// GV_REQUIRE_RDMA=1.
#define GV_SKIP_WITHOUT_RDMA()                                                                         \
    do {                                                                                               \
        std::vector<std::string> devs_ = ::gv::detail::verbs::list_devices();                          \
        if (devs_.empty()) {                                                                           \
            if (::gvtest::verbs::rdma_required()) FAIL() << "GV_REQUIRE_RDMA=1 but no RDMA device";    \
            GTEST_SKIP() << "no RDMA device (libibverbs lists none): run in the Soft-RoCE VM, "        \
                            "tools/rdma-vm/run.sh exec \"$PWD\" -- build/tests/gv_verbs_tests";        \
        }                                                                                              \
    } while (0)

constexpr int kTimeoutMs = 10000;
constexpr uint8_t kGuard = 0xa5;

inline v::QpConfig qp_config() {
    v::QpConfig c;
    c.sq_depth = 64;
    c.rq_depth = 64;
    c.max_inline = 64;
    c.gid_index = gid_index();
    return c;
}

/// A registered host buffer with guard bytes around it.
struct Buffer {
    static constexpr size_t kGuardBytes = 64;
    std::vector<uint8_t> bytes;
    size_t size;
    std::unique_ptr<v::Mr> mr;
    Buffer(const v::Pd& pd, size_t n, uint32_t access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                                        IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
        : bytes(n + 2 * kGuardBytes, kGuard), size(n) {
        mr = std::make_unique<v::Mr>(v::Mr::host(pd, data(), n, access));
    }
    uint8_t* data() { return bytes.data() + kGuardBytes; }
    uint64_t addr() { return reinterpret_cast<uintptr_t>(data()); }
    void fill(uint8_t seed) {
        for (size_t i = 0; i < size; ++i) data()[i] = uint8_t(seed + i * 7 + (i >> 8));
    }
    bool guards_intact() const {
        for (size_t i = 0; i < kGuardBytes; ++i)
            if (bytes[i] != kGuard || bytes[bytes.size() - 1 - i] != kGuard) return false;
        return true;
    }
};

/// Two RC QPs on one device, connected to each other.
struct Loopback {
    v::Device dev;
    v::Pd pd;
    v::Cq cq_a, cq_b;
    v::RcQp a, b;
    Loopback()
        : dev(device_name()), pd(dev), cq_a(dev, 128), cq_b(dev, 128), a(dev, pd, cq_a, cq_a, qp_config()),
          b(dev, pd, cq_b, cq_b, qp_config()) {
        a.connect(b.endpoint());
        b.connect(a.endpoint());
    }
};

inline ibv_send_wr make_wr(ibv_wr_opcode op, ibv_sge* sge, int nsge, uint64_t raddr, uint32_t rkey,
                           uint64_t wr_id = 1, unsigned flags = IBV_SEND_SIGNALED) {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.sg_list = sge;
    wr.num_sge = nsge;
    wr.send_flags = flags;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return wr;
}

inline int post(v::RcQp& qp, ibv_send_wr& wr) {
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp.get(), &wr, &bad);
}

inline int post_recv(v::RcQp& qp, ibv_sge* sge, int nsge, uint64_t wr_id) {
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = sge;
    wr.num_sge = nsge;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(qp.get(), &wr, &bad);
}

inline std::string describe(const ibv_wc& wc) {
    return std::string(v::wc_status_name(wc.status)) + " (syndrome " +
           v::syndrome_name(v::wc_status_to_syndrome(wc.status)) + ", vendor_err " + std::to_string(wc.vendor_err) +
           "), opcode " + std::to_string(wc.opcode) + ", wr_id " + std::to_string(wc.wr_id);
}

}  // namespace gvtest::verbs
