// The traffic suite's environment: one test body (traffic_suite.inc) runs against a list of
// backend instances. An Instance says
//   - how to open its context (gv::ContextOptions: backend, GPU, device name),
//   - where the queues live (gv::MemoryKind) and where the data buffers live (Memory: how
//     to allocate, fill and read back a buffer),
//   - who initiates (Initiator: CPU threads, or a GPU kernel, making the same gv::dev calls
//     of a Script; see traffic_script.hpp),
//   - what the device side can know on it (the QP state; whether commit executes),
//   - and whether it can run on this machine (else every test skips with the reason).
// A TrafficEnv is one test's world on an instance: a connected pair of QPs (0: requester,
// 1: responder), registered buffers, and run(script). Buffers, scripts and results, as a test
// writes and reads them: traffic_run.hpp.
//
// Instances are listed in the test binaries: traffic_cpu_test.cpp (soft-cpu; the verbs
// instance goes there), traffic_gpu_test.cu (soft-gpu, soft-gpu-hostq,
// soft-gpu-cpu-initiator; the mlx5 instance goes there). tests/README.md says how to add one.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"
#include "traffic/traffic_run.hpp"
#include "traffic/traffic_script.hpp"

namespace gvtest::traffic {

// ---- who initiates -------------------------------------------------------------------------

/// Who makes the gv::dev calls of a script.
class Initiator {
public:
    virtual ~Initiator() = default;
    /// "CPU threads", "a GPU kernel (one block of 128 threads per lane)".
    virtual const char* name() const = 0;
    /// Runs every lane at once and returns when all ended; fills results, cqes, stopped,
    /// and `error` when the initiator itself failed (a launch, a copy).
    virtual void run(RunData& d) = 0;
};

/// CPU threads: one per lane, each calling run_lane with the host's pointers.
class CpuThreads : public Initiator {
public:
    const char* name() const override { return "CPU threads (one per lane)"; }
    void run(RunData& d) override {
        uint32_t abort = 0;
        RunView v{d.qps.data(), d.steps.data(), d.lane_begin.data(), d.sges.data(), d.cqes.data(),
                  d.results.data(), d.stopped.data(), &abort, 1};
        if (d.lanes() == 1) {
            run_lane(v, 0, CpuLane{});
            return;
        }
        std::vector<std::thread> ts;
        for (uint32_t l = 0; l < d.lanes(); ++l) ts.emplace_back([&v, l] { run_lane(v, l, CpuLane{}); });
        for (auto& t : ts) t.join();
    }
};

// ---- instances ---------------------------------------------------------------------------

/// One backend configuration the suite runs against.
struct Instance {
    std::string name;               ///< "soft-cpu"; the tests' suffix ('-' becomes '_')
    gv::ContextOptions context;     ///< how to open the context (backend, GPU, device name)
    gv::MemoryKind queues = gv::MemoryKind::Default;  ///< where QPs and CQs live
    std::shared_ptr<Memory> buffers;                   ///< where data buffers live
    std::shared_ptr<Initiator> initiator;              ///< who makes the gv::dev calls
    /// The device side sees the QP's state: commit returns QpError (QpNotReady) and
    /// dev::qp_in_error answers. False where the state lives out of the initiator's reach
    /// (a CPU thread on a GPU device, a NIC): commit then returns Ok and errors show as
    /// completions only. Where something else executes (commit_executes false) but publishes
    /// the state (the verbs proxy), the state changes when the executor finds the failure:
    /// the commit that publishes the failing work usually returns before that (Ok; see
    /// commit_publishing_error), later ones see it.
    bool device_sees_qp_state = true;
    /// Commit executes the published WQEs before it returns (the software device run by the
    /// committing thread or block): their completions are all in the CQ by then. False where
    /// something else executes (a launched executor kernel, a proxy thread, a NIC).
    bool commit_executes = true;
    /// Why the instance cannot run on this machine ("" when it can): its tests then skip
    /// with this reason.
    std::function<std::string()> unavailable = [] { return std::string(); };
    /// Tests (by name, without the instance suffix) whose expectations, the mlx5 rules, the
    /// instance's device does not meet, each with what the device does instead: they skip
    /// saying so. For a real device's own behaviour (rxe's statuses, docs/verbs.md), never for
    /// a fault of the library. Empty where the device follows the rules.
    std::function<std::map<std::string, std::string>()> deviations = [] {
        return std::map<std::string, std::string>();
    };
    /// Opens the context where ContextOptions cannot say how (a backend over the tests' own
    /// NIC, the mlx5 backend's stand-in); empty: gv::Context(context).
    std::function<gv::Context()> open;
};

inline void PrintTo(const Instance& i, std::ostream* os) { *os << i.name; }

/// The test-name suffix of an instance ("soft-gpu-hostq" -> "soft_gpu_hostq").
inline std::string instance_test_name(const testing::TestParamInfo<Instance>& info) {
    std::string s = info.param.name;
    for (char& c : s)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    return s;
}

/// The software device on CPU threads: host queues and buffers, CPU threads post.
inline Instance soft_cpu_instance() {
    Instance i;
    i.name = "soft-cpu";
    i.context.backend = gv::Backend::Soft;
    i.context.gpu = -1;
    i.queues = gv::MemoryKind::Host;
    i.buffers = std::make_shared<HostMemory>();
    i.initiator = std::make_shared<CpuThreads>();
    return i;
}

// ---- the environment of one test --------------------------------------------------------------

/// How the pair of QPs of a test is made and connected.
struct PairConfig {
    gv::QpOptions qp{};              ///< the CQs and queue memory are set by the env
    uint32_t cq_depth = 4096;
    gv::InitAttr responder_init{};   ///< the responder's access rights
    gv::RtrAttr responder_rtr{};     ///< e.g. min_rnr_timer
    gv::RtsAttr requester_rts{};     ///< e.g. rnr_retry
    bool connect = true;
};

/// One test's world on an instance: context, a connected pair (QP 0 requester, QP 1
/// responder), registered buffers, and run(script).
class TrafficEnv {
public:
    TrafficEnv(const Instance& inst, const PairConfig& cfg = {})
        : inst_(inst), pair_(inst.open ? inst.open() : gv::Context(inst.context), cfg.qp, inst.queues, cfg.cq_depth,
                             false) {
        if (cfg.connect) {
            pair_.qp[0]->connect(pair_.qp[1]->endpoint(), {}, {}, cfg.requester_rts);
            pair_.qp[1]->connect(pair_.qp[0]->endpoint(), cfg.responder_init, cfg.responder_rtr);
        }
    }
    ~TrafficEnv() {
        regions_.clear();  // before the buffers they cover
        buffers_.clear();
    }

