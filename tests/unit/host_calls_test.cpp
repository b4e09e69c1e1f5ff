// Which handles CPU threads may drive (host_reachable in gpuverbs/device/handles.hpp): those
// whose queues are host memory. A handle whose queues are GPU memory is refused by every host-side
// posting, commit, poll and wait call (InvalidArgument), without a host load or store of
// that memory, which would be a segfault. The GPU side of this is GpuHostCalls.* in
// tests/gpu/gpu_verbs_queue_test.cu (real GPU queues); here the GPU memory is stood in for by
// pages that fault on any access.
#include <sys/mman.h>

#include "test_util.hpp"

using namespace gv;

namespace {

/// Pages that fault on any access: where "GPU memory" is for a CPU thread.
struct Trap {
    static constexpr size_t kBytes = 1 << 20;
    void* p = mmap(nullptr, kBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ~Trap() { munmap(p, kBytes); }
    template <class T>
    T* as(size_t off = 0) const {
        return reinterpret_cast<T*>(static_cast<uint8_t*>(p) + off);
    }
};

/// A CPU QP's handle with its queues (and both CQ rings) moved into the trap, flagged as GPU
/// memory (host_reachable 0), as a GPU context's device_handle() flags them.
dev::QpHandle in_gpu_memory(dev::QpHandle h, const Trap& t) {
    h.q.sq = h.q.rq = t.as<uint8_t>();
    h.q.dbrec = t.as<uint32_t>(4096);
    h.q.ctr = t.as<dev::QpCounters>(8192);
    h.q.host_reachable = 0;
    for (dev::CqHandle* cq : {&h.scq, &h.rcq}) {
        cq->cqes = t.as<mlx5_cqe64>(16384);
        cq->dbrec = t.as<uint32_t>(4096);
        cq->ci = t.as<unsigned long long>(12288);
        cq->overrun = t.as<uint32_t>(12296);
        cq->slots = t.as<dev::CqQpSlot>(20480);
        cq->host_reachable = 0;
    }
    return h;
}

}  // namespace

// Handles of a CPU-only context are for CPU threads: nothing is flagged.
TEST(HostCalls, CpuContextHandlesAreHostMemory) {
    gvtest::Pair p(gvtest::cpu_context());
    const dev::QpHandle h = p.h(0);
    EXPECT_EQ(h.q.host_reachable, 1u);
    EXPECT_EQ(h.scq.host_reachable, 1u);
    EXPECT_EQ(h.rcq.host_reachable, 1u);
    EXPECT_EQ(p.scq[0]->device_handle().host_reachable, 1u);
}

// Every host call on a handle whose queues are "GPU memory" (pages that fault) returns
// InvalidArgument and touches nothing: a missing check is a segfault, not a failed EXPECT.
TEST(HostCalls, QueuesInGpuMemoryAreRefusedWithoutATouch) {
    gvtest::Pair p(gvtest::cpu_context());
    Trap t;
    ASSERT_NE(t.p, MAP_FAILED);
    gvtest::expect_host_calls_refused(in_gpu_memory(p.h(0), t));
    // The QP itself is untouched and still works from the host.
    std::vector<uint8_t> src(256, 0x5A), dst(256, 0);
    MemoryRegion ms(p.pd, src.data(), src.size(), kLocalWrite), md(p.pd, dst.data(), dst.size(), kAllAccess);
    const dev::QpHandle h = p.h(0);
    ASSERT_EQ(dev::write(h, src.data(), 256, ms.lkey(), uint64_t(dst.data()), md.rkey()), Status::Ok);
    ASSERT_EQ(dev::commit(h), Status::Ok);
    ASSERT_EQ(dev::wait_send(h, 1, nullptr, 5'000'000'000ull), Status::Ok);
    EXPECT_EQ(gvtest::first_diff(src.data(), dst.data(), 256), -1);
}

// A default-constructed handle is refused the same way (it always was, but for the weak
// form's get_position and builders, which read through its null pointers).
TEST(HostCalls, DefaultConstructedHandleIsRefused) {
    dev::QpHandle h{};
    h.q.sq_log_bb = 6;
    gvtest::expect_host_calls_refused(h);
}
