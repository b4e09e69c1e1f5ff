// The benchmarks with CPU initiators on a CPU-only context: the verbs backend on an RDMA
// device (--device rxe0: a proxy thread posts what the initiator threads write), or the
// software device executed by the committing CPU thread (--device soft in a build without
// CUDA). Host memory only; no CUDA call. This is what runs in the CPU-only build, and what
// bench/verbs_vs_perftest.sh sets beside perftest on rxe0.
//
// Bandwidth: one initiator thread per QP posts lists of --post-list WQEs, the last one
// signaled, one commit per list, up to kCpuLists lists in flight (perftest's tx-depth / CQ
// moderation); send_bw has one receiver thread per QP that keeps the peer's receive queue
// full (cpu_recv_depth receives, perftest's rx-depth, posted before the clock starts as
// perftest's server posts them) and reaps its completions. Latency: two threads ping-pong WRITEs, each waiting for the
// other's to land in its buffer (perftest's ib_write_lat).
// Part of tools/gv_bench.cu (its anonymous namespace).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace {

/// True when --device names an RDMA device the verbs backend drives: anything but "soft"
/// and, in a CUDA build, a ConnectX (mlx5, mlx5_N), which the mlx5 backend drives from the GPU
/// (the rule of gv_demo and the client-server sample, tools/device_option.hpp). Without CUDA
/// every named device goes through the verbs backend, CPU initiators being all this build has.
bool verbs_device(const Opts& o) {
    if (o.device == "soft") return false;
#if defined(__CUDACC__)
    return gvcli::is_verbs_device(o.device);
#else
    return true;
#endif
}

struct CpuJob {
    dev::QpHandle qp, peer;  // peer: the receiving QP (send_bw) or the answering one (lat)
    uint8_t *src, *dst;
    uint32_t lkey, rkey, dkey;
    uint64_t slice;
};

/// Host memory for the buffers, page aligned, freed with its owner.
struct HostBuf {
    explicit HostBuf(size_t n) : p(static_cast<uint8_t*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096))) {
        if (!p) throw std::bad_alloc();
    }
    ~HostBuf() { std::free(p); }
    HostBuf(const HostBuf&) = delete;
    HostBuf& operator=(const HostBuf&) = delete;
    uint8_t* p;
};

/// One idle turn of a waiting thread: spin a little, then yield, then sleep 20 us. A thread
/// that spins hot takes a core from the proxy thread and from the device's own work (on
/// Soft-RoCE that is the kernel's, on the same cores), which costs more than the wake-up.
void cpu_idle(uint32_t spins) {
    if (spins < 64) return;
    if (spins < 1024) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(20));
}

/// Polls `cq` once for up to `max` completions; false (recorded) on an error completion.
/// Finding none, it drives `qp` as dev::wait_cq does: on the verbs backend a step (its
/// device's completions become CQEs without waiting for the proxy's fallback thread), on the
/// software device executed by CPU threads a retry of a SEND that found no receive (in two
/// processes nothing else retries it: the receiver's process does not execute our QP). Not on
/// a software device executing on a GPU (a host doorbell): there a drive is a kernel launch on
/// the stream that runs the executors, for RNR retries and flushes that these benchmarks in
/// one process never need (docs/performance.md, "Before and after, 2026-12-01").
uint32_t cpu_reap(const dev::QpHandle& qp, const dev::CqHandle& cq, uint32_t max, Failure* fail, Step step,
                  uint32_t q, uint32_t iter, bool* ok) {
    Completion c[64];
    const uint32_t k = dev::poll_cq(cq, c, std::min<uint32_t>(max, 64));
    if (!k && (qp.backend == Backend::Verbs || (qp.backend == Backend::Soft && !qp.soft.host_doorbell)))
        dev::drive(qp);
    for (uint32_t i = 0; i < k; ++i)
        if (!c[i].ok()) {
            record_failure(fail, step, q, qp.q.qpn, iter, Status::CompletionError, c[i]);
            *ok = false;
        }
    return k;
}

