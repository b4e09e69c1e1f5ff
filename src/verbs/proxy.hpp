// The verbs proxy: CPU threads that read the mlx5 WQEs kernels and CPU threads publish in
// pinned host memory, post them as verbs work requests (through a Port: a libibverbs device,
// or the sink of the tests), poll the device's completions and write mlx5 CQEs back into the
// rings device code polls. docs/verbs.md ("The verbs backend") describes the loop, its
// memory ordering, backpressure and shutdown.
//
// Ownership: a QP belongs to one proxy thread (assigned round-robin when it is created).
// Whoever holds the QP (ProxyQp::busy, a try-lock) reads its rings, posts its work requests
// and polls its device CQ (each QP has a device CQ of its own): its proxy thread, or a CPU
// thread that just committed on it or waits for it (Proxy::step_inline: one hand-off less on
// a CPU initiator's path). A CPU thread that finds the QP taken asks the holder for another
// step (ProxyQp::again) and leaves the work to it; the holder steps again before it lets go
// for good (step_held). Several threads may complete into one user-visible CQ
// (QPs of different threads sharing it): its producer index is an atomic counter, as in the
// software device (CqRing::push), and each QP's completions are written by its one thread,
// so they stay in order.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "gpuverbs/device/handles.hpp"
#include "gpuverbs/mlx5/cqe.cuh"
#include "verbs/port.hpp"
#include "verbs/translate.hpp"

namespace gv::detail::verbs {

/// The producer side of a user-visible CQ ring (the memory layout of the software device's
/// CQs: 64-byte CQEs, then the doorbell record whose first word is the pollers' consumer
/// index, then the overrun flag).
struct CqRing {
    mlx5_cqe64* cqes = nullptr;
    uint32_t* dbrec = nullptr;
    uint32_t* overrun = nullptr;
    uint32_t log_cnt = 0;
    /// Completions produced (slots handed out); CPU threads only, so a real atomic.
    std::atomic<unsigned long long> prod{0};

    /// Writes one CQE (any thread). False when the ring is full: the completion is lost and
    /// the overrun flag set, as the software device does.
    bool push(const mlx5::CqeFields& f);
};

/// What the proxy counts (relaxed counters, for rates and tests).
struct ProxyStats {
    uint64_t send_wqes = 0;     ///< send WQEs read from rings (posted, NOPs, malformed)
    uint64_t send_wrs = 0;      ///< send work requests posted
    uint64_t recv_wrs = 0;      ///< receive work requests posted
    uint64_t post_calls = 0;    ///< ibv_post_send / ibv_post_recv calls (lists)
    uint64_t completions = 0;   ///< work completions polled from the device
    uint64_t cqes = 0;          ///< CQEs written into user-visible rings
    uint64_t backpressure = 0;  ///< times a QP's WQEs were held back: the verbs QP was full
    uint64_t gpudirect_flushes = 0;  ///< GPUDirect write flushes before completions (VerbsOptions::gpudirect_flush)
    uint64_t inline_steps = 0;  ///< steps CPU threads ran themselves on committing or waiting (Proxy::step_inline)
    uint64_t loops = 0;
    uint64_t sleeps = 0;
    uint64_t quiet_passes = 0;  ///< QPs a proxy thread's turn passed without taking them (ProxyQp::quiet)
};

/// One QP as its holders see it. The host object (verbs_backend.cpp) fills the first part
/// before attaching it; the rest belongs to whoever holds `busy` (its proxy thread, or a CPU
/// thread stepping it inline) while attached.
struct ProxyQp {
    // ---- set by the host object, read-only for the proxy ----
    Port* port = nullptr;
    dev::QpQueues q{};
    uint32_t rq_stride = 0;
    CqRing* scq = nullptr;
    CqRing* rcq = nullptr;
    /// The words of VerbsQpPart: the QP's state (the host's transitions; the proxy writes
    /// ERROR), and the syndrome that moved it to ERROR (the first; 0: the user did).
    uint32_t* state = nullptr;
    uint32_t* syndrome = nullptr;
    uint32_t max_send_wr = 1;   ///< work requests in flight at most (what the QP was granted)
    uint32_t max_recv_wr = 1;
    uint32_t max_send_sge = 1;  ///< granted
    uint32_t max_recv_sge = 1;
    uint32_t sig_interval = 1;  ///< an unsignaled run is signaled internally at this length
    /// >= 0: that GPU's GPUDirect writes are flushed before the CQEs of a batch of
    /// completions that retires work which wrote local memory (VerbsOptions::gpudirect_flush).
    int gpudirect_flush_gpu = -1;

