// Two processes with CPU initiators: gv_write_lat's ping-pong between a server process and a
// client process, as perftest's ib_write_lat runs it (each side its own process, device
// context and QP; the QP records and buffers swapped over TCP, here gv::oob). On the verbs
// backend (--device rxe0) in any build, and, in a build without CUDA, on the software device
// executed by the CPU threads (the buffers the peers write into are then gv::SharedBuffer
// memory, which the peer process maps). The conversation is the GPU mode's
// (gv_bench_wire.hpp): each side runs its part of the ping-pong on its main thread where the
// GPU mode launches a kernel.
// Part of tools/gv_bench.cu (one translation unit per tool; these helpers stay in its
// anonymous namespace).
#pragma once

#include <poll.h>

namespace {

/// One side of a two-process CPU run: its context, QP, and the buffer its messages go out from
/// (offset 0) and the peer's land in (offset 4096). Members go in reverse order of declaration,
/// which is dependency order: the region, the buffers, the QP, its CQ, the PD, the context.
struct CpuSide {
    std::optional<Context> ctx;
    std::optional<ProtectionDomain> pd;
    std::vector<std::unique_ptr<CompletionQueue>> cqs;
    std::vector<std::unique_ptr<QueuePair>> qps;
    std::optional<HostBuf> host;         // a verbs device: host memory registered with it
    std::optional<SharedBuffer> shared;  // the software device: memory the peer process maps
    std::optional<MemoryRegion> mr;
    uint8_t* buf = nullptr;
    uint64_t bytes = 0;
};

/// The most a ping-pong message takes, and where the peer's messages land.
constexpr uint64_t kLatSlot = 4096;

/// Opens the device first, before any listening or connecting: a device that is missing or
/// cannot be opened ends the run at once, not after a peer came.
void cpu_open(CpuSide& s, const Opts& o) {
    s.ctx.emplace(cpu_context_for(o));
    std::fprintf(stderr, "# %s: %s\n", s.ctx->name().c_str(), s.ctx->selection().c_str());
    s.pd.emplace(*s.ctx);
}

/// The QP and the buffer, once the run's parameters are known (the inline size sizes the QP).
void cpu_setup(CpuSide& s, const Opts& o) {
    add_cpu_qp(*s.ctx, *s.pd, o, s.cqs, s.qps);
    s.bytes = 2 * kLatSlot;
    if (s.ctx->backend() == Backend::Verbs) {
        s.host.emplace(s.bytes);
        s.buf = s.host->p;
        std::memset(s.buf, 0, s.bytes);
    } else {
        s.shared.emplace(*s.ctx, s.bytes);  // zeroed
        s.buf = s.shared->as<uint8_t>();
    }
    s.mr.emplace(*s.pd, s.buf, s.bytes, kAllAccess);
}

/// Swaps the QP record and the buffer with the peer, connects our QP to the peer's, and
/// returns this side's part of the ping-pong: its QP, where its messages go out from, and the
/// peer's buffer.
CpuJob cpu_exchange(CpuSide& s, gvbench::Peer& peer, const Opts& o) {
    oob::Exchanged got;
    try {
        got = peer.ch.exchange(s.ctx->backend(), {s.qps[0]->endpoint()}, {s.mr->remote()}, peer.timeout_ms);
    } catch (const Error& e) {
        throw RemoteError(std::string("exchange with the ") + peer.name + " failed: " + e.what());
    }
    if (got.buffers.size() != 1 || got.buffers[0].length < 2 * kLatSlot)
        throw RemoteError(std::string("the ") + peer.name + " exported " + std::to_string(got.buffers.size()) +
                          " buffers; expected one of at least " + std::to_string(2 * kLatSlot) + " bytes");
    // Without its locator, connect() would look the software device's peer QP up by number on
    // this process's own device.
    if (s.ctx->backend() == Backend::Soft && got.qps[0].extra.size == 0)
        throw NotSupported(std::string("the ") + peer.name + "'s QP " + std::to_string(got.qps[0].qpn) +
                           " carries no locator of another process: its software device cannot be reached "
                           "across processes");
    cpu_connect(*s.qps[0], got.qps[0], o);
    return CpuJob{s.qps[0]->device_handle(),
                  {},
                  s.buf,
                  reinterpret_cast<uint8_t*>(got.buffers[0].addr),
                  s.mr->lkey(),
                  got.buffers[0].rkey,
                  0,
                  s.bytes};
}

/// Whether the peer said anything or hung up. During a run neither side sends anything
/// unless it failed (an Error, then it closes): a wait that has been long stops at once
/// instead of after its timeout. Does not wait and consumes nothing.
bool peer_spoke(const oob::Channel& ch) {
    pollfd p{ch.fd(), POLLIN | POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0;
}

/// A side's failure in words, and what became of the peer when it went away meanwhile.
std::string cpu_failure(const Opts& o, const std::string& who, uint32_t size, const Failure& f, CpuSide& s,
                        const gvbench::Peer& peer) {
    std::string t = failure_text(o, who, size, "", f, s.qps);
    if (peer.ch.peer_closed()) t += std::string("; the ") + peer.name + " closed the connection (did it exit?)";
    return t;
}

int cpu_run_client(Opts& o) {
    CpuSide s;
    cpu_open(s, o);
    oob::Channel ch = oob::Channel::connect(o.host, o.port, o.timeout_ms, [&] {
        std::fprintf(stderr, "# waiting for a server at %s:%u (up to %d s)...\n", o.host.c_str(), unsigned(o.port),
                     o.timeout_ms / 1000);
        std::fflush(stderr);
    });
    gvbench::Peer peer{ch, "server", o.timeout_ms};
    try {
        ch.send_message(params_of(o).serialize(), o.timeout_ms);
        cpu_setup(s, o);
        peer.expect(Ctl::Accept);  // the server took our parameters and set up its side
        peer.send(Ctl::Accept);
        const CpuJob me = cpu_exchange(s, peer, o);
        const std::string where = ", " + s.ctx->name() + " (" + backend_name(s.ctx->backend()) +
                                  "), two processes (server " + ch.peer() + ")" + inline_note(o);
        print_lat_header(o, "CPU", where);
        const uint32_t inl = uint32_t(std::max(o.inline_size, 0));
        std::vector<unsigned long long> st(o.iters);
        for (uint32_t size : o.sizes) {
            size = std::max<uint32_t>(8, size & ~7u);
            if (size > kLatSlot) continue;
            std::memset(s.buf, 0, s.bytes);  // nothing lands before our first message
            peer.send(Ctl::Run, size, o.iters);
            peer.expect(Ctl::Ready);  // the server cleared its buffer and answers from now on
            Failure f{};
            const LatClock clock;
            cpu_lat_side(me, 0, size, o.iters, inl, st.data(), &f, [&ch] { return peer_spoke(ch); });
            const double ns = clock.ns_per_tick();
            for (auto& t : st) t = (unsigned long long)(double(t) * ns + 0.5);
            if (!f.count) {
                peer.send(Ctl::Done, 0);
                peer.expect(Ctl::Result);
                print_lat_row(o, size, st);
                continue;
            }
            // Ours failed: say so, and add what the server says (its own failure, when it failed
            // first) to our reason.
            std::string mine = cpu_failure(o, "this client's side of the ping-pong", size, f, s, peer);
            try {
                peer.send(Ctl::Done, f.count);
                peer.expect(Ctl::Result);
            } catch (const Error& e) {
                mine += std::string("; ") + e.what();
            }
            throw Error(mine);
        }
        peer.send(Ctl::Bye);
        return 0;
    } catch (const std::exception& e) {
        peer.fail(e.what());
        throw;
    }
}

int cpu_run_server(Opts& o, const std::string& prog) {
    CpuSide s;
    cpu_open(s, o);
    gvbench::Params c;
    oob::Channel ch = serve_one_client(o, prog, o.bind.empty() ? "127.0.0.1" : o.bind, c);
    gvbench::Peer peer{ch, "client", o.timeout_ms};
    try {
        adopt(o, c);
        cpu_setup(s, o);
        peer.send(Ctl::Accept);
        peer.expect(Ctl::Accept);  // the client set up its side
        const CpuJob me = cpu_exchange(s, peer, o);
        const uint32_t inl = uint32_t(std::max(o.inline_size, 0));
        uint32_t runs = 0;
        std::set<uint32_t> sizes;
        for (;;) {
            const gvbench::CtlMsg m = peer.expect(Ctl::Run, Ctl::Bye);
            if (m.type == Ctl::Bye) break;
            const uint32_t size = m.a, iters = m.b;
            if (size < 8 || size > kLatSlot || size % 8 || iters < 1 || iters > 100000000)
                throw RemoteError("the client asked for a run of " + std::to_string(iters) + " x " +
                                  std::to_string(size) + " bytes, outside its own parameters");
            std::memset(s.buf, 0, s.bytes);  // cleared before the client's first message can land
            peer.send(Ctl::Ready);
            Failure f{};
            cpu_lat_side(me, 1, size, iters, inl, nullptr, &f, [&ch] { return peer_spoke(ch); });
            // Our failure goes to the client at once (the catch below); the client's comes as
            // an Error after its Done.
            if (f.count) throw Error(cpu_failure(o, "this server's side of the ping-pong", size, f, s, peer));
            peer.expect(Ctl::Done);
            peer.send(Ctl::Result, 0);
            ++runs;
            sizes.insert(size);
        }
        std::printf("# %s server: client %s done: %s, %u runs of %zu sizes on %s (%s)%s, no failed work request or "
                    "wait\n",
                    prog.c_str(), ch.peer().c_str(), test_name(o.lat, o.op).c_str(), runs, sizes.size(),
                    s.ctx->name().c_str(), backend_name(s.ctx->backend()), inline_note(o).c_str());
        return 0;
    } catch (const std::exception& e) {
        peer.fail(e.what());
        throw;
    }
}

}  // namespace