/// How an initiator waits for its completions: cpu_idle's spin, yield, then 20 us sleeps (a
/// verbs device or a CPU context, where the device's own work needs the cores), or a yield
/// every turn (a GPU context: the executor is a kernel, and a sleeping poller would only add
/// its wake-up to every list).
enum class CpuWait { SpinYieldSleep, Yield };

/// The initiator of one QP: iters WQEs of op (0 write, 1 read, 2 send) in lists of `list`
/// (the last one signaled, one doorbell per list), up to kCpuLists lists in flight (CQ
/// moderation as perftest's tx-depth), polled without blocking the posting of the next list.
/// Stops at its first failure (recorded in *fail), when a list's completion does not come
/// within kCpuWaitNs, or when *stop is set (stop may be null).
void cpu_initiator(const CpuJob& j, uint32_t q, int op, uint32_t size, uint32_t iters, uint32_t list,
                   Failure* fail, const std::atomic<bool>* stop, CpuWait wait) {
    uint32_t outstanding = 0, reaped = 0;
    bool ok = true;
    auto last_of = [&](uint32_t k) { return uint32_t(std::min<uint64_t>(uint64_t(k + 1) * list, iters) - 1); };
    // Until a list completed (block) or once; bounded by kCpuWaitNs.
    auto reap = [&](bool block) {
        const uint64_t t0 = atom::now_ns();
        for (uint32_t spins = 0;; ++spins) {
            const uint32_t k = cpu_reap(j.qp, j.qp.scq, kCpuLists, fail, Step::WaitSend, q, last_of(reaped), &ok);
            if (!ok) return false;
            outstanding -= k;
            reaped += k;
            if (k || !block) return true;
            if (wait == CpuWait::Yield) std::this_thread::yield();
            else cpu_idle(spins);
            if ((spins & 255) == 255) {
                if (stop && stop->load(std::memory_order_relaxed)) return false;
                if (atom::now_ns() - t0 > kCpuWaitNs) {
                    record_failure(fail, Step::WaitSend, q, j.qp.q.qpn, last_of(reaped), Status::Timeout);
                    return false;
                }
            }
        }
    };
    for (uint32_t base = 0; base < iters; base += list) {
        const uint32_t n = std::min(list, iters - base);
        while (outstanding >= kCpuLists)
            if (!reap(true)) return;
        for (uint32_t k = 0; k < n; ++k) {
            const uint64_t off = gvbench::msg_off(base + k, size, j.slice);
            const uint32_t fl = k == n - 1 ? kSignaled : 0;
            Status st = op == 0   ? dev::write(j.qp, j.src + off, size, j.lkey, uint64_t(j.dst + off), j.rkey, fl)
                        : op == 1 ? dev::read(j.qp, j.src + off, size, j.lkey, uint64_t(j.dst + off), j.rkey, fl)
                                  : dev::send(j.qp, j.src + off, size, j.lkey, fl);
            if (st != Status::Ok) {
                record_failure(fail, Step::Post, q, j.qp.q.qpn, base + k, st);
                return;
            }
        }
        const Status cs = dev::commit(j.qp);
        if (cs != Status::Ok) {
            record_failure(fail, Step::Commit, q, j.qp.q.qpn, base + n - 1, cs);
            return;
        }
        ++outstanding;
        if (!reap(false)) return;
    }
    while (outstanding)
        if (!reap(true)) return;
}

/// Posts receives on send_bw's receiving QP until `target` are posted (*posted counts them).
/// False (recorded in *fail) when a post fails.
bool cpu_post_receives(const CpuJob& j, uint32_t q, uint32_t size, uint32_t target, uint32_t* posted,
                       Failure* fail) {
    for (; *posted < target; ++*posted) {
        const Status st = dev::recv(j.peer, j.dst + gvbench::msg_off(*posted, size, j.slice), size, j.dkey);
        if (st != Status::Ok) {
            record_failure(fail, Step::PostRecv, q, j.peer.q.qpn, *posted, st);
            return false;
        }
    }
    return true;
}