    // ---- the holder's (busy) ----
    /// A WQE read from the send ring and not yet completed, in ring order.
    struct Track {
        uint64_t pos;
        uint32_t bbs;
        uint32_t byte_len;
        SendKind kind;
        uint8_t opcode;
        uint8_t syndrome;  ///< Malformed
        bool user_signaled;
        bool oversize;     ///< Malformed: larger than what was published
    };
    std::vector<Track> track;  ///< ring of 2^q.sq_log_bb entries (one WQEBB at least each)
    uint64_t head = 0, tail = 0;
    uint64_t sq_ci = 0;          ///< next send WQEBB to read
    uint32_t send_inflight = 0;  ///< posted work requests not known complete
    uint32_t unsignaled = 0;     ///< posted since the last signaled one
    bool halted = false;         ///< a malformed WQE waits in `track`: nothing after it is posted
    uint64_t rq_ci = 0;          ///< next receive WQE to read
    uint32_t recv_inflight = 0;
    bool error = false;          ///< ERROR seen: everything left completes flushed
    int thread = -1;             ///< the owning thread (Proxy::attach)
    /// Held by whoever steps the QP (its proxy thread or a CPU thread inline): acquire on
    /// taking it, release on letting go, so each holder sees what the last one left.
    std::atomic<bool> busy{false};
    bool try_hold() { return !busy.load(std::memory_order_relaxed) && !busy.exchange(true, std::memory_order_acquire); }
    void let_go() { busy.store(false, std::memory_order_release); }
    /// Set by a CPU thread that published work and found the QP held (Proxy::step_inline): the
    /// holder may have read the doorbell records before that work was published, so it steps
    /// once more before it lets go for good (step_held). Without it the work waited for the
    /// proxy thread's next turn, which can come a whole idle sleep (max_idle_sleep_us) later.
    std::atomic<bool> again{false};

    /// What the last holder left, for the proxy thread to read without taking the QP: the send
    /// and receive doorbell positions (their records' low 16 bits) up to which it had consumed
    /// everything with nothing in flight, nothing held back and nothing waiting at the head of
    /// `track`; kNotQuiet otherwise. A QP whose records still read these has nothing to do
    /// (quiet()), so the proxy thread passes it with a few loads instead of the hold's
    /// exchange, the step and the let-go's fence: an idle QP cost every turn of the loop about
    /// as much as a busy one, so a thread with many QPs came back to its active one late.
    static constexpr uint32_t kNotQuiet = ~0u;
    std::atomic<uint32_t> quiet_sq{kNotQuiet}, quiet_rq{kNotQuiet};
    /// By the holder, at the end of each step (relaxed stores; a reader that sees an old value
    /// steps the QP once for nothing, or passes it once: the new value follows).
    void note_quiet();
    /// True when the last holder left nothing to do and no doorbell record moved since. New
    /// work always moves a record (or is a holder's, who steps it); completions come only for
    /// work in flight, which keeps the QP out of quiet. Not for the holder's own use.
    bool quiet() const;

    /// Back to the start (a new QP, or after QueuePair::reset()).
    void reset_progress();
};

class ProxyThread;

/// Counters of one proxy thread, or of the CPU threads' inline steps of a context (the
/// latter have several writers: every increment is an atomic add).
struct ProxyCounters {
    std::atomic<uint64_t> send_wqes{0}, send_wrs{0}, recv_wrs{0}, post_calls{0}, completions{0}, cqes{0},
        backpressure{0}, gpudirect_flushes{0};
    void add_to(ProxyStats& s) const;
};

/// A relaxed counter increment (counters are read for rates and tests only).
inline void bump(std::atomic<uint64_t>& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }

/// A context's proxy threads.
class Proxy {
public:
    /// threads >= 1; max_idle_sleep_us bounds an idle thread's sleep (0: it never sleeps);
    /// inline_steps: CPU threads step their QPs themselves (step_inline). cpu_only: nothing
    /// but CPU threads posts (a CPU context): with inline steps the threads are a fallback
    /// (work whose committer found the QP held, completions nobody waits for) and spin
    /// briefly before they sleep, leaving the cores to the committers.
    Proxy(uint32_t threads, uint32_t max_idle_sleep_us, bool inline_steps = true, bool cpu_only = false);
    /// Stops every thread (after the QPs detached: they complete or flush what they can
    /// first, see ProxyThread::run).
    ~Proxy();
    Proxy(const Proxy&) = delete;
    Proxy& operator=(const Proxy&) = delete;