    const Instance& instance() const { return inst_; }
    gvtest::Pair& pair() { return pair_; }
    gv::QueuePair& qp(int i) { return *pair_.qp[i]; }
    gv::dev::QpHandle handle(int i) const { return pair_.h(i); }
    const gv::ProtectionDomain& pd() const { return pair_.pd; }

    /// A buffer of n bytes in the instance's memory, registered with `access`, every byte
    /// `fill` (kGuard unless said; -1: left as allocated).
    Buffer& buffer(size_t n, uint32_t access, int fill = gvtest::kGuard) {
        buffers_.push_back(std::make_unique<Buffer>(*inst_.buffers, pair_.pd, n, access, fill));
        return *buffers_.back();
    }
    /// Another region over b[off, off+len), in the pair's protection domain or in `pd`.
    const gv::MemoryRegion& region(const Buffer& b, size_t off, size_t len, uint32_t access,
                                   const gv::ProtectionDomain* pd = nullptr) {
        regions_.push_back(std::make_unique<gv::MemoryRegion>(pd ? *pd : pair_.pd, b.ptr(off), len, access));
        return *regions_.back();
    }
    /// A second protection domain of the context.
    const gv::ProtectionDomain& other_pd() {
        if (!other_pd_) other_pd_ = std::make_unique<gv::ProtectionDomain>(pair_.ctx);
        return *other_pd_;
    }

    /// Runs a script on the instance's initiator.
    RunResult run(const Script& s) {
        RunData d = s.data({pair_.h(0), pair_.h(1)});
        inst_.initiator->run(d);
        return RunResult(inst_.name, std::move(d));
    }

    /// What commit returns for a QP in ERROR on this instance (once its error was seen, e.g.
    /// a completion of it polled).
    gv::Status commit_in_error() const {
        return inst_.device_sees_qp_state ? gv::Status::QpError : gv::Status::Ok;
    }
    /// Sets what the commit `c` that publishes the WQE that will fail may return: QpError where
    /// the commit itself executes it and the state is visible; Ok where the state is not visible;
    /// where something else executes and then publishes the state (a proxy thread), Ok, or
    /// QpError when the executor found the failure before the commit read the state (the
    /// commit publishes, then reads: a preempted committer can lose that race).
    StepId commit_publishing_error(StepRef c) const {
        if (!inst_.device_sees_qp_state) return c.expect(gv::Status::Ok);
        if (inst_.commit_executes) return c.expect(gv::Status::QpError);
        return c.expect_either(gv::Status::Ok, gv::Status::QpError);
    }

private:
    const Instance& inst_;
    gvtest::Pair pair_;
    std::unique_ptr<gv::ProtectionDomain> other_pd_;
    std::vector<std::unique_ptr<Buffer>> buffers_;
    std::vector<std::unique_ptr<gv::MemoryRegion>> regions_;
};

/// The fixture of the suite: skips (with the reason) where the instance cannot run.
class Traffic : public testing::TestWithParam<Instance> {
protected:
    void SetUp() override {
        std::string why = GetParam().unavailable();
        if (!why.empty()) GTEST_SKIP() << GetParam().name << ": " << why;
        std::string test = testing::UnitTest::GetInstance()->current_test_info()->name();
        test = test.substr(0, test.find('/'));
        const auto dev = GetParam().deviations();
        const auto it = dev.find(test);
        if (it == dev.end()) return;
        // The real-verbs tier (GV_REQUIRE_RDMA=1) leaves these out by its filter, so that
        // nothing skips there (tests/CMakeLists.txt, GV_RXE_DEVIATIONS): one reaching here
        // means the two lists differ.
        const char* req = std::getenv("GV_REQUIRE_RDMA");
        if (req && std::string(req) == "1")
            FAIL() << GetParam().name << ": " << test << " deviates on this device (" << it->second
                   << ") and must be left out by the tier's filter (GV_RXE_DEVIATIONS in tests/CMakeLists.txt)";
        GTEST_SKIP() << GetParam().name << ": the device differs from the mlx5 rules here: " << it->second;
    }
    const Instance& inst() const { return GetParam(); }
};

}  // namespace gvtest::traffic