/// send_bw's receiver of one QP: keeps up to `depth` receives posted until `iters` completed;
/// `posted` of them were posted before it started (cpu_post_receives).
void cpu_receiver(const CpuJob& j, uint32_t q, uint32_t size, uint32_t iters, uint32_t depth, uint32_t posted,
                  Failure* fail, const std::atomic<bool>* stop) {
    uint32_t done = 0, idle = 0;
    bool ok = true;
    uint64_t t0 = atom::now_ns();
    while (done < iters) {
        if (!cpu_post_receives(j, q, size, std::min(iters, done + depth), &posted, fail)) return;
        const uint32_t k = cpu_reap(j.peer, j.peer.rcq, 64, fail, Step::WaitRecv, q, done, &ok);
        if (!ok) return;
        done += k;
        idle = k ? 0 : idle + 1;
        cpu_idle(idle);
        if (k) {
            t0 = atom::now_ns();
        } else if (stop->load(std::memory_order_relaxed)) {
            return;
        } else if (atom::now_ns() - t0 > kCpuWaitNs) {
            record_failure(fail, Step::WaitRecv, q, j.peer.q.qpn, done, Status::Timeout);
            return;
        }
    }
}

/// The ping-pong's timestamps: the TSC on x86-64, as perftest's get_cycles, converted to ns
/// with the rate measured against CLOCK_MONOTONIC over the whole ping-pong; clock_gettime
/// elsewhere. In the Soft-RoCE VM the clocksource is the HPET and clock_gettime costs 1.4-6
/// us a call (docs/performance.md, "WRITE latency on the verbs backend"): every round trip
/// would hold one call's worth of the clock itself, which perftest's does not.
struct LatClock {
    static uint64_t ticks() {
#if defined(__x86_64__)
        return __rdtsc();
#else
        return atom::now_ns();
#endif
    }
    LatClock() : t0(ticks()), n0(atom::now_ns()) {}
    /// Nanoseconds per tick from construction until now (1 without the TSC).
    double ns_per_tick() const {
#if defined(__x86_64__)
        const uint64_t n1 = atom::now_ns(), t1 = ticks();
        return t1 > t0 ? double(n1 - n0) / double(t1 - t0) : 1.0;
#else
        return 1.0;
#endif
    }
    uint64_t t0, n0;
};

/// Turns a ping-pong's wait spins on the awaited word before it backs off: 65536 loads, some
/// tens of microseconds on a native core and about half a millisecond under the Soft-RoCE VM's
/// emulation, more than a round trip on either. A longer wait (a peer that stopped, a core
/// shared with the peer) then yields and sleeps, leaving the core to whoever needs it.
constexpr uint32_t kLatSpinTurns = 1u << 16;

