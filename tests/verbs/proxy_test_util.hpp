// Helpers of the verbs-proxy tests: a script of every data-path operation that CPU threads run
// through the gv::dev calls on a connected pair of any backend (the software device, the
// proxy over the sink in loopback, the proxy over rxe), and what it leaves behind (every
// completion device code polled, every byte of the buffers), so that runs on two backends can
// be compared field by field.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace gvtest::proxy {

constexpr uint64_t kTimeoutNs = 10'000'000'000ull;  // 10 s (rxe under emulation is slow)

inline std::string describe(const gv::Completion& c) {
    char b[200];
    std::snprintf(b, sizeof b, "{%s cqe_op 0x%x wqe_op 0x%x index %u bytes %u imm 0x%x qpn 0x%x vendor 0x%x}",
                  gv::mlx5::syndrome_name(c.status), c.cqe_opcode, c.wqe_opcode, c.wqe_counter, c.byte_len, c.imm,
                  c.qpn, c.vendor_err);
    return b;
}

/// What a script left: the completions polled (QP numbers replaced by 0 for the initiator, 1
/// for the responder) and the buffers' bytes.
struct Transcript {
    std::vector<gv::Completion> send, recv;
    std::vector<uint8_t> dst, back, rbuf, atom;
    std::string failure;  ///< set when a step did not get what it waited for
};

/// Waits for n completions on cq of qp, appending them to out with QP numbers normalized.
inline bool collect(const gvtest::Pair& p, int side, bool recv, uint32_t n, std::vector<gv::Completion>& out,
                    std::string& failure, const char* what) {
    const gv::dev::QpHandle h = p.h(side);
    std::vector<gv::Completion> c(n);
    uint32_t got = 0;
    const gv::Status st = recv ? gv::dev::wait_recv(h, n, c.data(), kTimeoutNs, &got) : gv::dev::wait_send(h, n, c.data(), kTimeoutNs, &got);
    for (uint32_t i = 0; i < got; ++i) {
        gv::Completion x = c[i];
        x.qpn = x.qpn == p.qp[0]->qpn() ? 0 : x.qpn == p.qp[1]->qpn() ? 1 : 0xbad;
        out.push_back(x);
    }
    if (st != gv::Status::Ok && st != gv::Status::CompletionError) {
        if (failure.empty())
            failure = std::string(what) + ": " + gv::status_name(st) + " after " + std::to_string(got) + " of " +
                      std::to_string(n) + " completions (" + qp_debug(h) + ")";
        return false;
    }
    return true;
}

