// Two processes with CPU initiators, as perftest runs its tests (each side its own process,
// device context and QPs; the QP records and buffers swapped over TCP, here gv::oob):
// gv_write_lat's ping-pong, and the bandwidth tests (gv_write_bw, gv_read_bw, gv_send_bw: the
// client's threads post and measure, the server provides the targets and, for SEND, posts and
// reaps the receives). On the verbs backend (--device rxe0) in any build, and, in a build
// without CUDA, on the software device executed by the CPU threads (the buffers the peer
// reaches are then gv::SharedBuffer memory, which the peer process maps). The conversation is
// the GPU mode's (gv_bench_wire.hpp): each side runs its part on CPU threads where the GPU
// mode launches a kernel.
// Part of tools/gv_bench.cu (one translation unit for the four tools; these helpers stay in its
// anonymous namespace).
#pragma once

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace {

/// One side of a two-process CPU run: its context, QPs and one registered buffer. Latency:
/// its messages go out from offset 0 and the peer's land at kLatSlot. Bandwidth: QP q's slice
/// is [q * slice, (q + 1) * slice): the client's source (READs land there), the server's
/// targets and receive buffers. Members go in reverse order of declaration, which is
/// dependency order: the region, the buffers, the QPs, their CQs, the PD, the context.
struct CpuSide {
    std::optional<Context> ctx;
    std::optional<ProtectionDomain> pd;
    std::vector<std::unique_ptr<CompletionQueue>> cqs;
    std::vector<std::unique_ptr<QueuePair>> qps;
    std::optional<HostBuf> host;         // a verbs device, or the bandwidth client: host memory
    std::optional<SharedBuffer> shared;  // the software device: memory the peer process maps
    std::optional<MemoryRegion> mr;
    uint8_t* buf = nullptr;
    uint64_t bytes = 0;
    uint64_t slice = 0;  // bandwidth: each QP's share of buf
};

/// The most a ping-pong message takes, and where the peer's messages land.
constexpr uint64_t kLatSlot = 4096;
/// The bandwidth client's source bytes (WRITE, SEND) and what read_bw's server holds.
constexpr uint8_t kSendFill = 0x5a, kReadFill = 0xa5;

/// The bandwidth tests' slice per QP (run_cpu's): room for a post list of the largest size.
uint64_t cpu_slice(const Opts& o) { return std::max<uint64_t>(slice_bytes(o), 8192); }

/// Opens the device first, before any listening or connecting: a device that is missing or
/// cannot be opened ends the run at once, not after a peer came.
void cpu_open(CpuSide& s, const Opts& o) {
    s.ctx.emplace(cpu_context_for(o));
    std::fprintf(stderr, "# %s: %s\n", s.ctx->name().c_str(), s.ctx->selection().c_str());
    s.pd.emplace(*s.ctx);
}

/// The QPs and the buffer, once the run's parameters are known (the inline size sizes the QPs,
/// the sizes and the post list the slices). What the peer reaches (the latency test's slots on
/// both sides, the bandwidth server's targets) is host memory registered with a verbs device,
/// or on the software device a gv::SharedBuffer, zeroed (read_bw's server: kReadFill, what the
/// client's READs must bring back); the bandwidth client's buffer is its own, filled with
/// kSendFill (nothing of the peer touches it: its READs land there by its own device).
void cpu_setup(CpuSide& s, const Opts& o, bool server) {
    const uint32_t nq = o.lat ? 1 : o.qps;
    for (uint32_t q = 0; q < nq; ++q) add_cpu_qp(*s.ctx, *s.pd, o, s.cqs, s.qps);
    s.slice = o.lat ? 2 * kLatSlot : cpu_slice(o);
    s.bytes = s.slice * nq;
    const bool reached = o.lat || server;
    const uint8_t fill = !reached ? kSendFill : !o.lat && op_index(o.op) == 1 ? kReadFill : 0;
    if (s.ctx->backend() == Backend::Verbs || !reached) {
        s.host.emplace(s.bytes);
        s.buf = s.host->p;
        std::memset(s.buf, fill, s.bytes);
    } else {
        try {
            s.shared.emplace(*s.ctx, s.bytes);  // zeroed
        } catch (const Error& e) {
            throw Error("the buffer the client targets (gv::SharedBuffer of " + std::to_string(s.bytes >> 20) +
                        " MiB, " + std::to_string(nq) + " QPs x " + std::to_string(s.slice) + " bytes): " + e.what());
        }
        s.buf = s.shared->as<uint8_t>();
        if (fill) std::memset(s.buf, fill, s.bytes);
    }
    s.mr.emplace(*s.pd, s.buf, s.bytes, kAllAccess);
}

/// Where message i of QP q lands (bandwidth): the initiator's offset (msg_off), which is also
/// where send_bw's server posts receive i. Each run checks the first and the last message of
/// every QP on the side they land on (the server for WRITE and SEND, the client for READ):
/// cleared before the run, whole after it, or the run fails, saying where.
struct BwMarks {
    const CpuSide& s;
    uint32_t size, iters;
    uint64_t at(uint32_t q, bool last) const {
        return q * s.slice + (last ? gvbench::msg_off(iters - 1, size, s.slice) : 0);
    }
    void clear(uint8_t v) const {
        for (uint32_t q = 0; q < s.qps.size(); ++q)
            for (bool last : {false, true}) std::memset(s.buf + at(q, last), v, size);
    }
    /// "" when every mark holds `want`, else where the first one does not.
    std::string check(uint8_t want) const {
        for (uint32_t q = 0; q < s.qps.size(); ++q)
            for (bool last : {false, true}) {
                const uint8_t* p = s.buf + at(q, last);
                for (uint32_t k = 0; k < size; ++k)
                    if (p[k] != want) {
                        char b[200];
                        std::snprintf(b, sizeof b,
                                      "QP %u's message #%u (offset %llu of its slice) holds 0x%02x at byte %u, "
                                      "expected 0x%02x",
                                      q, last ? iters - 1 : 0u,
                                      static_cast<unsigned long long>(at(q, last) - q * s.slice), p[k], k, want);
                        return b;
                    }
            }
        return "";
    }
};

/// The job of this side's QP q against the peer's buffer `theirs`: slice q of each side (the
/// latency test's one QP: the whole buffer, the peer's slot at kLatSlot being the same offset).
CpuJob cpu_job(const CpuSide& s, uint32_t q, const RemoteBuffer& theirs) {
    return CpuJob{s.qps[q]->device_handle(),
                  {},
                  s.buf + q * s.slice,
                  reinterpret_cast<uint8_t*>(theirs.addr + q * s.slice),
                  s.mr->lkey(),
                  theirs.rkey,
                  0,
                  s.slice};
}

/// Swaps the QP records and buffers with the peer (latency: both sides export their buffer;
/// bandwidth: the server only) and connects QP q to the peer's QP q. Returns the peer's
/// buffer (empty for the bandwidth server).
RemoteBuffer cpu_exchange(CpuSide& s, gvbench::Peer& peer, const Opts& o, bool server) {
    const bool export_mine = o.lat || server, expect_theirs = o.lat || !server;
    std::vector<QpEndpoint> eps;
    for (auto& q : s.qps) eps.push_back(q->endpoint());
    std::vector<RemoteBuffer> mine;
    if (export_mine) mine.push_back(s.mr->remote());
    oob::Exchanged got;
    try {
        got = peer.ch.exchange(s.ctx->backend(), eps, mine, peer.timeout_ms);
    } catch (const Error& e) {
        throw RemoteError(std::string("exchange with the ") + peer.name + " failed: " + e.what());
    }
    if (got.qps.size() != s.qps.size())
        throw RemoteError(std::string("the ") + peer.name + " sent " + std::to_string(got.qps.size()) +
                          " QP records; expected " + std::to_string(s.qps.size()));
    if (expect_theirs ? got.buffers.size() != 1 || got.buffers[0].length < s.bytes : !got.buffers.empty())
        throw RemoteError(std::string("the ") + peer.name + " exported " + std::to_string(got.buffers.size()) +
                          " buffers; expected " +
                          (expect_theirs ? "one of at least " + std::to_string(s.bytes) + " bytes"
                                         : std::string("none")));
    for (size_t q = 0; q < s.qps.size(); ++q) {
        // Without its locator, connect() would look the software device's peer QP up by number
        // on this process's own device.
        if (s.ctx->backend() == Backend::Soft && got.qps[q].extra.size == 0)
            throw NotSupported(std::string("the ") + peer.name + "'s QP " + std::to_string(got.qps[q].qpn) +
                               " carries no locator of another process: its software device cannot be reached "
                               "across processes");
        cpu_connect(*s.qps[q], got.qps[q], o);
    }
    return expect_theirs ? got.buffers[0] : RemoteBuffer{};
}

/// Whether the peer said anything or hung up. During a run neither side sends anything
/// unless it failed (an Error, then it closes): a wait that has been long stops at once
/// instead of after its timeout. Does not wait and consumes nothing.
bool peer_spoke(const oob::Channel& ch) {
    pollfd p{ch.fd(), POLLIN | POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0;
}

/// A side's failure in words, and what became of the peer when it went away meanwhile.
std::string cpu_failure(const Opts& o, const std::string& who, uint32_t size, const std::string& run,
                        const Failure& f, CpuSide& s, const gvbench::Peer& peer) {
    std::string t = failure_text(o, who, size, run, f, s.qps);
    if (peer.ch.peer_closed()) t += std::string("; the ") + peer.name + " closed the connection (did it exit?)";
    return t;
}

/// Runs `body(i)` on `n` threads (i = 0 .. n-1) and waits for them on this thread, which
/// meanwhile tells `peer` once a second that this side is alive and, when the peer speaks
/// (during a run only a failed peer does) or a thread records a failure in `fail`, sets `stop`
/// for the others. Returns the seconds from the threads' start to the last one's end.
/// The waiting thread sleeps in poll() on the channel and an eventfd the last thread signals:
/// no wake-ups of its own beside the heartbeat.
template <class Body>
double cpu_threads(uint32_t n, const Failure* fail, gvbench::Peer& peer, std::atomic<bool>& stop,
                   const Body& body) {
    using SteadyClock = std::chrono::steady_clock;
    const int done_fd = ::eventfd(0, EFD_CLOEXEC);
    if (done_fd < 0) throw SystemError("eventfd for the benchmark threads", errno);
    std::atomic<uint32_t> left{n};
    std::atomic<int64_t> end_ns{0};
    auto finished = [&] {
        if (left.fetch_sub(1) != 1) return;
        end_ns.store(SteadyClock::now().time_since_epoch().count());
        const uint64_t one = 1;
        (void)!::write(done_fd, &one, sizeof one);
    };
    const auto t0 = SteadyClock::now();
    std::vector<std::thread> th;
    th.reserve(n);
    for (uint32_t i = 0; i < n; ++i)
        th.emplace_back([&, i] {
            body(i);
            finished();
        });
    auto last_beat = t0;
    bool spoke = false, beat_failed = false;
    while (left.load() != 0) {
        pollfd p[2] = {{done_fd, POLLIN, 0}, {peer.ch.fd(), POLLIN | POLLRDHUP, 0}};
        ::poll(p, spoke ? 1 : 2, 100);
        if (!spoke && p[1].revents) spoke = true;  // read later, by the Done/Result exchange
        if (spoke || __atomic_load_n(&fail->count, __ATOMIC_RELAXED)) stop = true;
        if (!spoke && !beat_failed && SteadyClock::now() - last_beat >= std::chrono::seconds(1)) {
            try {
                peer.send(Ctl::Heartbeat);
            } catch (const std::exception&) {
                beat_failed = true;  // the peer went away: the exchange after the run says so
                stop = true;
            }
            last_beat = SteadyClock::now();
        }
    }
    for (auto& t : th) t.join();
    ::close(done_fd);
    return std::chrono::duration<double>(SteadyClock::duration(end_ns.load()) - t0.time_since_epoch()).count();
}

/// The client's side after a run: tells the server how many calls failed and hears back;
/// throws when either side failed (ours described, with the server's reason when it failed
/// first). The server answers a failure of its own with an Error (RemoteError here).
void cpu_check_run(const Opts& o, gvbench::Peer& peer, CpuSide& s, const std::string& who, uint32_t size,
                   const std::string& run, const Failure& f) {
    const std::string mine = f.count ? cpu_failure(o, who, size, run, f, s, peer) : "";
    try {
        peer.send(Ctl::Done, f.count);
        peer.expect(Ctl::Result);
    } catch (const Error& e) {
        if (f.count) throw Error(mine + "; " + e.what());
        throw;
    }
    if (f.count) throw Error(mine);
}

/// write_lat's client: our WRITEs go to the server's slot at kLatSlot, its answers land in ours.
void cpu_client_lat(const Opts& o, CpuSide& s, gvbench::Peer& peer, const RemoteBuffer& theirs) {
    const CpuJob me = cpu_job(s, 0, theirs);
    const std::string where = ", " + s.ctx->name() + " (" + backend_name(s.ctx->backend()) +
                              "), two processes (server " + peer.ch.peer() + ")" + inline_note(o);
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
        cpu_lat_side(me, 0, size, o.iters, inl, st.data(), &f, [&peer] { return peer_spoke(peer.ch); });
        const double ns = clock.ns_per_tick();
        for (auto& t : st) t = (unsigned long long)(double(t) * ns + 0.5);
        cpu_check_run(o, peer, s, "this client's side of the ping-pong", size, "", f);
        print_lat_row(o, size, st);
    }
}

/// The bandwidth client: per size, reps + 1 runs (the first warms up), each announced to the
/// server (Run, then its Ready: for SEND its receives are posted), then one initiator thread
/// per QP as in loopback (run_cpu), timed from their start to the last one's end.
void cpu_client_bw(Opts& o, CpuSide& s, gvbench::Peer& peer, const RemoteBuffer& theirs) {
    const int op = op_index(o.op);
    const uint32_t nq = uint32_t(s.qps.size());
    std::vector<CpuJob> jobs(nq);
    for (uint32_t q = 0; q < nq; ++q) jobs[q] = cpu_job(s, q, theirs);
    print_bw_header(o, "CPU", nq,
                    ", " + s.ctx->name() + " (" + backend_name(s.ctx->backend()) + "), two processes (server " +
                        peer.ch.peer() + ")");
    for (uint32_t size : o.sizes) {
        if (size > s.slice) continue;
        std::vector<double> secs;
        uint32_t warm = 0;
        for (uint32_t r = 0; r <= o.reps; ++r) {  // rep 0 warms up
            const BwMarks marks{s, size, o.iters};
            if (op == 1) marks.clear(0);
            peer.send(Ctl::Run, size, o.iters);
            peer.expect(Ctl::Ready);
            Failure f{};
            std::atomic<bool> stop{false};
            const double t = cpu_threads(nq, &f, peer, stop, [&](uint32_t q) {
                cpu_initiator(jobs[q], q, op, size, o.iters, o.threads, &f, &stop, CpuWait::SpinYieldSleep);
            });
            // A stop without a failure of ours: the server spoke (its Error comes next).
            cpu_check_run(o, peer, s, "this client's initiator", size, run_label(o, r), f);
            if (stop && !f.count) throw RemoteError("the server stopped answering during the run");
            if (op == 1) {
                const std::string bad = marks.check(kReadFill);
                if (!bad.empty())
                    throw Error("the READs brought back what the server does not hold (" + std::to_string(size) +
                                " bytes" + run_label(o, r) + "): " + bad);
            }
            if (r) secs.push_back(t);
            // -D: the next runs' count goes to the server with each Run; a warm-up too short to
            // tell is run again with it.
            else if (scale_iters(o, t) && ++warm <= 3) --r;
        }
        print_bw_row(o, nq, size, secs);
    }
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
        cpu_setup(s, o, false);
        peer.expect(Ctl::Accept);  // the server took our parameters and set up its side
        peer.send(Ctl::Accept);
        // The server connected its QPs before it answers our first Run: we post only after that.
        const RemoteBuffer theirs = cpu_exchange(s, peer, o, false);
        if (o.lat) cpu_client_lat(o, s, peer, theirs);
        else cpu_client_bw(o, s, peer, theirs);
        peer.send(Ctl::Bye);
        return 0;
    } catch (const std::exception& e) {
        peer.fail(e.what());
        throw;
    }
}