/// write_lat: side 0 stamps and writes i, waits for the answer i; side 1 waits for i and
/// answers with i. Every 64th WRITE is signaled and waited for (the send queue drains).
/// Messages of up to `inline_max` bytes are posted inline (dev::write_inline: the payload in
/// the WQE, IBV_SEND_INLINE on a verbs device), as perftest's -I. `abort` is asked, once a
/// wait has been long, whether to give up (the other side failed, or the peer process went
/// away); it costs nothing on the fast path.
template <class Abort>
void cpu_lat_side(const CpuJob& me, int side, uint32_t size, uint32_t iters, uint32_t inline_max,
                  unsigned long long* stamps, Failure* fail, const Abort& abort) {
    uint64_t* mine = reinterpret_cast<uint64_t*>(me.src + 4096) + (size / 8 - 1);  // where the peer's writes land
    uint64_t* out = reinterpret_cast<uint64_t*>(me.src);
    // The wait spins on the word alone for kLatSpinTurns turns, as perftest's ping-pong does
    // all the time, and only then backs off (cpu_idle: yields, then sleeps) and reads the clock
    // (every 1024 turns; a read is not free, see LatClock). Backing off after cpu_idle's 64
    // turns put a sched_yield on the path of every message: the word lands while the waiter is
    // inside the system call, and is seen only when it returns. In the Soft-RoCE VM that was
    // about 1 us of each one-way latency (paired ratio to perftest 0.848 -> 0.953, one boot,
    // docs/performance.md "Session 24").
    auto await = [&](uint32_t i, Step step) {
        uint64_t t0 = 0;
        for (uint32_t spins = 0; __atomic_load_n(mine, __ATOMIC_ACQUIRE) != i; ++spins) {
            if (spins < kLatSpinTurns) continue;
            cpu_idle(spins - kLatSpinTurns);
            if ((spins & 1023) != 1023) continue;
            const uint64_t now = atom::now_ns();
            if (!t0) t0 = now;
            if (abort() || now - t0 > 5'000'000'000ull) {
                record_failure(fail, step, uint32_t(side), me.qp.q.qpn, i - 1, Status::Timeout);
                return false;
            }
        }
        return true;
    };
    for (uint32_t i = 1; i <= iters; ++i) {
        if (side == 1 && !await(i, Step::AwaitPing)) return;
        if (side == 0) stamps[i - 1] = LatClock::ticks();
        out[size / 8 - 1] = i;
        const uint32_t fl = (i % 64) == 0 ? kSignaled : 0;
        const Status ws = size <= inline_max
                              ? dev::write_inline(me.qp, out, size, uint64_t(me.dst + 4096), me.rkey, fl)
                              : dev::write(me.qp, out, size, me.lkey, uint64_t(me.dst + 4096), me.rkey, fl);
        const Status cs = ws == Status::Ok ? dev::commit(me.qp) : ws;
        if (cs != Status::Ok) {
            record_failure(fail, ws != Status::Ok ? Step::Post : Step::Commit, uint32_t(side), me.qp.q.qpn, i - 1, cs);
            return;
        }
        if (fl) {
            const Status st = dev::wait_send(me.qp, 1, nullptr, 5'000'000'000ull);
            if (st != Status::Ok) {
                record_failure(fail, Step::WaitSend, uint32_t(side), me.qp.q.qpn, i - 1, st);
                return;
            }
        }
        if (side == 0) {
            if (!await(i, Step::AwaitPong)) return;
            stamps[i - 1] = LatClock::ticks() - stamps[i - 1];
        }
    }
}

/// The verbs proxy threads' longest idle sleep when the initiator threads step their QPs
/// themselves (cpu_context_for).
constexpr uint32_t kCpuDrivenIdleUs = 100000;

/// The context of the CPU run: the verbs backend on --device (GID index --gid-index), or the
/// software device on CPU threads.
ContextOptions cpu_context_for(const Opts& o) {
    ContextOptions c;
    c.gpu = -1;
    if (verbs_device(o)) {
        c = gvcli::verbs_context(o.device, -1, o.gid_index);
        // The initiator threads post and poll themselves (cpu_posts_inline): the proxy thread is
        // off their path and may sleep when idle. With --proxy-only it is on the path of every
        // message, so for latency it busy-polls, as perftest's ping-pong does (a proxy that
        // sleeps adds its wake-up to every message: 61-1017 us against perftest's 18 in the
        // Soft-RoCE VM).
        // The initiator threads also drive their QPs in every wait for a completion (cpu_reap,
        // dev::wait_send), so the proxy thread has nothing to do for them: it may sleep long when
        // idle (100 ms instead of the library's 100 us). Its wake-ups are not free where cores
        // are few: on the 2-vCPU Soft-RoCE VM, SEND 64 KiB ran at 0.89 of perftest with the
        // library's bound and at 1.00 with this one, alternating in one boot
        // (docs/performance.md, "Session 22").
        c.verbs.cpu_posts_inline = !o.proxy_only;
        if (o.proxy_idle_us >= 0) c.verbs.max_idle_sleep_us = uint32_t(o.proxy_idle_us);
        else if (o.lat && o.proxy_only) c.verbs.max_idle_sleep_us = 0;
        else if (!o.proxy_only) c.verbs.max_idle_sleep_us = kCpuDrivenIdleUs;
    } else {
        c.backend = Backend::Soft;
    }
    return c;
}

/// WQEs a CPU run's send queue holds: kCpuLists post lists in flight.
uint32_t cpu_depth(const Opts& o) { return std::max<uint32_t>(o.threads * kCpuLists, 64); }

/// Receives send_bw keeps posted: perftest's default rx-depth for SEND (512, DEF_RX_SEND), and
/// four times the SENDs in flight where that is more. The receives beyond the SENDs in flight
/// are the receiver's slack: a SEND that finds no receive posted is refused with an RNR NAK,
/// and the sender waits out the RNR timer (on rxe at least one jiffy, 4 ms at HZ=250) before it
/// sends it and everything after it again. With as many receives as SENDs in flight (128, as
/// before 2026-12-02) every lag of the receiver thread behind the sender did that: 25-175 RNR
/// NAKs a run in the Soft-RoCE VM, and SEND 8 B at 0.4-0.9 of perftest
/// (docs/perf-logs/2026-12-02-send8/).
uint32_t cpu_recv_depth(const Opts& o) { return std::max<uint32_t>(512, 4 * cpu_depth(o)); }

/// One QP of a CPU run with a CQ of its own (send and receive completions) in host memory;
/// room for inline WRITEs of --inline-size bytes.
void add_cpu_qp(const Context& ctx, const ProtectionDomain& pd, const Opts& o,
                std::vector<std::unique_ptr<CompletionQueue>>& cqs, std::vector<std::unique_ptr<QueuePair>>& qps) {
    const uint32_t depth = cpu_depth(o);
    const uint32_t rdepth = op_index(o.op) == 2 ? cpu_recv_depth(o) : 64;
    cqs.push_back(std::make_unique<CompletionQueue>(
        ctx, CqOptions{std::max<uint32_t>(2048, 2 * (depth + rdepth)), MemoryKind::Host}));
    QpOptions qo;
    qo.send_cq = qo.recv_cq = cqs.back().get();
    qo.sq_depth = depth;
    qo.rq_depth = rdepth;
    qo.max_inline = std::max<uint32_t>(qo.max_inline, uint32_t(std::max(o.inline_size, 0)));
    qo.memory = MemoryKind::Host;
    qps.push_back(std::make_unique<QueuePair>(pd, qo));
}

/// Connects a CPU run's QP to its peer. On a verbs device, as many RDMA READs and atomics in
/// flight as the device takes (the control layer lowers 255 to its max_qp_rd_atom /
/// max_qp_init_rd_atom), as perftest asks; the software device takes 0..16.
void cpu_connect(QueuePair& qp, const QpEndpoint& peer, const Opts& o) {
    RtrAttr rtr;
    RtsAttr rts;
    if (verbs_device(o)) rtr.max_dest_rd_atomic = rts.max_rd_atomic = 255;
    qp.connect(peer, {}, rtr, rts);
}

/// How the latency test posts, for its header: inline (as perftest's -I) or not.
std::string inline_note(const Opts& o) {
    if (o.inline_size <= 0) return ", WRITEs not inline (-I 0)";
    return ", WRITEs of up to " + std::to_string(o.inline_size) + " B inline (-I " +
           std::to_string(o.inline_size) + ")";
}

int run_cpu(Opts& o) {
    const int op = op_index(o.op);
    Context ctx(cpu_context_for(o));
    std::fprintf(stderr, "# %s: %s\n", ctx.name().c_str(), ctx.selection().c_str());
    ProtectionDomain pd(ctx);
    const uint32_t nq = o.lat ? 1 : o.qps;
    std::vector<std::unique_ptr<CompletionQueue>> cqs;
    std::vector<std::unique_ptr<QueuePair>> qps;
    for (uint32_t q = 0; q < 2 * nq; ++q) add_cpu_qp(ctx, pd, o, cqs, qps);
    for (uint32_t q = 0; q < nq; ++q) {
        cpu_connect(*qps[2 * q], qps[2 * q + 1]->endpoint(), o);
        cpu_connect(*qps[2 * q + 1], qps[2 * q]->endpoint(), o);
    }
    const uint64_t slice = std::max<uint64_t>(slice_bytes(o), 8192);
    const uint64_t total = slice * nq;
    HostBuf src_buf(total), dst_buf(total);
    uint8_t *src = src_buf.p, *dst = dst_buf.p;
    std::memset(src, 0x5a, total);
    std::memset(dst, 0, total);
    MemoryRegion ms(pd, src, total, kAllAccess), md(pd, dst, total, kAllAccess);
    std::vector<CpuJob> jobs(nq);
    for (uint32_t q = 0; q < nq; ++q)
        jobs[q] = CpuJob{qps[2 * q]->device_handle(), qps[2 * q + 1]->device_handle(), src + q * slice,
                         dst + q * slice, ms.lkey(), md.rkey(), md.lkey(), slice};
    const std::string where = ", " + ctx.name() + " (" + backend_name(ctx.backend()) + ")";
    std::atomic<bool> stop{false};

    if (o.lat) {
        print_lat_header(o, "CPU", where + ", one process" + inline_note(o));
        std::vector<unsigned long long> st(o.iters);
        for (uint32_t size : o.sizes) {
            size = std::max<uint32_t>(8, size & ~7u);
            if (size > 4096) continue;
            std::memset(src, 0, slice);
            std::memset(dst, 0, slice);
            const CpuJob a = jobs[0];
            const CpuJob b{qps[1]->device_handle(), {}, dst, src, md.lkey(), ms.rkey(), 0, slice};
            Failure f{};
            const LatClock clock;
            const uint32_t inl = uint32_t(std::max(o.inline_size, 0));
            auto stopped = [&stop] { return stop.load(std::memory_order_relaxed); };
            std::thread resp([&] { cpu_lat_side(b, 1, size, o.iters, inl, nullptr, &f, stopped); });
            cpu_lat_side(a, 0, size, o.iters, inl, st.data(), &f, stopped);
            if (f.count) stop = true;
            resp.join();
            const double ns = clock.ns_per_tick();
            for (auto& t : st) t = (unsigned long long)(double(t) * ns + 0.5);
            if (f.count) throw Error(failure_text(o, "the CPU ping-pong", size, "", f, qps));
            print_lat_row(o, size, st);
        }
        return 0;
    }
    print_bw_header(o, "CPU", nq, where);
    for (uint32_t size : o.sizes) {
        if (size > slice) continue;
        std::vector<double> secs;
        uint32_t warm = 0;
        for (uint32_t r = 0; r <= o.reps; ++r) {  // rep 0 warms up
            Failure f{};
            // send_bw: the receives are posted before the clock starts, as perftest's server
            // posts its rx-depth before the test (else the first SENDs race the receiver
            // thread's first posts, and each one that loses is an RNR NAK).
            const uint32_t rdepth = cpu_recv_depth(o);
            std::vector<uint32_t> pre(nq, 0);
            for (uint32_t q = 0; q < nq && op == 2; ++q)
                if (!cpu_post_receives(jobs[q], q, size, std::min(o.iters, rdepth), &pre[q], &f))
                    throw Error(failure_text(o, "the CPU receiver", size, run_label(o, r), f, qps));
            const auto t0 = std::chrono::steady_clock::now();
            std::vector<std::thread> th;
            for (uint32_t q = 0; q < nq; ++q) {
                if (op == 2)
                    th.emplace_back(cpu_receiver, std::cref(jobs[q]), q, size, o.iters, rdepth, pre[q], &f, &stop);
                th.emplace_back(cpu_initiator, std::cref(jobs[q]), q, op, size, o.iters, o.threads, &f, &stop,
                                CpuWait::SpinYieldSleep);
            }
            // A failed thread ends the others' waits at once instead of after their timeouts.
            for (auto& t : th) {
                t.join();
                if (f.count) stop = true;
            }
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (f.count) throw Error(failure_text(o, "the CPU initiator", size, run_label(o, r), f, qps));
            if (r) secs.push_back(s);
            else if (scale_iters(o, s) && ++warm <= 3) --r;  // -D: warm up again with the new count
        }
        print_bw_row(o, nq, size, secs);
    }
    return 0;
}

}  // namespace