/// Every data-path operation of the device API, posted by this CPU thread on p.qp[0] towards
/// p.qp[1], each committed and waited for: WRITE, READ, SEND, SEND_IMM, WRITE_IMM, inline
/// WRITE (fenced) and SEND, fetch-add, compare-swap, put-with-signal, NOP, runs of unsignaled
/// WRITEs that wrap the send ring (each closed by a signaled NOP), a solicited WRITE.
inline Transcript run_data_script(gvtest::Pair& p) {
    Transcript t;
    HostBuf src(p.pd, 16384, gv::kLocalWrite);
    HostBuf dst(p.pd, 16384, gv::kAllAccess);
    HostBuf back(p.pd, 4096, gv::kLocalWrite, 0);
    HostBuf rbuf(p.pd, 2048, gv::kLocalWrite, 0);
    HostBuf atom(p.pd, 64, gv::kAllAccess, 0);
    fill_random(src.data(), src.size(), 1);
    fill_random(dst.data(), dst.size(), 2);
    const uint64_t start = 100;
    std::memcpy(atom.data(), &start, 8);
    const gv::dev::QpHandle a = p.h(0), b = p.h(1);
    std::string& f = t.failure;
    auto step = [&](const char* what, gv::Status posted, bool recv_too, uint32_t sends = 1) {
        if (!f.empty()) return;
        if (posted != gv::Status::Ok) {
            f = std::string(what) + ": posting returned " + gv::status_name(posted);
            return;
        }
        const gv::Status c = gv::dev::commit(a);
        if (c != gv::Status::Ok) {
            f = std::string(what) + ": commit returned " + gv::status_name(c);
            return;
        }
        if (sends) collect(p, 0, false, sends, t.send, f, what);
        if (recv_too) collect(p, 1, true, 1, t.recv, f, what);
    };
    // Receives first: a SEND, a SEND_IMM, a WRITE_IMM (no buffer), an inline SEND.
    for (uint64_t off : {0ull, 512ull}) EXPECT_EQ(gv::dev::recv(b, rbuf.at(off), 512, rbuf.lkey()), gv::Status::Ok);
    EXPECT_EQ(gv::dev::recv(b, nullptr, 0, 0), gv::Status::Ok);
    EXPECT_EQ(gv::dev::recv(b, rbuf.at(1024), 512, rbuf.lkey()), gv::Status::Ok);

    step("WRITE", gv::dev::write(a, src.at(0), 1000, src.lkey(), dst.addr(0), dst.rkey()), false);
    step("READ", gv::dev::read(a, back.at(0), 500, back.lkey(), dst.addr(8000), dst.rkey()), false);
    step("SEND", gv::dev::send(a, src.at(2000), 300, src.lkey()), true);
    step("SEND_IMM", gv::dev::send_imm(a, src.at(3000), 100, src.lkey(), 0x1234), true);
    step("WRITE_IMM", gv::dev::write_imm(a, src.at(4000), 200, src.lkey(), dst.addr(2000), dst.rkey(), 0xabcd), true);
    uint8_t inl[48];
    for (int i = 0; i < 48; ++i) inl[i] = uint8_t(0x40 + i);
    step("inline WRITE", gv::dev::write_inline(a, inl, 48, dst.addr(3000), dst.rkey(), gv::kSignaled | gv::kFence), false);
    step("inline SEND", gv::dev::send_inline(a, inl, 20), true);
    auto* olds = reinterpret_cast<uint64_t*>(atom.data());
    step("fetch-add", gv::dev::fetch_add(a, &olds[1], atom.lkey(), atom.addr(0), atom.rkey(), 5), false);
    step("compare-swap", gv::dev::compare_swap(a, &olds[2], atom.lkey(), atom.addr(0), atom.rkey(), 105, 7), false);
    step("put-with-signal",
         gv::dev::put_signal(a, src.at(5000), 64, src.lkey(), dst.addr(4000), dst.rkey(), &olds[3], atom.lkey(),
                         atom.addr(0), atom.rkey(), 1),
         false);
    step("NOP", gv::dev::nop(a), false);
    for (int round = 0; round < 5 && f.empty(); ++round) {
        for (int i = 0; i < 8; ++i) {
            const gv::Status s = gv::dev::write(a, src.at(6000 + 64 * i), 64, src.lkey(), dst.addr(5000 + 64 * (8 * round + i)),
                                        dst.rkey(), 0);
            if (s != gv::Status::Ok && f.empty()) f = std::string("unsignaled WRITE: ") + gv::status_name(s);
        }
        step("NOP closing an unsignaled run", gv::dev::nop(a), false);
    }
    step("solicited WRITE", gv::dev::write(a, src.at(100), 64, src.lkey(), dst.addr(8000 + 512), dst.rkey(), gv::kSignaled | gv::kSolicited),
         false);
    t.dst = dst.bytes;
    t.back = back.bytes;
    t.rbuf = rbuf.bytes;
    t.atom = atom.bytes;
    return t;
}

/// Expects two transcripts to agree: every completion field (QP numbers normalized) and every
/// byte.
inline void expect_same(const Transcript& want, const Transcript& got, const char* want_name, const char* got_name) {
    EXPECT_EQ(want.failure, "") << want_name;
    EXPECT_EQ(got.failure, "") << got_name;
    auto same = [&](const std::vector<gv::Completion>& w, const std::vector<gv::Completion>& g, const char* which) {
        EXPECT_EQ(w.size(), g.size()) << which << " completions";
        for (size_t i = 0; i < w.size() && i < g.size(); ++i) {
            const bool eq = w[i].status == g[i].status && w[i].vendor_err == g[i].vendor_err &&
                            w[i].cqe_opcode == g[i].cqe_opcode && w[i].wqe_opcode == g[i].wqe_opcode &&
                            w[i].wqe_counter == g[i].wqe_counter && w[i].qpn == g[i].qpn &&
                            w[i].byte_len == g[i].byte_len && w[i].imm == g[i].imm;
            EXPECT_TRUE(eq) << which << " completion " << i << ": " << want_name << " " << describe(w[i]) << ", "
                            << got_name << " " << describe(g[i]);
        }
    };
    same(want.send, got.send, "send");
    same(want.recv, got.recv, "receive");
    EXPECT_EQ(first_diff(want.dst.data(), got.dst.data(), want.dst.size()), -1) << "remote buffer";
    EXPECT_EQ(first_diff(want.back.data(), got.back.data(), want.back.size()), -1) << "READ buffer";
    EXPECT_EQ(first_diff(want.rbuf.data(), got.rbuf.data(), want.rbuf.size()), -1) << "receive buffer";
    EXPECT_EQ(first_diff(want.atom.data(), got.atom.data(), want.atom.size()), -1) << "atomics";
}

