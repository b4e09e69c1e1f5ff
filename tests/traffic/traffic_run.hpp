// The traffic suite's vocabulary for writing a test: data buffers (where they live, how the
// host fills and reads them), the Script a test builds with the same arguments as the gv::dev
// calls its steps make, and the RunResult it reads back (completions, statuses, a report for
// failure messages), with the helpers the checks use. The environment that runs a script on
// a backend instance is traffic_env.hpp; the steps themselves, as the initiators execute them,
// traffic_script.hpp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "traffic/traffic_script.hpp"

namespace gvtest::traffic {

constexpr uint64_t kMs = 1'000'000ull;
constexpr uint64_t kWait = 5'000 * kMs;  ///< bound of every wait a script makes

// ---- where buffers live -------------------------------------------------------------------

/// Where a test's data buffers live, and how the host allocates, fills and reads them.
class Memory {
public:
    virtual ~Memory() = default;
    /// "host memory", "GPU memory".
    virtual const char* name() const = 0;
    /// True when CPU threads can load and store it (steps then use system-scope atomics).
    virtual bool host() const = 0;
    /// `bytes` bytes, 4096-byte aligned; nullptr when that fails.
    virtual void* alloc(size_t bytes) = 0;
    virtual void release(void* p) = 0;
    virtual void fill(void* p, uint8_t v, size_t n) = 0;
    virtual void upload(void* dst, const void* src, size_t n) = 0;
    virtual void download(void* dst, const void* src, size_t n) = 0;
};

/// Page-aligned host memory (a GPU context pins and maps it when it is registered).
class HostMemory : public Memory {
public:
    const char* name() const override { return "host memory"; }
    bool host() const override { return true; }
    void* alloc(size_t bytes) override { return std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096); }
    void release(void* p) override { std::free(p); }
    void fill(void* p, uint8_t v, size_t n) override { std::memset(p, v, n); }
    void upload(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
    void download(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
};

// ---- a run as the host holds it ----------------------------------------------------------


/// A run as the host holds it: the QP handles, every lane's steps, and room for what comes
/// back (completions, one result per step, where each lane stopped).
struct RunData {
    std::vector<gv::dev::QpHandle> qps;
    std::vector<Step> steps;            ///< lane after lane
    std::vector<uint32_t> lane_begin;   ///< lanes + 1 entries
    std::vector<gv::Sge> sges;
    std::vector<gv::Completion> cqes;
    std::vector<StepResult> results;    ///< one per step
    std::vector<int32_t> stopped;       ///< per lane; -1: ran to its end
    std::string error;                  ///< the initiator itself failed (a launch, a copy): why
    uint32_t lanes() const { return uint32_t(lane_begin.size() - 1); }
};

// ---- buffers -----------------------------------------------------------------------------

/// A registered buffer in the instance's memory.
class Buffer {
public:
    Buffer(Memory& mem, const gv::ProtectionDomain& pd, size_t n, uint32_t access, int fill)
        : mem_(mem), n_(n) {
        p_ = static_cast<uint8_t*>(mem.alloc(n));
        if (!p_) throw std::runtime_error("allocating " + std::to_string(n) + " bytes of " + mem.name());
        if (fill >= 0) mem.fill(p_, uint8_t(fill), n);
        mr_ = std::make_unique<gv::MemoryRegion>(pd, p_, n, access);
    }
    ~Buffer() {
        mr_.reset();
        mem_.release(p_);
    }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    uint8_t* ptr(size_t off = 0) const { return p_ + off; }
    uint64_t addr(size_t off = 0) const { return reinterpret_cast<uint64_t>(p_ + off); }
    size_t size() const { return n_; }
    uint32_t lkey() const { return mr_->lkey(); }
    uint32_t rkey() const { return mr_->rkey(); }
    bool host() const { return mem_.host(); }
    gv::Sge sge(size_t off, uint32_t len) const { return gv::Sge{addr(off), len, lkey()}; }

    void upload(const std::vector<uint8_t>& v, size_t off = 0) { mem_.upload(p_ + off, v.data(), v.size()); }
    void fill(uint8_t v, size_t off = 0, size_t n = ~size_t(0)) { mem_.fill(p_ + off, v, n == ~size_t(0) ? n_ - off : n); }
    /// Random bytes (seeded) over the whole buffer; returns them.
    std::vector<uint8_t> randomize(uint64_t seed) {
        std::vector<uint8_t> v(n_);
        gvtest::fill_random(v.data(), n_, seed);
        upload(v);
        return v;
    }
    std::vector<uint8_t> download(size_t off = 0, size_t n = ~size_t(0)) const {
        std::vector<uint8_t> v(n == ~size_t(0) ? n_ - off : n);
        if (!v.empty()) mem_.download(v.data(), p_ + off, v.size());
        return v;
    }
    uint64_t word(size_t off) const {
        uint64_t w = 0;
        mem_.download(&w, p_ + off, 8);
        return w;
    }
    void set_word(size_t off, uint64_t w) { mem_.upload(p_ + off, &w, 8); }

private:
    Memory& mem_;
    size_t n_;
    uint8_t* p_ = nullptr;
    std::unique_ptr<gv::MemoryRegion> mr_;
};

// ---- scripts ------------------------------------------------------------------------------

/// Names a step of a script: lane and position in the lane.
struct StepId {
    uint32_t lane = 0, index = 0;
};

class Script;

/// What a builder returns: the step just added, whose expected status may still change.
class StepRef {
public:
    StepRef(Script& s, StepId id) : s_(s), id_(id) {}
    /// The status the call must return (default Ok); anything else stops the lane.
    StepId expect(gv::Status st);
    /// Either of two statuses (where a race between the initiator and an executor decides).
    StepId expect_either(gv::Status a, gv::Status b);
    /// How long the call may wait (default kWait).
    StepRef& timeout(uint64_t ns);
    operator StepId() const { return id_; }  // NOLINT: builders' results convert to ids

private:
    Script& s_;
    StepId id_;
};

/// A list of steps per lane, built with the same arguments as the gv::dev calls they make.
/// Steps go to the current lane (on()) and address the current QP (use()).
class Script {
public:
    explicit Script(uint32_t lanes = 1) : lanes_(lanes) {}

    /// Following steps go to lane `lane`.
    Script& on(uint32_t lane) {
        cur_lane_ = lane;
        return *this;
    }
    /// Following steps address QP `qp` (TrafficEnv: 0 requester, 1 responder).
    Script& use(uint32_t qp) {
        cur_qp_ = qp;
        return *this;
    }

    StepRef write(uint64_t laddr, uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                  uint32_t flags = gv::kSignaled) {
        return add(rdma(Op::Write, laddr, len, lkey, raddr, rkey, flags));
    }
    StepRef write_imm(uint64_t laddr, uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t imm,
                      uint32_t flags = gv::kSignaled) {
        Step s = rdma(Op::WriteImm, laddr, len, lkey, raddr, rkey, flags);
        s.imm = imm;
        return add(s);
    }
    StepRef read(uint64_t laddr, uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                 uint32_t flags = gv::kSignaled) {
        return add(rdma(Op::Read, laddr, len, lkey, raddr, rkey, flags));
    }
    StepRef send(uint64_t laddr, uint32_t len, uint32_t lkey, uint32_t flags = gv::kSignaled) {
        return add(rdma(Op::Send, laddr, len, lkey, 0, 0, flags));
    }
    StepRef send_imm(uint64_t laddr, uint32_t len, uint32_t lkey, uint32_t imm, uint32_t flags = gv::kSignaled) {
        Step s = rdma(Op::SendImm, laddr, len, lkey, 0, 0, flags);
        s.imm = imm;
        return add(s);
    }
    /// A WQE of `opcode` (WRITE, WRITE_IMM, READ, SEND, SEND_IMM) with a gather (scatter)
    /// list.
    StepRef post_sge(uint8_t opcode, const std::vector<gv::Sge>& sg, uint64_t raddr, uint32_t rkey, uint32_t imm,
                     uint32_t flags = gv::kSignaled) {
        Step s = rdma(Op::PostSge, 0, 0, 0, raddr, rkey, flags);
        s.opcode = opcode;
        s.imm = imm;
        s.sge = uint32_t(sges_.size());
        s.nsge = uint32_t(sg.size());
        sges_.insert(sges_.end(), sg.begin(), sg.end());
        return add(s);
    }
    StepRef write_inline(uint64_t data, uint32_t len, uint64_t raddr, uint32_t rkey, uint32_t flags = gv::kSignaled) {
        return add(rdma(Op::WriteInline, data, len, 0, raddr, rkey, flags));
    }
    StepRef send_inline(uint64_t data, uint32_t len, uint32_t flags = gv::kSignaled) {
        return add(rdma(Op::SendInline, data, len, 0, 0, 0, flags));
    }
    /// write_inline_weak at the current position (for its refusals: nothing is published).
    StepRef write_inline_weak(uint64_t data, uint32_t len, uint64_t raddr, uint32_t rkey) {
        return add(rdma(Op::WriteInlineWeak, data, len, 0, raddr, rkey, 0));
    }
    StepRef fetch_add(uint64_t laddr, uint32_t lkey, uint64_t raddr, uint32_t rkey, uint64_t add_v,
                      uint32_t flags = gv::kSignaled) {
        Step s = rdma(Op::FetchAdd, laddr, 8, lkey, raddr, rkey, flags);
        s.a = add_v;
        return add(s);
    }
    StepRef compare_swap(uint64_t laddr, uint32_t lkey, uint64_t raddr, uint32_t rkey, uint64_t compare,
                         uint64_t swap, uint32_t flags = gv::kSignaled) {
        Step s = rdma(Op::CompareSwap, laddr, 8, lkey, raddr, rkey, flags);
        s.a = compare;
        s.b = swap;
        return add(s);
    }
    StepRef put_signal(uint64_t laddr, uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey, uint64_t old,
                       uint32_t old_lkey, uint64_t signal, uint32_t signal_rkey, uint32_t add_v,
                       uint32_t flags = gv::kSignaled) {
        Step s = rdma(Op::PutSignal, laddr, len, lkey, raddr, rkey, flags);
        s.b = old;
        s.lkey2 = old_lkey;
        s.a = signal;
        s.rkey2 = signal_rkey;
        s.imm = add_v;
        return add(s);
    }
    StepRef nop(uint32_t flags = gv::kSignaled) { return add(rdma(Op::Nop, 0, 0, 0, 0, 0, flags)); }
    /// A receive of one buffer; recv(0, 0, 0): a receive without a buffer.
    StepRef recv(uint64_t laddr, uint32_t len, uint32_t lkey) { return add(rdma(Op::Recv, laddr, len, lkey, 0, 0, 0)); }
    /// A receive with a scatter list (empty: no buffer, post_recv(qp, nullptr, 0)).
    StepRef post_recv(const std::vector<gv::Sge>& sg) {
        Step s = rdma(Op::PostRecv, 0, 0, 0, 0, 0, 0);
        s.sge = uint32_t(sges_.size());
        s.nsge = uint32_t(sg.size());
        sges_.insert(sges_.end(), sg.begin(), sg.end());
        return add(s);
    }
    StepRef commit() { return add(rdma(Op::Commit, 0, 0, 0, 0, 0, 0)); }
    StepRef wait_send(uint32_t n, uint64_t timeout_ns = kWait) { return add(completions(Op::WaitSend, n, timeout_ns)); }
    StepRef wait_recv(uint32_t n, uint64_t timeout_ns = kWait) { return add(completions(Op::WaitRecv, n, timeout_ns)); }
    /// One poll_cq of at most `max` completions (nothing waited for).
    StepRef poll_send(uint32_t max) { return add(completions(Op::PollSend, max, 0)); }
    StepRef poll_recv(uint32_t max) { return add(completions(Op::PollRecv, max, 0)); }
    /// poll_cq at most 64 at a time until n came.
    StepRef poll_send_chunks(uint32_t n, uint64_t timeout_ns = kWait) {
        return add(completions(Op::PollSendChunks, n, timeout_ns));
    }
    StepRef counters() { return add(rdma(Op::Counters, 0, 0, 0, 0, 0, 0)); }
    StepRef in_error() { return add(rdma(Op::InError, 0, 0, 0, 0, 0, 0)); }
    /// The lane's threads store `v` into every byte of b[off, off+len).
    StepRef fill(const Buffer& b, size_t off, uint32_t len, uint8_t v) { return add(mem(Op::Fill, b, off, len, v)); }
    /// ... or pattern_word(seed, w, 1) into every word w (off and len multiples of 4).
    StepRef fill_pattern(const Buffer& b, size_t off, uint32_t len, uint32_t seed) {
        Step s = mem(Op::Fill, b, off, len, seed);
        s.b = 1;
        return add(s);
    }
    /// Every byte of b[off, off+len) must be `v` (off and len multiples of 4).
    StepRef check(const Buffer& b, size_t off, uint32_t len, uint8_t v) { return add(mem(Op::Check, b, off, len, v)); }
    /// Every word w of b[off, off+len) must be pattern_word(seed, w, 1).
    StepRef check_pattern(const Buffer& b, size_t off, uint32_t len, uint32_t seed) {
        Step s = mem(Op::Check, b, off, len, seed);
        s.b = 1;
        return add(s);
    }
    StepRef store_word(const Buffer& b, size_t off, uint64_t v) { return add(mem(Op::StoreWord, b, off, 8, v)); }
    /// Waits until the 8-byte word at b[off] is >= v.
    StepRef wait_word(const Buffer& b, size_t off, uint64_t v, uint64_t timeout_ns = kWait) {
        Step s = mem(Op::WaitWord, b, off, 8, v);
        s.timeout_ns = timeout_ns;
        return add(s);
    }
    StepRef clock() { return add(rdma(Op::Clock, 0, 0, 0, 0, 0, 0)); }
    StepRef spin(uint64_t ns) {
        Step s = rdma(Op::Spin, 0, 0, 0, 0, 0, 0);
        s.a = ns;
        return add(s);
    }

    Step& at(StepId id) { return lanes_[id.lane][id.index]; }
    const Step& at(StepId id) const { return lanes_[id.lane][id.index]; }
    uint32_t lanes() const { return uint32_t(lanes_.size()); }
    size_t steps() const {
        size_t n = 0;
        for (const auto& l : lanes_) n += l.size();
        return n;
    }

    /// Flattens the script for an initiator.
    RunData data(std::vector<gv::dev::QpHandle> qps) const {
        RunData d;
        d.qps = std::move(qps);
        d.lane_begin.push_back(0);
        for (const auto& l : lanes_) {
            d.steps.insert(d.steps.end(), l.begin(), l.end());
            d.lane_begin.push_back(uint32_t(d.steps.size()));
        }
        d.sges = sges_;
        if (d.sges.empty()) d.sges.push_back(gv::Sge{0, 0, 0});  // never empty: a valid pointer
        d.cqes.assign(std::max<uint32_t>(1, ncqes_), gv::Completion{});
        d.results.assign(std::max<size_t>(1, d.steps.size()), StepResult{gv::Status::Ok, 0, 0, 0});
        d.stopped.assign(lanes_.size(), -1);
        return d;
    }

private:
    Step rdma(Op op, uint64_t laddr, uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t flags) {
        Step s{};
        s.op = op;
        s.qp = cur_qp_;
        s.flags = flags;
        s.len = len;
        s.laddr = laddr;
        s.raddr = raddr;
        s.lkey = lkey;
        s.rkey = rkey;
        s.timeout_ns = kWait;
        s.expect = gv::Status::Ok;
        return s;
    }
    Step completions(Op op, uint32_t n, uint64_t timeout_ns) {
        Step s = rdma(op, 0, n, 0, 0, 0, 0);
        s.timeout_ns = timeout_ns;
        s.out = ncqes_;
        ncqes_ += n;
        return s;
    }
    Step mem(Op op, const Buffer& b, size_t off, uint32_t len, uint64_t v) {
        Step s = rdma(op, b.addr(off), len, 0, 0, 0, 0);
        s.a = v;
        s.sys = b.host() ? 1 : 0;
        return s;
    }
    StepRef add(const Step& s) {
        lanes_[cur_lane_].push_back(s);
        return StepRef(*this, StepId{cur_lane_, uint32_t(lanes_[cur_lane_].size() - 1)});
    }

    std::vector<std::vector<Step>> lanes_;
    std::vector<gv::Sge> sges_;
    uint32_t ncqes_ = 0;
    uint32_t cur_lane_ = 0, cur_qp_ = 0;
};

inline StepId StepRef::expect(gv::Status st) {
    s_.at(id_).expect = st;
    s_.at(id_).expect_also = 0;
    return id_;
}
inline StepId StepRef::expect_either(gv::Status a, gv::Status b) {
    s_.at(id_).expect = a;
    s_.at(id_).expect_also = 1u << uint32_t(b);
    return id_;
}
inline StepRef& StepRef::timeout(uint64_t ns) {
    s_.at(id_).timeout_ns = ns;
    return *this;
}

// ---- results ------------------------------------------------------------------------------

/// What a run returned, and a report of it for failure messages.
class RunResult {
public:
    RunResult(std::string instance, RunData d) : instance_(std::move(instance)), d_(std::move(d)) {}

    /// True when every lane ran to its end (every step returned what it should).
    bool ok() const {
        if (!d_.error.empty()) return false;
        for (int32_t s : d_.stopped)
            if (s >= 0) return false;
        return true;
    }
    const StepResult& operator[](StepId id) const { return d_.results[flat(id)]; }
    /// The completions a wait or poll step polled (as many as it polled).
    std::vector<gv::Completion> cqes(StepId id) const {
        const Step& s = d_.steps[flat(id)];
        const StepResult& r = d_.results[flat(id)];
        uint32_t n = std::min(r.count, s.len);
        return std::vector<gv::Completion>(d_.cqes.begin() + s.out, d_.cqes.begin() + s.out + n);
    }
    /// Where and why lanes stopped, for failure messages.
    std::string report() const {
        std::ostringstream o;
        o << "instance " << instance_ << ":";
        if (!d_.error.empty()) o << "\n  the initiator failed: " << d_.error;
        for (uint32_t l = 0; l < d_.lanes(); ++l) {
            if (d_.stopped[l] < 0) continue;
            const uint32_t i = d_.lane_begin[l] + uint32_t(d_.stopped[l]);
            o << "\n  lane " << l << " stopped at its step " << d_.stopped[l] << " of "
              << d_.lane_begin[l + 1] - d_.lane_begin[l] << ": " << describe(i);
        }
        return o.str();
    }
    /// One step and what it returned.
    std::string describe(size_t i) const {
        const Step& s = d_.steps[i];
        const StepResult& r = d_.results[i];
        std::ostringstream o;
        const bool memory = s.op == Op::Fill || s.op == Op::Check || s.op == Op::StoreWord || s.op == Op::WaitWord ||
                            s.op == Op::Clock || s.op == Op::Spin;
        o << op_name(s.op);
        if (!memory) o << " on QP " << s.qp << (s.qp == 0 ? " (requester)" : s.qp == 1 ? " (responder)" : "");
        if (s.op == Op::Check) {
            o << " of " << s.len << " bytes: " << r.count << " bytes differ from ";
            if (s.b) o << "pattern " << s.a;
            else o << "0x" << std::hex << (s.a & 0xff) << std::dec;
            o << ", the first at offset " << r.value << " (stale or misplaced data)";
            return o.str();
        }
        o << " returned " << gv::status_name(r.status) << ", expected " << gv::status_name(s.expect);
        for (uint32_t b = 0; b < 32; ++b)
            if ((s.expect_also >> b) & 1u) o << " or " << gv::status_name(gv::Status(b));
        switch (s.op) {
            case Op::WaitSend:
            case Op::WaitRecv:
            case Op::PollSendChunks:
                o << " (" << r.count << " of " << s.len << " completions came";
                for (uint32_t k = 0; k < std::min(r.count, s.len); ++k) {
                    const gv::Completion& c = d_.cqes[s.out + k];
                    if (!c.ok()) {
                        o << "; completion " << k << " failed with " << gv::mlx5::syndrome_name(c.status)
                          << " (WQE opcode 0x" << std::hex << int(c.wqe_opcode) << std::dec << ", index "
                          << c.wqe_counter << ")";
                        break;
                    }
                }
                o << ")";
                break;
            case Op::WaitWord: o << " (the word stayed at " << r.value << ", waited for >= " << s.a << ")"; break;
            default: o << " (len " << s.len << ", flags " << s.flags << ")"; break;
        }
        return o.str();
    }
    const std::string& instance() const { return instance_; }

private:
    size_t flat(StepId id) const { return d_.lane_begin[id.lane] + id.index; }
    std::string instance_;
    RunData d_;
};

#define ASSERT_RAN(r) ASSERT_TRUE((r).ok()) << (r).report()

// ---- helpers for the checks ------------------------------------------------------------------

/// The bytes Fill / Check mean by pattern (seed, mode) over [0, len).
inline std::vector<uint8_t> pattern_bytes(uint32_t seed, size_t len, uint64_t mode = 1) {
    std::vector<uint8_t> v(len);
    for (size_t i = 0; i < len; ++i) v[i] = uint8_t(pattern_word(seed, i / 4, mode) >> (8 * (i % 4)));
    return v;
}

/// Index of the first byte where a[ao..ao+n) and b[bo..bo+n) differ, or -1.
inline long diff_at(const std::vector<uint8_t>& a, size_t ao, const std::vector<uint8_t>& b, size_t bo, size_t n) {
    if (ao + n > a.size() || bo + n > b.size()) return -2;  // a range outside its vector
    return n ? gvtest::first_diff(a.data() + ao, b.data() + bo, n) : -1;
}


}  // namespace gvtest::traffic
