// PROBE (not part of the project): perftest's ib_write_lat loop on the gpuverbs verbs control
// layer, two processes, no data-path library: ibv_post_send of a signaled 8-byte WRITE, poll
// its completion, spin on the byte the peer writes. The QP as the verbs backend creates it
// (--depth 1024, max_inline 64, rd_atomic 255) or as perftest does (--depth 1 --inline 0).
//   raw_lat --server|--client 127.0.0.1 [--port N] [-n ITERS] [--depth N] [--inline N] [-x GID]
// (also as bench/verbs_lat_rounds.sh runs gv_write_lat: -d and -s ignored, a bare HOST a client)
#include <x86intrin.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpuverbs/oob.hpp"
#include "verbs/verbs.hpp"

namespace v = gv::detail::verbs;

static uint64_t now_ns() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return uint64_t(t.tv_sec) * 1000000000ull + t.tv_nsec;
}

int main(int argc, char** argv) {
    bool server = false;
    std::string host;
    uint16_t port = 18530;
    uint32_t iters = 1000, depth = 1024, inl = 64;
    int gid = 1;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--server") server = true;
        else if (a == "--client") host = argv[++i];
        else if (a == "--port") port = uint16_t(atoi(argv[++i]));
        else if (a == "-n") iters = uint32_t(atoi(argv[++i]));
        else if (a == "--depth") depth = uint32_t(atoi(argv[++i]));
        else if (a == "--inline") inl = uint32_t(atoi(argv[++i]));
        else if (a == "-x") gid = atoi(argv[++i]);
        else if (a == "-d" || a == "-s") ++i;  // as gv_write_lat's: rxe0, 8 bytes
        else if (a[0] != '-') host = a;
    }
    v::Device dev("rxe0");
    v::Pd pd(dev);
    v::Cq cq(dev, 2048);
    v::QpConfig cfg;
    cfg.sq_depth = depth;
    cfg.rq_depth = 64;
    cfg.max_inline = inl;
    cfg.gid_index = gid;
    v::RcQp qp(dev, pd, cq, cq, cfg);
    std::vector<uint8_t> buf(8192, 0);
    v::Mr mr = v::Mr::host(pd, buf.data(), buf.size(),
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                               IBV_ACCESS_REMOTE_ATOMIC);
    const uint64_t base = reinterpret_cast<uintptr_t>(buf.data());
    gv::oob::Channel ch;
    if (server) {
        gv::oob::Listener l = gv::oob::Channel::listen(port, "127.0.0.1");
        std::printf("# raw_lat: waiting up to 30 s for a client on 127.0.0.1:%u\n", unsigned(port));
        std::fflush(stdout);
        ch = l.accept(30000);
    } else {
        ch = gv::oob::Channel::connect(host, port, 30000);
    }
    gv::RemoteBuffer mine{base, buf.size(), mr.rkey(), gv::kAllAccess};
    gv::oob::Exchanged ex = ch.exchange(gv::Backend::Verbs, {qp.endpoint()}, {mine}, 30000);
    gv::RtrAttr rtr;
    gv::RtsAttr rts;
    rtr.max_dest_rd_atomic = rts.max_rd_atomic = 255;
    qp.connect(ex.qps[0], {}, rtr, rts);
    ch.send_message(std::vector<uint8_t>{1}, 30000);  // both connected before the first WRITE
    ch.recv_message(30000);
    volatile uint64_t* in = reinterpret_cast<volatile uint64_t*>(buf.data() + 4096);
    uint64_t* out = reinterpret_cast<uint64_t*>(buf.data());
    ibv_sge sge{base, 8, mr.lkey()};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = ex.buffers[0].addr + 4096;
    wr.wr.rdma.rkey = ex.buffers[0].rkey;
    std::vector<uint64_t> rt(iters), post(iters);
    const uint64_t t0 = __rdtsc(), n0 = now_ns();
    for (uint64_t i = 1; i <= iters; ++i) {
        if (server)
            while (*in != i) {
            }
        const uint64_t s = __rdtsc();
        *out = i;
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(qp.get(), &wr, &bad)) { std::fprintf(stderr, "post failed\n"); return 1; }
        post[i - 1] = __rdtsc() - s;
        ibv_wc wc;
        int ne;
        do ne = ibv_poll_cq(cq.get(), 1, &wc);
        while (ne == 0);
        if (ne < 0 || wc.status != IBV_WC_SUCCESS) { std::fprintf(stderr, "completion failed\n"); return 1; }
        if (!server) {
            while (*in != i) {
            }
            rt[i - 1] = __rdtsc() - s;
        }
    }
    const double nspt = double(now_ns() - n0) / double(__rdtsc() - t0);
    std::sort(post.begin(), post.end());
    std::fprintf(stderr, "# raw %s: ibv_post_send median %.2f us p10 %.2f p90 %.2f\n", server ? "server" : "client",
                 post[iters / 2] * nspt / 1e3, post[iters / 10] * nspt / 1e3, post[iters * 9 / 10] * nspt / 1e3);
    if (!server) {
        std::vector<uint64_t> r(rt.begin() + std::min<uint32_t>(iters / 10, 100), rt.end());
        std::sort(r.begin(), r.end());
        std::printf("#bytes #iterations t_min t_max t_typical (one-way, us; depth %u inline %u)\n", depth, inl);
        std::printf("%u %zu %.2f %.2f %.2f\n", 8, r.size(), r.front() * nspt / 2e3, r.back() * nspt / 2e3,
                    r[r.size() / 2] * nspt / 2e3);
    }
    ch.send_message(std::vector<uint8_t>{2}, 30000);  // neither leaves while the other still writes
    ch.recv_message(30000);
    return 0;
}