/// Commits work that will fail: the commit publishes, then reads the state the proxy
/// publishes, so it returns Ok, or QpError when the proxy found the failure in between (a
/// committer preempted there). Either is right; anything else is not.
inline bool commit_failing(const gv::dev::QpHandle& h) {
    const gv::Status st = gv::dev::commit(h);
    return st == gv::Status::Ok || st == gv::Status::QpError;
}

/// Posts a WQE with only a ctrl segment (ds as given) at the next position, as a corrupted or
/// hostile poster would.
inline void post_raw_ctrl(const gv::dev::QpHandle& h, uint8_t opcode, uint32_t qpn, uint8_t ds, int index_skew = 0) {
    unsigned long long pos = 0;
    ASSERT_EQ(gv::dev::sq_reserve(h, 1, &pos, kTimeoutNs), gv::Status::Ok);
    std::memset(gv::dev::sq_seg(h, pos, 0), 0, 64);
    gv::mlx5::set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(gv::dev::sq_seg(h, pos, 0)), uint16_t(pos + index_skew),
                       opcode, 0, qpn, MLX5_WQE_CTRL_CQ_UPDATE, ds, 0, 0);
    gv::dev::sq_publish(h, pos, 1);
}

/// One error case on qp[0] of a pair: a good signaled WRITE, the bad WQE `post_bad` posts,
/// then an unsignaled WRITE, a signaled READ and an unsignaled NOP that must flush, and two
/// receives posted on qp[0] that must flush too. Returns the completions (send then receive),
/// normalized; `after` gets what a NOP posted once the QP is in ERROR completes with.
struct ErrorRun {
    std::vector<gv::Completion> send, recv;
    gv::Completion after{};
    gv::Status commit_after = gv::Status::Ok;
    bool in_error = false;
    gv::QpState state = gv::QpState::Reset;
    uint8_t syndrome = 0;
    std::vector<uint8_t> dst;
    std::string failure;
};

inline ErrorRun run_error_case(gvtest::Pair& p, const std::function<void(const gv::dev::QpHandle&, HostBuf&, HostBuf&)>& post_bad) {
    ErrorRun r;
    HostBuf src(p.pd, 4096, gv::kLocalWrite);
    HostBuf dst(p.pd, 4096, gv::kAllAccess, 0x11);
    HostBuf back(p.pd, 4096, gv::kLocalWrite, 0);
    fill_random(src.data(), src.size(), 3);
    const gv::dev::QpHandle a = p.h(0);
    EXPECT_EQ(gv::dev::recv(a, back.at(0), 64, back.lkey()), gv::Status::Ok);
    EXPECT_EQ(gv::dev::recv(a, back.at(64), 64, back.lkey()), gv::Status::Ok);
    EXPECT_EQ(gv::dev::write(a, src.at(0), 256, src.lkey(), dst.addr(0), dst.rkey()), gv::Status::Ok);
    post_bad(a, src, dst);
    EXPECT_EQ(gv::dev::write(a, src.at(0), 256, src.lkey(), dst.addr(1024), dst.rkey(), 0), gv::Status::Ok);
    EXPECT_EQ(gv::dev::read(a, back.at(512), 256, back.lkey(), dst.addr(0), dst.rkey()), gv::Status::Ok);
    EXPECT_EQ(gv::dev::nop(a, 0), gv::Status::Ok);
    gv::dev::commit(a);  // soft: QpError at once; verbs: Ok (the proxy finds the error later)
    collect(p, 0, false, 5, r.send, r.failure, "send completions");
    collect(p, 0, true, 2, r.recv, r.failure, "flushed receives");
    r.in_error = gv::dev::qp_in_error(a);
    r.state = p.qp[0]->state();
    r.syndrome = p.qp[0]->error_syndrome();
    EXPECT_EQ(gv::dev::nop(a), gv::Status::Ok);
    r.commit_after = gv::dev::commit(a);
    std::vector<gv::Completion> one;
    collect(p, 0, false, 1, one, r.failure, "a NOP posted in ERROR");
    if (!one.empty()) r.after = one[0];
    r.dst = dst.bytes;
    return r;
}

}  // namespace gvtest::proxy
