// client_server: a server and a client process exchange queue-pair endpoints over TCP and run
// rounds of RDMA traffic driven by CUDA kernels, or, with --gpu -1, by CPU threads making the
// very same gv::dev calls: on the software RDMA device (both processes on one host), or on an
// RDMA device (--device rxe0, mlx5_0, ...; the peer may then be another host). The gpuverbs
// counterpart of DOCA GPUNetIO's gpunetio_rdma_client_server_write sample.
//
//   client_server --server [--port P] [--gpu N] [--size BYTES] [--rounds N]    (one shell)
//   client_server --client HOST [--port P] [...]                               (another)
//
// Round r = 1, 2, ... (one kernel per round on each side):
//   server  posts two receives (one without a buffer for the WRITE_IMM, whose data lands in
//           A; one into B for the SEND_IMM), then lets the client go: an inline RDMA WRITE of
//           r into the client's flag word;
//   client  waits until its flag reads r, fills its buffers with round r's patterns, then
//           posts an RDMA WRITE with immediate of pattern A into the server's A, a SEND with
//           immediate of pattern B (into B) and an RDMA READ of A back, and waits for them;
//   server  checks both receive completions (opcode, immediate, byte count), then RDMA READs
//           the client's buffer C (pattern C) into its own D;
//   both    check every byte they received (server: A, B and D; client: what it read back).
// Buffers a peer reaches are gv::SharedBuffers (GPU memory on a GPU context, host memory on a
// CPU one; on the software device from its shared arena, on a NIC plain memory); the rest is
// private. At the end each side tells the other over TCP whether it validated everything,
// then prints "Validation successful" (exit status 0) or what failed (exit status 1). Every
// wait is bounded by --timeout-ms. The server serves one client; until one passes the
// handshake it rejects bad connections with their reason and keeps listening.
//
// Built as CUDA when the library has CUDA, as plain C++ (CPU threads only) otherwise.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "device_option.hpp"
#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"
#include "gpuverbs/mps.hpp"
#include "gpuverbs/oob.hpp"

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

using namespace gv;

#include "client_server_rounds.cuh"
#include "client_server_host.hpp"

