// The verbs proxy's threads (attach, detach, the loop and its back-off), the hand-over of a QP
// to a CPU thread that steps it inline, the user-visible CQ rings, and the counters. One step
// of a QP: proxy_step.cpp.
#include "verbs/proxy.hpp"

#include <algorithm>
#include <chrono>

#include "gpuverbs/device/atomic.cuh"

namespace gv::detail::verbs {

// ---- the user-visible CQ ------------------------------------------------------------------

bool CqRing::push(const mlx5::CqeFields& f) {
    const uint32_t cnt = 1u << log_cnt;
    // Slot reservation: the threads of QPs sharing this CQ may complete into it at once. Each
    // QP's completions come from its one thread, in order, so they land in order.
    const unsigned long long slot = prod.fetch_add(1, std::memory_order_relaxed);
    // The pollers (kernels or CPU threads) publish how far they have read in the doorbell
    // record (24 bits, big-endian), with a release store after reading the entries. This
    // acquire load orders our overwrite of a slot after their reads of its old entry. The
    // slot is free when fewer than cnt entries are unread; differences modulo 2^24 are exact
    // while cnt <= 2^23.
    const uint32_t ci = mlx5::from_be32(atom::load_acquire(&dbrec[mlx5::kCqSetCi], true)) & 0xffffff;
    if (((uint32_t(slot) - ci) & 0xffffff) >= cnt) {
        atom::store_release(overrun, 1u, true);
        return false;
    }
    // 60 bytes relaxed, then the word holding op_own with a release store (write_cqe): a
    // poller whose acquire load sees the new owner bit sees the whole entry. The owner flips
    // with every pass over the ring.
    mlx5::write_cqe(&cqes[slot & (cnt - 1)], f, mlx5::sw_owner(uint32_t(slot), log_cnt), true);
    return true;
}

void ProxyQp::reset_progress() {
    track.assign(size_t(1) << q.sq_log_bb, Track{});
    head = tail = 0;
    sq_ci = 0;
    send_inflight = 0;
    unsignaled = 0;
    halted = false;
    rq_ci = 0;
    recv_inflight = 0;
    error = false;
    again.store(false, std::memory_order_relaxed);
    quiet_sq.store(kNotQuiet, std::memory_order_relaxed);
    quiet_rq.store(kNotQuiet, std::memory_order_relaxed);
}

void ProxyQp::note_quiet() {
    const bool q = !send_inflight && !recv_inflight && head == tail && !halted;
    quiet_sq.store(q ? uint32_t(sq_ci & 0xffff) : kNotQuiet, std::memory_order_relaxed);
    quiet_rq.store(q ? uint32_t(rq_ci & 0xffff) : kNotQuiet, std::memory_order_relaxed);
}

bool ProxyQp::quiet() const {
    const uint32_t s = quiet_sq.load(std::memory_order_relaxed);
    if (s == kNotQuiet) return false;
    return mlx5::read_sq_dbrec(q.dbrec, true) == s &&
           mlx5::read_rq_dbrec(q.dbrec, true) == quiet_rq.load(std::memory_order_relaxed);
}

// The hand-off between a CPU thread that published work and the QP's holder is a Dekker pair:
//   CPU thread (step_inline):  again = true (release); fence; try_hold
//   holder (let_go_checked):   busy = false (release); fence; load again
// (both fences seq_cst). Either the CPU thread takes the QP and steps it itself, or the holder
// sees `again` and steps once more; taking `again` back with acquire makes the work published
// before it (the doorbell records moved) visible to that step.
size_t step_held(ProxyQp& p, ProxyStep& stepper) {
    // This step covers what was asked so far. Unasked (the common case), the flag is only
    // read: a request made after this load is seen by let_go_checked.
    if (p.again.load(std::memory_order_relaxed)) p.again.exchange(false, std::memory_order_acquire);
    const size_t work = stepper.step(p);
    return work + let_go_checked(p, stepper);
}

size_t let_go_checked(ProxyQp& p, ProxyStep& stepper) {
    size_t work = 0;
    for (;;) {
        p.let_go();
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (!p.again.load(std::memory_order_relaxed) || !p.try_hold()) return work;
        p.again.exchange(false, std::memory_order_acquire);
        work += stepper.step(p);
    }
}

// ---- Proxy --------------------------------------------------------------------------------

Proxy::Proxy(uint32_t threads, uint32_t max_idle_sleep_us, bool inline_steps, bool cpu_only) : inline_(inline_steps) {
    const uint32_t n = std::max(1u, threads);
    const uint32_t spin = inline_steps && cpu_only ? 64 : 2048;
    for (uint32_t i = 0; i < n; ++i)
        threads_.push_back(std::make_unique<ProxyThread>(int(i), max_idle_sleep_us, spin));
}

Proxy::~Proxy() { threads_.clear(); }

void Proxy::attach(ProxyQp* qp) {
    const uint32_t t = next_.fetch_add(1, std::memory_order_relaxed) % uint32_t(threads_.size());
    qp->thread = int(t);
    threads_[t]->attach(qp);
}

void Proxy::detach(ProxyQp* qp) {
    if (qp->thread < 0) return;
    threads_[size_t(qp->thread)]->detach(qp);
    qp->thread = -1;
    // A CPU thread's inline step still running (its commit raced with this detach, which
    // the QueuePair's contract rules out) is waited for: nobody touches the QP after this.
    while (qp->busy.load(std::memory_order_acquire)) std::this_thread::yield();
}

void Proxy::step_inline(ProxyQp* qp) {
    if (!inline_ || qp->thread < 0) return;
    // Free (a CPU initiator's common case): this thread takes the QP and steps what it
    // published itself (program order), with no request to make. Held: it asks for a step
    // (the Dekker pair above step_held), so that the holder steps again before letting go and
    // this thread's work never waits for the proxy thread's next turn (release: what this
    // thread published is visible with the flag), then tries once more. Made every time, the
    // request put a store, a full fence and an exchange on every CPU-initiated message's path.
    if (!qp->try_hold()) {
        qp->again.store(true, std::memory_order_release);
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (!qp->try_hold()) return;
    }
    // Batch arrays per CPU thread (the same for every context it posts on: one holder at a
    // time per thread), made on its first inline step.
    thread_local ProxyScratch scratch;
    ProxyStep stepper(scratch, inline_ctr_);
    step_held(*qp, stepper);
    inline_steps_.fetch_add(1, std::memory_order_relaxed);
}

void Proxy::kick(const ProxyQp* qp) {
    if (qp->thread >= 0) threads_[size_t(qp->thread)]->kick();
}

void ProxyCounters::add_to(ProxyStats& s) const {
    auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    s.send_wqes += ld(send_wqes);
    s.send_wrs += ld(send_wrs);
    s.recv_wrs += ld(recv_wrs);
    s.post_calls += ld(post_calls);
    s.completions += ld(completions);
    s.cqes += ld(cqes);
    s.backpressure += ld(backpressure);
    s.gpudirect_flushes += ld(gpudirect_flushes);
}

ProxyStats Proxy::stats() const {
    ProxyStats s;
    for (const auto& t : threads_) t->add_stats(s);
    inline_ctr_.add_to(s);
    s.inline_steps = inline_steps_.load(std::memory_order_relaxed);
    return s;
}

// ---- ProxyThread: lifecycle ---------------------------------------------------------------

ProxyScratch::ProxyScratch()
    : sslot(new SendSlot[kProxyBatch]()),  // zeroed: translate_send writes only what RC uses
      rslot(new RecvSlot[kProxyBatch]()),
      inl(new uint8_t[size_t(kProxyBatch) * kMaxInlineCopy]),
      wc(new ibv_wc[kProxyBatch]) {}

ProxyThread::ProxyThread(int index, uint32_t max_idle_sleep_us, uint32_t spin_turns)
    : index_(index), max_idle_sleep_us_(max_idle_sleep_us), spin_turns_(spin_turns) {
    thread_ = std::thread([this] { run(); });
}

ProxyThread::~ProxyThread() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_.store(true);
        cv_.notify_all();
    }
    thread_.join();
}

