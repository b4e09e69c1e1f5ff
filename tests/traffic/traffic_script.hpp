// The traffic suite's scripts: a test writes what an initiator does as a list of steps (one
// gv::dev call each: post, commit, wait, poll; plus the memory steps a responder needs:
// fill, check, store and wait on a word), and an initiator runs them: a CPU thread calls
// run_lane directly, a GPU kernel calls the very same function from every thread of a
// block. So both initiators make the same gv::dev calls in the same order, and one test
// body serves every backend instance (tests/traffic/traffic_env.hpp).
//
// A script has one or more lanes that run at the same time (CPU: one thread each; GPU: one
// block each): a writer and a responder polling what it wrote, two posters, a sender and a
// late receiver. Lanes meet through words in buffers (StoreWord / WaitWord).
//
// Plain data and __host__ __device__ code only: compiled by the host compiler into the CPU
// test binary and by nvcc into the CUDA one.
#pragma once

#include <cstdint>

#include "gpuverbs/device.cuh"

// The interpreter's functions: __host__ __device__ under nvcc (not force-inlined: one copy
// of the big switch per kernel), plain inline functions for the host compiler.
#if defined(__CUDACC__)
#define TRAFFIC_HD __host__ __device__ inline
#else
#define TRAFFIC_HD inline
#endif