/// The bandwidth server's part of one run of `iters` messages of `size` bytes: for SEND, the
/// receives (cpu_recv_depth per QP, posted before it says Ready, as perftest's server posts
/// its rx-depth) and one receiver thread per QP that reaps them and keeps them posted until
/// `iters` completed; WRITE and READ need nothing of it. Then the client's Done: a client that
/// failed (or went away) stops the receivers at once, one that succeeded finds them finishing
/// (every SEND's receive has completed by then). A receiver's own failure, or a WRITE's or
/// SEND's bytes missing where they land (BwMarks), goes to the client as an Error, described.
void cpu_server_bw_run(const Opts& o, CpuSide& s, gvbench::Peer& peer, uint32_t size, uint32_t iters,
                       uint32_t run) {
    const uint32_t nq = uint32_t(s.qps.size());
    const int op = op_index(o.op);
    const std::string label = ", run #" + std::to_string(run) + " of the session";
    const BwMarks marks{s, size, iters};
    auto landed = [&] {
        const std::string bad = marks.check(kSendFill);
        if (!bad.empty())
            throw Error("the client's " + std::string(op == 2 ? "SENDs" : "WRITEs") + " did not land whole (" +
                        std::to_string(size) + " bytes" + label + "): " + bad);
    };
    if (op != 2) {
        if (op == 0) marks.clear(0);
        peer.send(Ctl::Ready);
        const uint32_t client_failed = peer.expect(Ctl::Done).a;
        if (op == 0 && !client_failed) landed();
        peer.send(Ctl::Result, 0);
        return;
    }
    marks.clear(0);
    std::vector<CpuJob> jobs(nq);
    for (uint32_t q = 0; q < nq; ++q)
        jobs[q] = CpuJob{{}, s.qps[q]->device_handle(), nullptr, s.buf + q * s.slice, 0, 0, s.mr->lkey(), s.slice};
    const uint32_t depth = cpu_recv_depth(o);
    Failure f{};
    std::vector<uint32_t> pre(nq, 0);
    for (uint32_t q = 0; q < nq; ++q)
        if (!cpu_post_receives(jobs[q], q, size, std::min(iters, depth), &pre[q], &f))
            throw Error(failure_text(o, "this server's receiver", size, label, f, s.qps));
    peer.send(Ctl::Ready);
    std::atomic<bool> stop{false};
    // The receivers run on threads while this one waits for the client's Done.
    std::vector<std::thread> th;
    for (uint32_t q = 0; q < nq; ++q)
        th.emplace_back(cpu_receiver, std::cref(jobs[q]), q, size, iters, depth, pre[q], &f, &stop);
    auto join = [&] {
        for (auto& t : th) t.join();
    };
    uint32_t client_failed = 0;
    try {
        client_failed = peer.expect(Ctl::Done).a;
    } catch (...) {
        stop = true;  // the client failed or went away: the receivers stop now
        join();
        throw;
    }
    if (client_failed) stop = true;
    join();  // bounded: a receiver gives up kCpuWaitNs after its last completion
    if (f.count && !client_failed) throw Error(failure_text(o, "this server's receiver", size, label, f, s.qps));
    if (!client_failed) landed();
    peer.send(Ctl::Result, 0);
}