void ProxyThread::attach(ProxyQp* qp) {
    std::unique_lock<std::mutex> lock(mu_);
    adds_.push_back(qp);
    const uint64_t want = ++requested_;
    changes_.store(true, std::memory_order_release);
    cv_.notify_all();
    done_cv_.wait(lock, [&] { return applied_ >= want; });
}

void ProxyThread::detach(ProxyQp* qp) {
    std::unique_lock<std::mutex> lock(mu_);
    removes_.push_back(qp);
    const uint64_t want = ++requested_;
    changes_.store(true, std::memory_order_release);
    cv_.notify_all();
    done_cv_.wait(lock, [&] { return applied_ >= want; });
}

void ProxyThread::kick() {
    if (!sleeping_.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> lock(mu_);
    kicked_ = true;
    cv_.notify_all();
}

void ProxyThread::add_stats(ProxyStats& s) const {
    ctr_.add_to(s);
    s.loops += loops_.load(std::memory_order_relaxed);
    s.sleeps += sleeps_.load(std::memory_order_relaxed);
    s.quiet_passes += quiet_passes_.load(std::memory_order_relaxed);
}

bool ProxyThread::apply_changes() {
    std::lock_guard<std::mutex> lock(mu_);
    for (ProxyQp* q : adds_) qps_.push_back(q);
    for (ProxyQp* q : removes_) qps_.erase(std::remove(qps_.begin(), qps_.end(), q), qps_.end());
    adds_.clear();
    removes_.clear();
    applied_ = requested_;
    changes_.store(false, std::memory_order_relaxed);
    done_cv_.notify_all();
    return stop_.load();
}

// The loop: every QP of the thread takes one step (completions, receives, one batch of
// sends); while any step did something the loop goes on at once. Idle, it backs off: spins
// (a pause per turn) for a while, then sleeps 1, 2, 4 ... us up to max_idle_sleep_us (0:
// it only yields), woken early by attach/detach, kicks (host waiters) and stop. The QueuePair
// objects detach their QPs before the context (and so the proxy) can go away, so a stopped
// thread has nothing left to complete or flush.
void ProxyThread::run() {
    const uint32_t kSpinTurns = spin_turns_;
    ProxyStep stepper(scratch_, ctr_);
    uint32_t idle = 0;
    for (;;) {
        if (changes_.load(std::memory_order_acquire) || stop_.load(std::memory_order_relaxed)) {
            // Stopped: the QPs detached before (they keep the context, and so the proxy, alive).
            if (apply_changes()) return;
        }
        size_t work = 0;
        uint64_t passed = 0;
        for (ProxyQp* p : qps_) {
            if (p->quiet()) {  // nothing new since its last step left it idle
                ++passed;
                continue;
            }
            if (!p->try_hold()) continue;  // a CPU thread steps it inline right now
            work += step_held(*p, stepper);
        }
        bump(loops_);
        if (passed) bump(quiet_passes_, passed);
        if (work) {
            idle = 0;
            continue;
        }
        if (++idle < kSpinTurns) {
            atom::relax();
            continue;
        }
        if (max_idle_sleep_us_ == 0) {
            std::this_thread::yield();
            continue;
        }
        const uint32_t shift = std::min<uint32_t>(idle - kSpinTurns, 20);
        const uint32_t us = std::min<uint32_t>(max_idle_sleep_us_, 1u << shift);
        std::unique_lock<std::mutex> lock(mu_);
        sleeping_.store(true, std::memory_order_release);
        cv_.wait_for(lock, std::chrono::microseconds(us),
                     [&] { return kicked_ || changes_.load() || stop_.load(); });
        sleeping_.store(false, std::memory_order_relaxed);
        if (kicked_) idle = kSpinTurns;  // back to short sleeps
        kicked_ = false;
        bump(sleeps_);
    }
}

}  // namespace gv::detail::verbs