    /// Hands a QP to a thread (round-robin). Returns once that thread has it.
    void attach(ProxyQp* qp);
    /// Takes a QP back. Returns once its thread no longer touches it (synchronous).
    void detach(ProxyQp* qp);
    /// Wakes the QP's thread if it sleeps (a host waiter found nothing to poll).
    void kick(const ProxyQp* qp);
    /// A CPU thread that committed on the QP, posted a receive or waits for it steps the QP
    /// itself (receives, sends, completions) when nobody else holds it, with batch arrays
    /// of its own; otherwise the holder (its proxy thread) does the work. Nothing for a
    /// detached QP, or when VerbsOptions::cpu_posts_inline is off.
    void step_inline(ProxyQp* qp);
    uint32_t threads() const { return uint32_t(threads_.size()); }
    ProxyStats stats() const;

private:
    std::vector<std::unique_ptr<ProxyThread>> threads_;
    std::atomic<uint32_t> next_{0};
    bool inline_;
    ProxyCounters inline_ctr_;
    std::atomic<uint64_t> inline_steps_{0};
};

/// Fixed batch arrays of whoever steps a QP (bounded memory whatever the load).
struct ProxyScratch {
    ProxyScratch();
    std::unique_ptr<SendSlot[]> sslot;
    std::unique_ptr<RecvSlot[]> rslot;
    std::unique_ptr<uint8_t[]> inl;
    std::unique_ptr<ibv_wc[]> wc;
};

class ProxyStep;

/// Steps a QP the caller holds, lets it go, and steps it again (taking it back) while another
/// thread asked for that (ProxyQp::again) in the meantime. Returns the work done (0: idle).
size_t step_held(ProxyQp& p, ProxyStep& stepper);

/// The second half of step_held: lets a held QP go, then takes it back and steps it while
/// another thread asked for a step. Returns the work done.
size_t let_go_checked(ProxyQp& p, ProxyStep& stepper);

/// One step of a QP by its holder (ProxyQp::busy), with the holder's batch arrays and
/// counters: receives, sends, completions (ProxyStep::step says why in that order).
class ProxyStep {
public:
    ProxyStep(ProxyScratch& s, ProxyCounters& c) : s_(s), ctr_(c) {}
    /// Returns how much it did (0: idle).
    size_t step(ProxyQp& p);

private:
    size_t poll(ProxyQp& p);
    bool batch_wrote_local(const ProxyQp& p, int n) const;
    void flush_gpudirect(ProxyQp& p);
    void on_send(ProxyQp& p, const ibv_wc& wc);
    void on_recv(ProxyQp& p, const ibv_wc& wc);
    size_t post_sends(ProxyQp& p, QpState st);
    size_t post_recvs(ProxyQp& p, QpState st);
    size_t flush_sends(ProxyQp& p);
    size_t flush_recvs(ProxyQp& p);
    void complete_head(ProxyQp& p);
    void complete_implicit(ProxyQp& p, const ProxyQp::Track& e, uint8_t syndrome);
    void rewind_sends(ProxyQp& p, const ibv_send_wr* bad, int rc);
    void enter_error(ProxyQp& p, uint8_t syndrome, bool move_device);
    void push(ProxyQp& p, CqRing* cq, const mlx5::CqeFields& f);

    ProxyScratch& s_;
    ProxyCounters& ctr_;
};

/// Work requests one proxy step posts per QP at most (the batch arrays are this long).
inline constexpr uint32_t kProxyBatch = 32;

/// One proxy thread: its QPs and the fixed batch arrays its posts and polls use.
class ProxyThread {
public:
    /// spin_turns: idle turns spent spinning before the first sleep.
    ProxyThread(int index, uint32_t max_idle_sleep_us, uint32_t spin_turns);
    ~ProxyThread();
    void attach(ProxyQp* qp);
    void detach(ProxyQp* qp);
    void kick();
    /// Adds this thread's counters to s.
    void add_stats(ProxyStats& s) const;

private:
    void run();
    bool apply_changes();

    const int index_;
    const uint32_t max_idle_sleep_us_;
    const uint32_t spin_turns_;
    std::vector<ProxyQp*> qps_;  // the thread's own list

    // Attach / detach requests, applied by the thread at the top of its loop.
    std::mutex mu_;
    std::condition_variable cv_;       // wakes the thread (requests, kicks, stop)
    std::condition_variable done_cv_;  // tells requesters their change was applied
    std::vector<ProxyQp*> adds_, removes_;
    uint64_t requested_ = 0, applied_ = 0;
    std::atomic<bool> changes_{false};
    std::atomic<bool> stop_{false};
    std::atomic<bool> sleeping_{false};
    bool kicked_ = false;

    ProxyCounters ctr_;
    std::atomic<uint64_t> loops_{0}, sleeps_{0}, quiet_passes_{0};
    ProxyScratch scratch_;

    std::thread thread_;
};

}  // namespace gv::detail::verbs
