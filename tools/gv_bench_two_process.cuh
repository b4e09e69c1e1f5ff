// Two processes: a client that measures, a server that provides the targets (options
// exchange, setup, bounded waits, refusals).
// Part of tools/gv_bench.cu (one translation unit for the four tools; these helpers stay in its
// anonymous namespace).
#pragma once

namespace {

// ---- two processes: a client that measures, a server that provides the targets ----------------

using Clock = std::chrono::steady_clock;

// Longest a side's kernel may still run once the measurement is over or has failed; its
// waits are bounded (20 s per wait, 5 s per ping-pong step, less when a dead peer's QPs flush).
constexpr double kKernelGraceS = 45;

double secs_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One side of a two-process run. The destructor first waits (bounded) for the side's last
// kernel, so that nothing is freed under a running kernel; then the members go in reverse
// order of declaration, which is dependency order (regions before buffers, QPs before CQs).
struct Side {
    std::optional<Context> ctx;
    std::optional<ProtectionDomain> pd;
    std::vector<std::unique_ptr<CompletionQueue>> cqs;
    std::vector<std::unique_ptr<QueuePair>> qps;
    std::optional<SharedBuffer> shared;  // what the peer targets (GPU memory of the device's arena)
    Buffer<uint8_t> priv;                // the client's source for bandwidth runs (cudaMalloc)
    std::optional<MemoryRegion> mr;      // over `shared` or `priv`
    Buffer<Job> d_jobs;
    Buffer<Failure> d_fail;
    Buffer<unsigned long long> d_st;
    std::optional<Event> start, last;  // `last` is recorded after every launch