namespace gvtest::traffic {

/// What one step does. The gv::dev call each one makes is named in the comment; fields of
/// Step not named there are unused.
enum class Op : uint32_t {
    Write,            ///< dev::write(qp, laddr, len, lkey, raddr, rkey, flags)
    WriteImm,         ///< dev::write_imm(qp, laddr, len, lkey, raddr, rkey, imm, flags)
    Read,             ///< dev::read(qp, laddr, len, lkey, raddr, rkey, flags)
    Send,             ///< dev::send(qp, laddr, len, lkey, flags)
    SendImm,          ///< dev::send_imm(qp, laddr, len, lkey, imm, flags)
    PostSge,          ///< dev::post_sge(qp, opcode, sges[sge..sge+nsge), nsge, raddr, rkey, imm, flags)
    WriteInline,      ///< dev::write_inline(qp, laddr, len, raddr, rkey, flags)
    SendInline,       ///< dev::send_inline(qp, laddr, len, flags)
    WriteInlineWeak,  ///< dev::write_inline_weak(qp, get_position(qp).pos, laddr, len, raddr, rkey, flags)
    FetchAdd,         ///< dev::fetch_add(qp, (uint64_t*)laddr, lkey, raddr, rkey, a, flags)
    CompareSwap,      ///< dev::compare_swap(qp, (uint64_t*)laddr, lkey, raddr, rkey, a (compare), b (swap), flags)
    PutSignal,        ///< dev::put_signal(qp, laddr, len, lkey, raddr, rkey, (uint64_t*)b, lkey2, a (signal), rkey2, add, flags)
    Nop,              ///< dev::nop(qp, flags)
    Recv,             ///< dev::recv(qp, laddr, len, lkey)
    PostRecv,         ///< dev::post_recv(qp, sges[sge..sge+nsge) or nullptr when nsge == 0, nsge)
    Commit,           ///< dev::commit(qp): every thread of the lane calls (GPU: block scope)
    WaitSend,         ///< dev::wait_send(qp, len, cqes + out, timeout_ns, &count)
    WaitRecv,         ///< dev::wait_recv(qp, len, cqes + out, timeout_ns, &count)
    PollSend,         ///< count = dev::poll_cq(qp.scq, cqes + out, len) (after dev::drive), once
    PollRecv,         ///< count = dev::poll_cq(qp.rcq, cqes + out, len) (after dev::drive), once
    PollSendChunks,   ///< dev::poll_cq(qp.scq, .., at most 64) until len came or timeout_ns;
                      ///< value = what the first call returned, value2 = the second
    Counters,         ///< value = qp's sq_reserved, value2 = sq_ready, count = rq_reserved
    InError,          ///< value = dev::qp_in_error(qp)
    Fill,             ///< [laddr, laddr+len) = pattern (a, b) (the lane's threads store)
    Check,            ///< [laddr, laddr+len) == pattern (a, b)? count = bytes that differ,
                      ///< value = offset of the first (laddr and len 4-byte aligned)
    StoreWord,        ///< release store of a into the 8-byte word at laddr
    WaitWord,         ///< until the 8-byte word at laddr >= a (acquire loads), at most
                      ///< timeout_ns: Timeout; value = the last value seen
    Clock,            ///< value = the clock (gv::atom::now_ns)
    Spin,             ///< busy-wait a nanoseconds
};

/// The data of Fill and Check: word w (4 bytes) of pattern (seed, mode). Mode 0: every byte
/// is uint8_t(seed). Mode 1: every word differs from its neighbours and from the same word
/// of any other seed below 2^32 (so data put at the wrong place, or stale, shows).
TRAFFIC_HD uint32_t pattern_word(uint64_t seed, uint64_t w, uint64_t mode) {
    if (mode == 0) return uint32_t(uint8_t(seed)) * 0x01010101u;
    return uint32_t(seed) * 0x9E3779B1u ^ (uint32_t(w) * 0x85EBCA77u + 0x1234567u);
}

/// The name of an Op, for failure messages.
TRAFFIC_HD const char* op_name(Op op) {
    switch (op) {
        case Op::Write: return "write";
        case Op::WriteImm: return "write_imm";
        case Op::Read: return "read";
        case Op::Send: return "send";
        case Op::SendImm: return "send_imm";
        case Op::PostSge: return "post_sge";
        case Op::WriteInline: return "write_inline";
        case Op::SendInline: return "send_inline";
        case Op::WriteInlineWeak: return "write_inline_weak";
        case Op::FetchAdd: return "fetch_add";
        case Op::CompareSwap: return "compare_swap";
        case Op::PutSignal: return "put_signal";
        case Op::Nop: return "nop";
        case Op::Recv: return "recv";
        case Op::PostRecv: return "post_recv";
        case Op::Commit: return "commit";
        case Op::WaitSend: return "wait_send";
        case Op::WaitRecv: return "wait_recv";
        case Op::PollSend: return "poll_cq(send CQ)";
        case Op::PollRecv: return "poll_cq(receive CQ)";
        case Op::PollSendChunks: return "poll_cq(send CQ, 64 at a time)";
        case Op::Counters: return "read the queue counters";
        case Op::InError: return "qp_in_error";
        case Op::Fill: return "fill";
        case Op::Check: return "check";
        case Op::StoreWord: return "store word";
        case Op::WaitWord: return "wait for word";
        case Op::Clock: return "clock";
        case Op::Spin: return "spin";
    }
    return "?";
}

/// One step of a lane. Plain data, the same bytes for CPU threads and kernels.
struct Step {
    Op op;
    uint32_t qp;  ///< index into the run's QP handles (TrafficEnv: 0 requester, 1 responder)
    uint32_t flags;
    uint32_t len;  ///< bytes; or completions to wait for / poll at most
    uint64_t laddr;
    uint64_t raddr;
    uint64_t a, b;
    uint64_t timeout_ns;
    uint32_t lkey, rkey;
    uint32_t lkey2, rkey2;
    uint32_t imm;
    uint32_t opcode;  ///< PostSge
    uint32_t sge, nsge;  ///< PostSge / PostRecv: entries of the run's Sge table
    uint32_t out;        ///< waits and polls: first slot of the run's completion table
    gv::Status expect;   ///< the status the call must return; anything else stops the lane
    uint32_t expect_also;  ///< more statuses accepted, as bits (1 << status); 0: only `expect`
    uint32_t sys;        ///< memory steps: the memory is host memory (system-scope atomics)
};

/// What one step returned.
struct StepResult {
    gv::Status status;
    uint32_t count;   ///< completions polled / bytes that differ / rq_reserved
    uint64_t value;   ///< see Op
    uint64_t value2;
};

/// Everything a run reads and writes, as pointers the initiator can use (host pointers for
/// CPU threads, device pointers for a kernel).
struct RunView {
    const gv::dev::QpHandle* qps;
    const Step* steps;             ///< every lane's steps, lane after lane
    const uint32_t* lane_begin;    ///< lane i runs steps [lane_begin[i], lane_begin[i+1])
    const gv::Sge* sges;
    gv::Completion* cqes;
    StepResult* results;           ///< one per step
    int32_t* stopped;              ///< per lane: the step that returned what it should not (-1: none)
    uint32_t* abort;               ///< set by a lane that stopped: waiting lanes give up at once
    uint32_t abort_sys;            ///< abort is host memory
};

/// The threads that run one lane. CpuLane: one CPU thread. (GPU: traffic_gpu.cuh.)
struct CpuLane {
    bool leader() const { return true; }
    uint32_t rank() const { return 0; }
    uint32_t size() const { return 1; }
    void sync() const {}
    uint64_t bcast(uint64_t v) const { return v; }
    gv::Status commit(const gv::dev::QpHandle& qp) const { return gv::dev::commit(qp); }
    /// A Check's totals over the lane's threads (one here).
    StepResult reduce_check(uint64_t bad, uint64_t first) const {
        return StepResult{gv::Status::Ok, uint32_t(bad), first, 0};
    }
};

namespace detail {

/// Polls cq `max` at a time until n completions came (or timeout_ns); returns how many.
TRAFFIC_HD uint32_t poll_chunks(const gv::dev::QpHandle& qp, const gv::dev::CqHandle& cq, uint32_t n,
                                    gv::Completion* out, uint64_t timeout_ns, uint64_t* first, uint64_t* second) {
    uint32_t total = 0, calls = 0;
    const uint64_t t0 = gv::atom::now_ns();
    while (total < n) {
        uint32_t want = n - total < 64 ? n - total : 64;
        uint32_t k = gv::dev::poll_cq(cq, out + total, want);
        if (k) {
            if (calls == 0) *first = k;
            if (calls == 1) *second = k;
            ++calls;
            total += k;
            continue;
        }
        gv::dev::drive(qp);
        if (gv::atom::now_ns() - t0 > timeout_ns) break;
    }
    return total;
}

/// The leader's part of one step (posting, waiting, polling, words).
TRAFFIC_HD void leader_step(const RunView& v, const Step& s, StepResult& r) {
    namespace dev = gv::dev;
    const dev::QpHandle& qp = v.qps[s.qp];
    void* lp = reinterpret_cast<void*>(s.laddr);
    switch (s.op) {
        case Op::Write: r.status = dev::write(qp, lp, s.len, s.lkey, s.raddr, s.rkey, s.flags, s.timeout_ns); break;
        case Op::WriteImm:
            r.status = dev::write_imm(qp, lp, s.len, s.lkey, s.raddr, s.rkey, s.imm, s.flags, s.timeout_ns);
            break;
        case Op::Read: r.status = dev::read(qp, lp, s.len, s.lkey, s.raddr, s.rkey, s.flags, s.timeout_ns); break;
        case Op::Send: r.status = dev::send(qp, lp, s.len, s.lkey, s.flags, s.timeout_ns); break;
        case Op::SendImm: r.status = dev::send_imm(qp, lp, s.len, s.lkey, s.imm, s.flags, s.timeout_ns); break;
        case Op::PostSge:
            r.status = dev::post_sge(qp, uint8_t(s.opcode), v.sges + s.sge, s.nsge, s.raddr, s.rkey, s.imm, s.flags,
                                     s.timeout_ns);
            break;
        case Op::WriteInline:
            r.status = dev::write_inline(qp, lp, s.len, s.raddr, s.rkey, s.flags, s.timeout_ns);
            break;
        case Op::SendInline: r.status = dev::send_inline(qp, lp, s.len, s.flags, s.timeout_ns); break;
        case Op::WriteInlineWeak:
            r.status = dev::write_inline_weak(qp, dev::get_position(qp).pos, lp, s.len, s.raddr, s.rkey, s.flags);
            break;
        case Op::FetchAdd:
            r.status = dev::fetch_add(qp, static_cast<uint64_t*>(lp), s.lkey, s.raddr, s.rkey, s.a, s.flags,
                                      s.timeout_ns);
            break;
        case Op::CompareSwap:
            r.status = dev::compare_swap(qp, static_cast<uint64_t*>(lp), s.lkey, s.raddr, s.rkey, s.a, s.b, s.flags,
                                         s.timeout_ns);
            break;
        case Op::PutSignal:
            r.status = dev::put_signal(qp, lp, s.len, s.lkey, s.raddr, s.rkey, reinterpret_cast<uint64_t*>(s.b),
                                       s.lkey2, s.a, s.rkey2, uint64_t(s.imm), s.flags, s.timeout_ns);
            break;
        case Op::Nop: r.status = dev::nop(qp, s.flags, s.timeout_ns); break;
        case Op::Recv: r.status = dev::recv(qp, lp, s.len, s.lkey, s.timeout_ns); break;
        case Op::PostRecv:
            r.status = dev::post_recv(qp, s.nsge ? v.sges + s.sge : nullptr, s.nsge, s.timeout_ns);
            break;
        case Op::WaitSend: r.status = dev::wait_send(qp, s.len, v.cqes + s.out, s.timeout_ns, &r.count); break;
        case Op::WaitRecv: r.status = dev::wait_recv(qp, s.len, v.cqes + s.out, s.timeout_ns, &r.count); break;
        case Op::PollSend:
        case Op::PollRecv:
            dev::drive(qp);
            r.count = dev::poll_cq(s.op == Op::PollSend ? qp.scq : qp.rcq, v.cqes + s.out, s.len);
            r.status = gv::Status::Ok;
            break;
        case Op::PollSendChunks:
            r.count = poll_chunks(qp, qp.scq, s.len, v.cqes + s.out, s.timeout_ns, &r.value, &r.value2);
            r.status = r.count == s.len ? gv::Status::Ok : gv::Status::Timeout;
            break;
        case Op::Counters:
            r.value = gv::atom::load_acquire(&qp.q.ctr->sq_reserved, qp.q.sys != 0);
            r.value2 = gv::atom::load_acquire(&qp.q.ctr->sq_ready, qp.q.sys != 0);
            r.count = uint32_t(gv::atom::load_acquire(&qp.q.ctr->rq_reserved, qp.q.sys != 0));
            r.status = gv::Status::Ok;
            break;
        case Op::InError:
            r.value = dev::qp_in_error(qp) ? 1 : 0;
            r.status = gv::Status::Ok;
            break;
        case Op::StoreWord:
            gv::atom::store_release(reinterpret_cast<unsigned long long*>(s.laddr), (unsigned long long)s.a, s.sys != 0);
            r.status = gv::Status::Ok;
            break;
        case Op::WaitWord: {
            const auto* w = reinterpret_cast<const unsigned long long*>(s.laddr);
            const uint64_t t0 = gv::atom::now_ns();
            uint32_t spins = 0;
            r.status = gv::Status::Ok;
            while ((r.value = gv::atom::load_acquire(w, s.sys != 0)) < s.a) {
                if (gv::atom::load_relaxed(v.abort, v.abort_sys != 0) || gv::atom::now_ns() - t0 > s.timeout_ns) {
                    r.status = gv::Status::Timeout;
                    break;
                }
                dev::spin_pause(spins, 1024);
            }
            break;
        }
        case Op::Clock:
            r.value = gv::atom::now_ns();
            r.status = gv::Status::Ok;
            break;
        case Op::Spin: {
            const uint64_t t0 = gv::atom::now_ns();
            while (gv::atom::now_ns() - t0 < s.a) gv::atom::relax();
            r.status = gv::Status::Ok;
            break;
        }
        default: break;  // the lane's collective steps: run_lane
    }
}

}  // namespace detail

/// Runs lane `lane` of a run. Every thread of the lane calls it (L: CpuLane, or the GPU's
/// block); the leader posts, waits and polls, all threads commit, fill and check together.
/// Stops at the first step that returns something else than its `expect` (or a Check that
/// found differing bytes), records which in v.stopped[lane] and sets *v.abort.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <typename L>
TRAFFIC_HD void run_lane(const RunView& v, uint32_t lane, const L& g) {
    for (uint32_t i = v.lane_begin[lane]; i < v.lane_begin[lane + 1]; ++i) {
        const Step& s = v.steps[i];
        StepResult r{gv::Status::Ok, 0, 0, 0};
        if (s.op == Op::Commit) {
            gv::Status st = g.commit(v.qps[s.qp]);
            r.status = gv::Status(g.bcast(uint64_t(st)));  // the leader's view, for everyone
        } else if (s.op == Op::Fill) {
            if (s.b == 0) {
                auto* p = reinterpret_cast<uint8_t*>(s.laddr);
                for (uint64_t j = g.rank(); j < s.len; j += g.size()) p[j] = uint8_t(s.a);
            } else {
                auto* p = reinterpret_cast<uint32_t*>(s.laddr);
                for (uint64_t j = g.rank(); j < s.len / 4; j += g.size()) p[j] = pattern_word(s.a, j, s.b);
            }
        } else if (s.op == Op::Check) {
            // Relaxed atomic loads: the data is another agent's (the executor's) stores,
            // ordered before by the WaitWord that precedes a Check.
            const auto* p = reinterpret_cast<const uint32_t*>(s.laddr);
            uint64_t bad = 0, first = ~0ull;
            for (uint64_t j = g.rank(); j < s.len / 4; j += g.size()) {
                const uint32_t want = pattern_word(s.a, j, s.b);
                uint32_t got = gv::atom::load_relaxed(p + j, s.sys != 0);
                if (got != want) {
                    for (uint32_t k = 0; k < 4; ++k)
                        if (uint8_t(got >> (8 * k)) != uint8_t(want >> (8 * k))) {
                            ++bad;
                            if (first == ~0ull) first = j * 4 + k;
                        }
                }
            }
            r = g.reduce_check(bad, first);
        } else if (g.leader()) {
            detail::leader_step(v, s, r);
        }
        const bool accepted = r.status == s.expect || ((s.expect_also >> uint32_t(r.status)) & 1u) != 0;
        const bool stop = g.bcast((!accepted || (s.op == Op::Check && r.count != 0)) ? 1 : 0) != 0;
        if (g.leader()) v.results[i] = r;
        if (stop) {
            if (g.leader()) {
                v.stopped[lane] = int32_t(i - v.lane_begin[lane]);
                gv::atom::store_release(v.abort, 1u, v.abort_sys != 0);
            }
            return;
        }
    }
}

}  // namespace gvtest::traffic