namespace {

/// What both sides set up alike: the context (announced), a protection domain, two CQs and
/// the QP.
struct Side {
    Side(const Args& a, int gpu)
        : ctx(context_options(a, gpu)), on_gpu(ctx.gpu() >= 0), pd(ctx), scq(ctx), rcq(ctx), qp(pd, qp_options()) {
        set_gpu(ctx.gpu());
        say("%s; %u rounds of %llu bytes", where(ctx).c_str(), a.rounds, (unsigned long long)a.size);
    }
    Context ctx;
    bool on_gpu;
    ProtectionDomain pd;
    CompletionQueue scq, rcq;
    QueuePair qp;

private:
    QpOptions qp_options() {
        QpOptions o;
        o.send_cq = &scq;
        o.recv_cq = &rcq;
        return o;
    }
};

/// A round that failed: tell the peer and say what; a round that still runs (hung, or the
/// peer left) ends the process at once.
int round_failed(oob::Channel& ch, QueuePair& qp, const RoundResult& o, uint32_t r, const Args& a, bool server) {
    int rc = failed(ch, qp, format("round %u: ", r) + describe(o, server, a.timeout_ms), true,
                    server ? "client" : "server");
    if (o.step == kRoundHung || o.step == kPeerLeft) exit_now(rc);
    return rc;
}

int run_server(const Args& a) {
    const int gpu = choose_gpu(a);
    Side side(a, gpu);
    Context& ctx = side.ctx;
    ProtectionDomain& pd = side.pd;
    QueuePair& qp = side.qp;
    const bool on_gpu = side.on_gpu;
    const size_t n = a.size;
    SharedBuffer buf_a(ctx, n), buf_b(ctx, n);  // the client WRITEs and READs A, SENDs into B
    LocalBuffer buf_d(on_gpu, n);               // our READ of the client's C lands here
    MemoryRegion mr_a = gvcli::register_memory(pd, ctx, buf_a.data(), n,
                                               kLocalWrite | kRemoteWrite | kRemoteRead, "--gpu -1");
    MemoryRegion mr_b = gvcli::register_memory(pd, ctx, buf_b.data(), n, kLocalWrite, "--gpu -1");
    MemoryRegion mr_d = gvcli::register_memory(pd, ctx, buf_d.data(), n, kLocalWrite, "--gpu -1");
    RoundRunner runner(on_gpu);

    // One client is served. Until a well-formed one has connected its QP to ours, a client
    // that fails the handshake (closes, stays silent, sends garbage, asks for other --size or
    // --rounds, exports the wrong buffers) is rejected with its reason and we wait for the
    // next, up to `wait_ms` in all.
    const int wait_ms = std::max(a.timeout_ms, 60000);
    oob::Listener lis = oob::Channel::listen(a.port, a.bind);
    say("serving one client, then exiting; waiting up to %d s for it", wait_ms / 1000);
    say("listening on %s:%u", lis.address().c_str(), unsigned(lis.port()));
    oob::Exchanged got;
    auto handshake = [&](oob::Channel& c, int budget_ms) {
        agree(c, a, budget_ms);
        got = c.exchange(ctx.backend(), {qp.endpoint()}, {mr_a.remote()}, budget_ms);
        if (got.buffers.size() != 2 || got.buffers[0].length < 8 || got.buffers[1].length < n)
            throw RemoteError("the client exported unexpected buffers (want its flag and its buffer C)");
        try {
            qp.connect(got.qps.at(0));
        } catch (const Error& e) {
            qp.reset();  // ready for the next client
            throw RemoteError(std::string("the client's QP endpoint cannot be connected: ") + e.what());
        }
        try {
            barrier(c, budget_ms);
        } catch (const Error&) {
            qp.reset();
            throw;
        }
    };
    auto rejected = [&](const std::string& peer, const std::string& why) {
        std::fprintf(stderr, "[server] rejected the client at %s: %s; still listening\n", peer.c_str(), why.c_str());
        std::fflush(stderr);
    };
    oob::Channel ch = lis.accept_client(wait_ms, a.timeout_ms, handshake, rejected);
    lis.close();
    say("client %s connected", ch.peer().c_str());

    ServerJob j{qp.device_handle(), buf_b.as<uint8_t>(), mr_b.lkey(),
                buf_d.data(),       mr_d.lkey(),         got.buffers[0],
                got.buffers[1],     uint32_t(n),         uint64_t(a.timeout_ms) * 1000000ull};
    std::vector<uint8_t> tmp;
    for (uint32_t r = 1; r <= a.rounds; ++r) {
        if (r > 1 && a.delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(a.delay_ms));
        RoundResult o = runner.run(j, r, budget_ms(a), ch);
        if (o.step) return round_failed(ch, qp, o, r, a, true);
        struct {
            const void* p;
            uint32_t kind;
            const char* name;
        } const checks[] = {
            {buf_a.data(), kA, "A"}, {buf_b.data(), kB, "B"}, {buf_d.data(), kC, "D (READ of C)"}};
        for (const auto& c : checks) {
            std::string bad = check_bytes(host_view(c.p, n, on_gpu, tmp), n, c.kind, r, c.name);
            if (!bad.empty()) return failed(ch, qp, bad, false, "client");
        }
        say("round %u verified: WRITE_IMM into A, SEND_IMM into B, READ of the client's C", r);
    }
    return finish(ch, a, "client");
}

int run_client(const Args& a) {
    const int gpu = choose_gpu(a);
    Side side(a, gpu);
    Context& ctx = side.ctx;
    ProtectionDomain& pd = side.pd;
    QueuePair& qp = side.qp;
    const bool on_gpu = side.on_gpu;
    const size_t n = a.size;
    SharedBuffer flag(ctx, 64), buf_c(ctx, n);  // the server WRITEs the flag and READs C
    LocalBuffer src(on_gpu, 2 * n), back(on_gpu, n);
    MemoryRegion mr_flag =
        gvcli::register_memory(pd, ctx, flag.data(), 64, kLocalWrite | kRemoteWrite, "--gpu -1");
    MemoryRegion mr_c = gvcli::register_memory(pd, ctx, buf_c.data(), n, kRemoteRead, "--gpu -1");
    MemoryRegion mr_src = gvcli::register_memory(pd, ctx, src.data(), 2 * n, kLocalWrite, "--gpu -1");
    MemoryRegion mr_back = gvcli::register_memory(pd, ctx, back.data(), n, kLocalWrite, "--gpu -1");
    RoundRunner runner(on_gpu);

    oob::Channel ch = oob::Channel::connect(a.host, a.port, a.timeout_ms, [&] {
        say("waiting for a server at %s:%u (up to %g s)...", a.host.c_str(), unsigned(a.port), a.timeout_ms / 1000.0);
    });
    say("connected to %s", ch.peer().c_str());
    agree(ch, a, a.timeout_ms);
    oob::Exchanged got =
        ch.exchange(ctx.backend(), {qp.endpoint()}, {mr_flag.remote(), mr_c.remote()}, a.timeout_ms);
    if (got.buffers.size() != 1 || got.buffers[0].length < n)
        throw RemoteError("the server exported unexpected buffers (want its buffer A)");
    qp.connect(got.qps.at(0));
    barrier(ch, a.timeout_ms);

    ClientJob j{qp.device_handle(),  flag.as<unsigned long long>(),
                src.data(),          mr_src.lkey(),
                buf_c.as<uint8_t>(), back.data(),
                mr_back.lkey(),      got.buffers[0],
                uint32_t(n),         uint64_t(a.timeout_ms) * 1000000ull};
    std::vector<uint8_t> tmp;
    for (uint32_t r = 1; r <= a.rounds; ++r) {
        RoundResult o = runner.run(j, r, budget_ms(a), ch);
        if (o.step) return round_failed(ch, qp, o, r, a, false);
        std::string bad =
            check_bytes(host_view(back.data(), n, on_gpu, tmp), n, kA, r, "READ of the server's A");
        if (!bad.empty()) return failed(ch, qp, bad, false, "server");
        say("round %u verified: WRITE_IMM into the server's A, SEND_IMM into its B, READ of A back", r);
    }
    return finish(ch, a, "server");
}

}  // namespace

int main(int argc, char** argv) {
    return gvcli::run(argc, argv, usage(), [](gvcli::Args& args) {
        Args a;
        parse(args, a);
        g_role = a.server ? "server" : "client";
        try {
            return a.server ? run_server(a) : run_client(a);
        } catch (const std::bad_alloc&) {
            throw;  // gvcli::run says it: out of memory
        } catch (const std::exception& e) {
            error("%s", e.what());
            return 1;
        }
    });
}