    Side() = default;
    Side(const Side&) = delete;
    Side& operator=(const Side&) = delete;
    ~Side() {
        if (last) {
            const auto t0 = Clock::now();
            while (cudaEventQuery(*last) == cudaErrorNotReady) {
                if (secs_since(t0) > kKernelGraceS) {
                    std::fprintf(
                        stderr,
                        "a benchmark kernel still runs %.0f s after the end; exiting without cleanup\n",
                        kKernelGraceS);
                    std::fflush(stdout);
                    std::fflush(stderr);
                    std::_Exit(1);
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
        }
    }
};

// The software device's GPU arena holds every QP a peer process reaches (state, queues, CQs)
// and every SharedBuffer; it is 1 GiB unless GV_GPU_ARENA_MB says otherwise, read when the
// device opens. Unless the environment sizes it, size it for this side: the target buffer,
// the queues (WQEs of up to 256 B, 64-byte receive entries and CQEs), 256 MiB to spare.
void size_arena(const Opts& o, uint32_t nq, uint64_t shared_bytes) {
    if (std::getenv("GV_GPU_ARENA_MB")) return;
    const uint64_t per_qp = uint64_t(std::max<uint32_t>(o.threads, 64)) * (256 + 64) + 2048 * 64 + (64 << 10);
    const uint64_t mb = ((shared_bytes + nq * per_qp) >> 20) + 256;
    if (mb > 1024) setenv("GV_GPU_ARENA_MB", std::to_string(mb).c_str(), 0);
}

// This side's context, QPs (queues and CQs in GPU memory) and its one registered buffer:
// `shared_bytes` of SharedBuffer (what the peer targets) or else `priv_bytes` of private GPU
// memory filled with 0x5a (the client's source).
void setup_side(Side& s, const Opts& o, uint32_t nq, uint64_t shared_bytes, uint64_t priv_bytes) {
    size_arena(o, nq, shared_bytes);
    gvbench::require_gpu();
    CUDA_CHECK(cudaSetDevice(o.gpu));
    s.ctx.emplace(ContextOptions{Backend::Soft, o.gpu});
    s.pd.emplace(*s.ctx);
    for (uint32_t q = 0; q < nq; ++q) add_qp(*s.ctx, *s.pd, o, MemoryKind::Device, s.cqs, s.qps);
    if (shared_bytes) {
        try {
            s.shared.emplace(*s.ctx, shared_bytes);
        } catch (const Error& e) {
            throw Error("the buffer the peer targets (gv::SharedBuffer of " +
                        std::to_string(shared_bytes >> 20) + " MiB): " + e.what());
        }
        s.mr.emplace(*s.pd, s.shared->data(), shared_bytes, kAllAccess);
    } else {
        s.priv = Buffer<uint8_t>(priv_bytes);
        CUDA_CHECK(cudaMemset(s.priv.get(), 0x5a, priv_bytes));
        s.mr.emplace(*s.pd, s.priv.get(), priv_bytes, kAllAccess);
    }
    s.d_fail = Buffer<Failure>(1);
    CUDA_CHECK(cudaMemset(s.d_fail.get(), 0, sizeof(Failure)));
    s.start.emplace();
    s.last.emplace();
}

// Swaps QP endpoints and buffers with the peer and connects QP i to the peer's QP i.
oob::Exchanged exchange_and_connect(Side& s, gvbench::Peer& peer, const std::vector<RemoteBuffer>& mine) {
    std::vector<QpEndpoint> eps;
    for (auto& q : s.qps) eps.push_back(q->endpoint());
    oob::Exchanged got;
    try {
        got = peer.ch.exchange(Backend::Soft, eps, mine, peer.timeout_ms);
    } catch (const Error& e) {
        throw RemoteError(std::string("exchange with the ") + peer.name + " failed: " + e.what());
    }
    for (const QpEndpoint& e : got.qps)
        // Without its backend-specific part (the software device's locator of a QP in another
        // process), connect() would look the QP up by number on this process's own device.
        if (e.extra.size == 0)
            throw NotSupported(std::string("the ") + peer.name + "'s QP " + std::to_string(e.qpn) +
                               " carries no locator of another process: its software device cannot be "
                               "reached across processes");
    for (size_t q = 0; q < s.qps.size(); ++q) s.qps[q]->connect(got.qps[q]);
    return got;
}

// Waits for this side's last kernel. heartbeat_to: tells that peer about once a second that
// we are alive (a measurement may last longer than its --timeout). limit_s > 0: throws
// TimeoutError after that long.
void wait_kernel(Side& s, gvbench::Peer* heartbeat_to, double limit_s) {
    const auto t0 = Clock::now();
    auto beat = t0;
    for (;;) {
        cudaError_t r = cudaEventQuery(*s.last);
        if (r == cudaSuccess) return;
        if (r != cudaErrorNotReady) CUDA_CHECK(r);
        if (heartbeat_to && secs_since(beat) >= 1.0) {
            heartbeat_to->send(Ctl::Heartbeat);
            beat = Clock::now();
        }
        if (limit_s > 0 && secs_since(t0) > limit_s)
            throw TimeoutError("this process's benchmark kernel still runs " + std::to_string(int(limit_s)) +
                               " s after the peer finished");
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
}

// The client after a run: tells the server how many calls of its kernel failed and hears
// back; throws when either side failed. The server answers a failure of its own kernel with
// an Error that describes it (RemoteError here); the client's failure, described, reaches the
// server the same way when the thrown error ends the client (run_client).
void check_run(const Opts& o, gvbench::Peer& peer, Side& s, uint32_t size, uint32_t rep) {
    const Failure f = gvbench::read_failure(s.d_fail.get());
    const std::string mine =
        f.count ? failure_text(o, "this client's kernel", size, run_label(o, rep), f, s.qps) : "";
    peer.send(Ctl::Done, f.count);
    try {
        peer.expect(Ctl::Result);
    } catch (const RemoteError& e) {
        if (f.count) throw Error(mine + "; " + e.what());
        throw;
    }
    if (f.count) throw Error(mine);
}

void client_bw(Opts& o, Side& s, gvbench::Peer& peer, const RemoteBuffer& target, uint32_t nq, uint64_t slice,
               const std::string& where) {
    const int op = op_index(o.op);
    std::vector<Job> jobs(nq);
    for (uint32_t q = 0; q < nq; ++q)
        jobs[q] = Job{s.qps[q]->device_handle(),
                      {},
                      s.priv.get() + q * slice,
                      reinterpret_cast<uint8_t*>(target.addr + q * slice),
                      s.mr->lkey(),
                      target.rkey,
                      0,
                      slice};
    s.d_jobs = Buffer<Job>(jobs.size());
    CUDA_CHECK(cudaMemcpy(s.d_jobs.get(), jobs.data(), jobs.size() * sizeof(Job), cudaMemcpyHostToDevice));
    print_bw_header(o, (gvbench::gpu_name(o.gpu) + peer_where(o)).c_str(), nq, where);
    for (uint32_t size : o.sizes) {
        if (size > slice) continue;
        std::vector<double> secs;
        for (uint32_t r = 0; r <= o.reps; ++r) {  // rep 0 warms up
            peer.send(Ctl::Run, size, o.iters);
            peer.expect(Ctl::Ready);
            // Between the two records nothing but the launch: their results are checked after.
            const cudaError_t rec0 = cudaEventRecord(*s.start);
            bw_kernel<true><<<nq, o.threads>>>(s.d_jobs.get(), nq, op, size, o.iters, s.d_fail.get(), o.rx_rounds);
            const cudaError_t rec1 = cudaEventRecord(*s.last);
            CUDA_CHECK(rec0);
            CUDA_CHECK(rec1);
            CUDA_CHECK(cudaGetLastError());
            wait_kernel(s, &peer, 0);
            const float ms = gvbench::elapsed_ms(*s.start, *s.last);
            check_run(o, peer, s, size, r);
            if (r) secs.push_back(ms / 1e3);
            if (r == 0) scale_iters(o, ms / 1e3);  // -D
        }
        print_bw_row(o, nq, size, secs);
    }
}

void client_lat(Opts& o, Side& s, gvbench::Peer& peer, const RemoteBuffer& target, uint64_t slice,
                const std::string& where) {
    // Our writes go to the server's slot at target + 4096, its answers land in ours.
    Job me{s.qps[0]->device_handle(),
           {},
           s.shared->as<uint8_t>(),
           reinterpret_cast<uint8_t*>(target.addr),
           s.mr->lkey(),
           target.rkey,
           0,
           slice};
    print_lat_header(o, (gvbench::gpu_name(o.gpu) + peer_where(o)).c_str(), where);
    s.d_st = Buffer<unsigned long long>(o.iters);
    for (uint32_t size : o.sizes) {
        size = std::max<uint32_t>(8, size & ~7u);
        if (size > 4096) continue;
        CUDA_CHECK(cudaMemset(me.src, 0, slice));
        CUDA_CHECK(cudaDeviceSynchronize());
        peer.send(Ctl::Run, size, o.iters);
        peer.expect(Ctl::Ready);  // the server cleared its slot and its side runs
        launch_lat<0>(!o.separate_commit, 1, me, me, size, o.iters, s.d_st.get(), s.d_fail.get());
        CUDA_CHECK(cudaEventRecord(*s.last));
        CUDA_CHECK(cudaGetLastError());
        wait_kernel(s, &peer, 0);
        check_run(o, peer, s, size, 0);
        std::vector<unsigned long long> st(o.iters);
        CUDA_CHECK(cudaMemcpy(st.data(), s.d_st.get(), st.size() * 8, cudaMemcpyDeviceToHost));
        print_lat_row(o, size, st);
    }
}

int run_client(Opts& o) {
    const uint32_t nq = o.lat ? 1 : o.qps;
    const uint64_t slice = slice_bytes(o);
    oob::Channel ch = oob::Channel::connect(o.host, o.port, o.timeout_ms, [&] {
        std::fprintf(stderr, "# waiting for a server at %s:%u (up to %d s)...\n", o.host.c_str(), unsigned(o.port),
                     o.timeout_ms / 1000);
        std::fflush(stderr);
    });
    gvbench::Peer peer{ch, "server", o.timeout_ms};
    Side s;
    try {
        ch.send_message(params_of(o).serialize(), o.timeout_ms);
        setup_side(s, o, nq, o.lat ? slice : 0, o.lat ? 0 : slice * nq);
        peer.expect(Ctl::Accept);  // the server took our parameters and set up its side
        peer.send(Ctl::Accept);
        std::vector<RemoteBuffer> mine;
        if (o.lat) mine.push_back(s.mr->remote());
        oob::Exchanged got = exchange_and_connect(s, peer, mine);
        const uint64_t need = o.lat ? slice : slice * nq;
        if (got.buffers.size() != 1 || got.buffers[0].length < need)
            throw RemoteError("the server exported " + std::to_string(got.buffers.size()) +
                              " buffers; expected one of at least " + std::to_string(need) + " bytes");
        const std::string where = ", two-process (server " + ch.peer() + ")";
        // The server connected its QPs before it answers our first Run: we post only after that.
        if (o.lat) client_lat(o, s, peer, got.buffers[0], slice, where);
        else client_bw(o, s, peer, got.buffers[0], nq, slice, where);
        peer.send(Ctl::Bye);
        return 0;
    } catch (const std::exception& e) {
        peer.fail(e.what());
        throw;
    }
}

int run_server(Opts& o, const std::string& prog) {
    gvbench::Params c;
    oob::Channel ch = serve_one_client(o, prog, "127.0.0.1", c);
    gvbench::Peer peer{ch, "client", o.timeout_ms};
    Side s;
    try {
        adopt(o, c);
        const int op = op_index(o.op);
        const uint32_t nq = o.lat ? 1 : o.qps;
        const uint64_t slice = slice_bytes(o);
        setup_side(s, o, nq, slice * nq, 0);
        peer.send(Ctl::Accept);
        peer.expect(Ctl::Accept);  // the client set up its side
        oob::Exchanged got = exchange_and_connect(s, peer, {s.mr->remote()});
        if (o.lat ? got.buffers.size() != 1 || got.buffers[0].length < slice : !got.buffers.empty())
            throw RemoteError(
                "the client exported " + std::to_string(got.buffers.size()) + " buffers; expected " +
                (o.lat ? "one of at least " + std::to_string(slice) + " bytes" : std::string("none")));
        Job me{};  // write_lat: our answers go to the client's slot at its buffer + 4096
        if (o.lat) {
            me = Job{s.qps[0]->device_handle(),
                     {},
                     s.shared->as<uint8_t>(),
                     reinterpret_cast<uint8_t*>(got.buffers[0].addr),
                     s.mr->lkey(),
                     got.buffers[0].rkey,
                     0,
                     slice};
        } else if (op == 2) {  // send_bw: block q receives into slice q
            std::vector<Job> jobs(nq);
            for (uint32_t q = 0; q < nq; ++q)
                jobs[q] = Job{{},
                              s.qps[q]->device_handle(),
                              nullptr,
                              s.shared->as<uint8_t>() + q * slice,
                              0,
                              0,
                              s.mr->lkey(),
                              slice};
            s.d_jobs = Buffer<Job>(jobs.size());
            CUDA_CHECK(
                cudaMemcpy(s.d_jobs.get(), jobs.data(), jobs.size() * sizeof(Job), cudaMemcpyHostToDevice));
        }
        uint32_t runs = 0;
        std::set<uint32_t> sizes;
        for (;;) {
            const gvbench::CtlMsg m = peer.expect(Ctl::Run, Ctl::Bye);
            if (m.type == Ctl::Bye) break;
            const uint32_t size = m.a, iters = m.b;
            const bool size_ok = o.lat ? size >= 8 && size <= 4096 && size % 8 == 0
                                       : size <= slice && std::count(o.sizes.begin(), o.sizes.end(), size);
            if (!size_ok || iters < 1 || iters > 100000000)
                throw RemoteError("the client asked for a run of " + std::to_string(iters) + " x " +
                                  std::to_string(size) + " bytes, outside its own parameters");
            CUDA_CHECK(cudaMemset(s.d_fail.get(), 0, sizeof(Failure)));
            bool launched = true;
            if (o.lat) {
                CUDA_CHECK(cudaMemset(s.shared->data(), 0, slice));
                CUDA_CHECK(cudaDeviceSynchronize());  // cleared before the client's first write can land
                launch_lat<1>(!o.separate_commit, 1, me, me, size, iters, nullptr, s.d_fail.get());
            } else if (op == 2) {
                bw_kernel<true><<<nq, o.threads>>>(s.d_jobs.get(), 0, op, size, iters, s.d_fail.get(),
                                                   o.rx_rounds);  // nq 0: all receive
            } else {
                launched = false;  // WRITE and READ need nothing from the server's GPU
            }
            if (launched) {
                CUDA_CHECK(cudaEventRecord(*s.last));
                CUDA_CHECK(cudaGetLastError());
            }
            peer.send(Ctl::Ready);
            peer.expect(Ctl::Done);  // a failed client says why in its next message (an Error)
            if (launched) wait_kernel(s, nullptr, kKernelGraceS);
            const Failure f = launched ? gvbench::read_failure(s.d_fail.get()) : Failure{};
            if (f.count)
                throw Error(failure_text(o, "this server's kernel", size,
                                         ", run #" + std::to_string(runs) + " of the session", f, s.qps));
            peer.send(Ctl::Result, 0);
            ++runs;
            sizes.insert(size);
        }
        std::printf(
            "# %s server: client %s done: %s, %u runs of %zu sizes, %u QPs x %u threads, "
            "no failed work request or wait\n",
            prog.c_str(), ch.peer().c_str(), test_name(o.lat, o.op).c_str(), runs, sizes.size(), nq,
            o.threads);
        return 0;
    } catch (const std::exception& e) {
        peer.fail(e.what());
        throw;
    }
}

}  // namespace