int cpu_run_server(Opts& o, const std::string& prog) {
    CpuSide s;
    cpu_open(s, o);
    gvbench::Params c;
    oob::Channel ch = serve_one_client(o, prog, o.bind.empty() ? "127.0.0.1" : o.bind, c);
    gvbench::Peer peer{ch, "client", o.timeout_ms};
    try {
        adopt(o, c);
        cpu_setup(s, o, true);
        peer.send(Ctl::Accept);
        peer.expect(Ctl::Accept);  // the client set up its side
        const RemoteBuffer theirs = cpu_exchange(s, peer, o, true);
        const CpuJob me = cpu_job(s, 0, theirs);  // write_lat: our answers go to the client's slot
        const uint32_t inl = uint32_t(std::max(o.inline_size, 0));
        uint32_t runs = 0;
        std::set<uint32_t> sizes;
        for (;;) {
            const gvbench::CtlMsg m = peer.expect(Ctl::Run, Ctl::Bye);
            if (m.type == Ctl::Bye) break;
            const uint32_t size = m.a, iters = m.b;
            const bool size_ok = o.lat ? size >= 8 && size <= kLatSlot && size % 8 == 0
                                       : size >= 1 && size <= s.slice && std::count(o.sizes.begin(), o.sizes.end(), size);
            if (!size_ok || iters < 1 || iters > 100000000)
                throw RemoteError("the client asked for a run of " + std::to_string(iters) + " x " +
                                  std::to_string(size) + " bytes, outside its own parameters");
            if (o.lat) {
                std::memset(s.buf, 0, s.bytes);  // cleared before the client's first message can land
                peer.send(Ctl::Ready);
                Failure f{};
                cpu_lat_side(me, 1, size, iters, inl, nullptr, &f, [&ch] { return peer_spoke(ch); });
                // Our failure goes to the client at once (the catch below); the client's comes
                // as an Error after its Done.
                if (f.count) throw Error(cpu_failure(o, "this server's side of the ping-pong", size, "", f, s, peer));
                peer.expect(Ctl::Done);
                peer.send(Ctl::Result, 0);
            } else {
                cpu_server_bw_run(o, s, peer, size, iters, runs);
            }
            ++runs;
            sizes.insert(size);
        }
        if (o.lat)
            std::printf("# %s server: client %s done: %s, %u runs of %zu sizes on %s (%s)%s, no failed work request "
                        "or wait\n",
                        prog.c_str(), ch.peer().c_str(), test_name(o.lat, o.op).c_str(), runs, sizes.size(),
                        s.ctx->name().c_str(), backend_name(s.ctx->backend()), inline_note(o).c_str());
        else
            std::printf("# %s server: client %s done: %s, %u runs of %zu sizes, %zu QPs x %u threads on %s (%s), no "
                        "failed work request or wait\n",
                        prog.c_str(), ch.peer().c_str(), test_name(o.lat, o.op).c_str(), runs, sizes.size(),
                        s.qps.size(), o.threads, s.ctx->name().c_str(), backend_name(s.ctx->backend()));
        return 0;
    } catch (const std::exception& e) {
        peer.fail(e.what());
        throw;
    }
}

}  // namespace
