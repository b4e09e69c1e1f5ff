// Scratch: fast_run's hand-off and warp_run's lane checks on the CPU, with real WQEs.
#include "test_util.hpp"
#include "gpuverbs/detail/soft/exec.cuh"
#include <cstdio>
using namespace gv;
using namespace gv::detail::soft;
int main() {
    gvtest::Pair p(gvtest::cpu_context(), QpOptions{nullptr, nullptr, 256, 16});
    gvtest::HostBuf src(p.pd, 4096, kLocalWrite), dst(p.pd, 4096, kAllAccess);
    auto h = p.h(0);
    for (int i = 0; i < 64; ++i) {
        Status st = dev::write(h, reinterpret_cast<void*>(src.addr(i * 8)), 8, src.lkey(), dst.addr(i * 8), dst.rkey(), i == 63 ? kSignaled : 0u);
        if (st != Status::Ok) { printf("post %d: %d\n", i, int(st)); return 1; }
    }
    QpContext* q = h.soft.ctx;
    const Published pub = Published::of(q);
    LeaderCache lc;
    load_batch(q, lc, pub);
    printf("after load_batch: ci %llu pending %u state %d peer_up %d\n", lc.ci, lc.pending, int(lc.state), int(lc.peer_up));
    FastShape hand;
    bool at_send = fast_run(q, lc, nullptr, {}, {}, &hand);
    printf("fast_run: at_send %d hand.ok %d ci %llu pending %u len %u read %d\n", at_send, hand.ok, lc.ci, lc.pending, hand.len, hand.read);
    const FastRing ring = fast_ring(lc);
    int okc = 0;
    for (uint32_t lane = 0; lane < 32 && lane < lc.pending; ++lane) {
        const unsigned long long c = lc.ci + lane;
        const FastWqe w = ring.load(c);
        bool same = fast_same_shape(w, c, hand);
        uint64_t la = fast_bounds(lc.local, mlx5::from_be64(w.u[2].b), hand.len);
        uint64_t ra = fast_bounds(lc.remote, mlx5::from_be64(w.u[1].a), hand.len);
        okc += same && la && ra;
        if (lane < 3 || !(same && la && ra)) printf("lane %u: same %d la %llx ra %llx\n", lane, same, (unsigned long long)la, (unsigned long long)ra);
    }
    printf("lanes ok: %d\n", okc);
    return 0;
}
