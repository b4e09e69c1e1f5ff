// The software device driven by CPU threads: WRITE_IMM, SEND with scatter lists, inline,
// atomics, ring wrap-around, RC ordering, shared CQs, late retirement.
#include "soft_device_util.hpp"

using namespace gv;
using gvtest::HostBuf;
using gvtest::Pair;

// RDMA WRITE with immediate: data placed, and the peer's receive completes with the
// immediate, the byte count, the RESP_WR_IMM opcode and its own QP number.
TEST(SoftDevice, WriteImmCompletesReceive) {
    Pair p(cpu_ctx());
    HostBuf src(p.pd, 1 << 16, kLocalWrite), dst(p.pd, 1 << 16, kAllAccess);
    gvtest::fill_random(src.data(), src.size(), 5);
    auto a = p.h(0), b = p.h(1);
    const uint32_t lens[] = {0, 1, 100, 4096, 60000};
    for (uint32_t i = 0; i < 5; ++i) ASSERT_EQ(dev::recv(b, nullptr, 0, 0), Status::Ok);
    size_t off = 0;
    for (uint32_t i = 0; i < 5; ++i) {
        ASSERT_EQ(
            dev::write_imm(a, src.at(off), lens[i], src.lkey(), dst.addr(off), dst.rkey(), 0xabc00000u + i),
            Status::Ok);
        off += lens[i] + 3;
    }
    ASSERT_EQ(dev::commit(a), Status::Ok);
    Completion c[5];
    wait_ok(a, 5, c);
    for (uint32_t i = 0; i < 5; ++i) {
        EXPECT_EQ(c[i].wqe_opcode, MLX5_OPCODE_RDMA_WRITE_IMM);
        EXPECT_EQ(c[i].wqe_counter, i);
    }
    ASSERT_EQ(dev::wait_recv(b, 5, c, kTimeout), Status::Ok);
    off = 0;
    for (uint32_t i = 0; i < 5; ++i) {
        EXPECT_EQ(c[i].cqe_opcode, MLX5_CQE_RESP_WR_IMM);
        EXPECT_EQ(c[i].imm, 0xabc00000u + i);
        EXPECT_EQ(c[i].byte_len, lens[i]);
        EXPECT_EQ(c[i].qpn, p.qp[1]->qpn());
        EXPECT_EQ(c[i].wqe_counter, i);
        EXPECT_TRUE(c[i].is_recv());
        EXPECT_EQ(gvtest::first_diff(src.at(off), dst.at(off), lens[i]), -1);
        EXPECT_EQ(dst.at(off + lens[i])[0], gvtest::kGuard);
        off += lens[i] + 3;
    }
}

// SEND / SEND_IMM with up to 8 gather entries into receives with up to 8 scatter entries:
// the gathered bytes land in order across the scatter list, nothing past them is written.
TEST(SoftDevice, SendMultiSgeScatter) {
    QpOptions o;
    o.max_send_sge = 8;
    o.max_recv_sge = 8;
    Pair p(cpu_ctx(), o);
    auto a = p.h(0), b = p.h(1);
    constexpr int kRounds = 200;
    constexpr size_t kPiece = 4096;
    HostBuf src(p.pd, 8 * kPiece, kLocalWrite);
    std::mt19937_64 rng(21);
    for (int round = 0; round < kRounds; ++round) {
        SCOPED_TRACE(testing::Message() << "round " << round);
        gvtest::fill_random(src.data(), src.size(), round);
        HostBuf rbuf(p.pd, 10 * kPiece, kLocalWrite);
        uint32_t ns = 1 + rng() % 8, nr = 1 + rng() % 8;
        Sge gs[8], rs[8];
        size_t total = 0, room = 0;
        std::vector<uint8_t> expect;
        for (uint32_t i = 0; i < ns; ++i) {
            uint32_t len = uint32_t(rng() % 600);  // zero-length entries are legal, skipped
            gs[i] = {src.addr(i * kPiece + rng() % 100), len, src.lkey()};
            const uint8_t* s = reinterpret_cast<const uint8_t*>(gs[i].addr);
            expect.insert(expect.end(), s, s + len);
            total += len;
        }
        for (uint32_t i = 0; i < nr; ++i) {
            uint32_t len = 1 + uint32_t(rng() % 1000);
            rs[i] = {rbuf.addr(i * kPiece + rng() % 100), len, rbuf.lkey()};
            room += len;
        }
        if (room < total) {  // the last entry takes what is left
            rs[nr - 1].length += uint32_t(total - room);
            room = total;
        }
        ASSERT_EQ(dev::post_recv(b, rs, nr), Status::Ok);
        const bool imm = round % 2;
        ASSERT_EQ(dev::post_sge(a, imm ? MLX5_OPCODE_SEND_IMM : MLX5_OPCODE_SEND, gs, ns, 0, 0, 77u + round,
                                kSignaled),
                  Status::Ok);
        ASSERT_EQ(dev::commit(a), Status::Ok);
        Completion c{};
        wait_ok(a, 1, &c);
        EXPECT_EQ(c.wqe_opcode, imm ? MLX5_OPCODE_SEND_IMM : MLX5_OPCODE_SEND);
        ASSERT_EQ(dev::wait_recv(b, 1, &c, kTimeout), Status::Ok);
        EXPECT_EQ(c.cqe_opcode, imm ? MLX5_CQE_RESP_SEND_IMM : MLX5_CQE_RESP_SEND);
        EXPECT_EQ(c.byte_len, total);
        if (imm) {
            EXPECT_EQ(c.imm, 77u + round);
        }
        EXPECT_EQ(c.qpn, p.qp[1]->qpn());
        EXPECT_EQ(c.wqe_counter, uint16_t(round));
        // Walk the scatter list: received bytes, then untouched guard bytes.
        size_t k = 0;
        for (uint32_t i = 0; i < nr; ++i) {
            uint8_t* d = reinterpret_cast<uint8_t*>(rs[i].addr);
            size_t use = std::min<size_t>(rs[i].length, total - k);
            ASSERT_EQ(gvtest::first_diff(expect.data() + k, d, use), -1) << "scatter entry " << i;
            std::memset(d, gvtest::kGuard, use);
            k += use;
        }
        ASSERT_EQ(gvtest::first_not(rbuf.data(), rbuf.size(), gvtest::kGuard), -1);
    }
}

// Inline WRITE and SEND of every length 0..max_inline: the payload is copied at post time,
// so the source may change right after posting.
TEST(SoftDevice, InlineWriteAndSend) {
    QpOptions o;
    o.max_inline = 256;
    o.sq_depth = 16;  // positions wrap often, inline payloads cross the ring's end
    Pair p(cpu_ctx(), o);
    auto a = p.h(0), b = p.h(1);
    HostBuf dst(p.pd, 300 * 260, kAllAccess), rbuf(p.pd, 300 * 260, kLocalWrite);
    std::vector<uint8_t> payload(256);
    for (uint32_t len = 0; len <= 256; ++len) {
        SCOPED_TRACE(testing::Message() << "length " << len);
        gvtest::fill_random(payload.data(), payload.size(), len);
        std::vector<uint8_t> copy = payload;
        ASSERT_EQ(dev::recv(b, rbuf.at(len * 260), 260, rbuf.lkey()), Status::Ok);
        ASSERT_EQ(dev::write_inline(a, payload.data(), len, dst.addr(len * 260), dst.rkey()), Status::Ok);
        ASSERT_EQ(dev::send_inline(a, payload.data(), len), Status::Ok);
        std::memset(payload.data(), 0, payload.size());  // inline: already in the WQE
        ASSERT_EQ(dev::commit(a), Status::Ok);
        wait_ok(a, 2);
        Completion c{};
        ASSERT_EQ(dev::wait_recv(b, 1, &c, kTimeout), Status::Ok);
        EXPECT_EQ(c.byte_len, len);
        EXPECT_EQ(gvtest::first_diff(copy.data(), dst.at(len * 260), len), -1);
        EXPECT_EQ(gvtest::first_diff(copy.data(), rbuf.at(len * 260), len), -1);
        EXPECT_EQ(gvtest::first_not(dst.at(len * 260 + len), 260 - len, gvtest::kGuard), -1);
        EXPECT_EQ(gvtest::first_not(rbuf.at(len * 260 + len), 260 - len, gvtest::kGuard), -1);
    }
    EXPECT_EQ(dev::write_inline(a, payload.data(), 257, dst.addr(), dst.rkey()), Status::InvalidArgument);
}

// Fetch-add and compare-and-swap return the old value; the swap happens only on a match.
TEST(SoftDevice, Atomics) {
    Pair p(cpu_ctx());
    auto a = p.h(0);
    HostBuf target(p.pd, 64, kAllAccess, 0);
    HostBuf out(p.pd, 64, kLocalWrite, 0xee);
    uint64_t* t = reinterpret_cast<uint64_t*>(target.at(8));
    uint64_t* r = reinterpret_cast<uint64_t*>(out.data());
    *t = 40;
    ASSERT_EQ(dev::fetch_add(a, &r[0], out.lkey(), target.addr(8), target.rkey(), 2), Status::Ok);
    ASSERT_EQ(dev::fetch_add(a, &r[1], out.lkey(), target.addr(8), target.rkey(), ~0ull), Status::Ok);  // -1
    ASSERT_EQ(dev::compare_swap(a, &r[2], out.lkey(), target.addr(8), target.rkey(), 41, 1000), Status::Ok);
    ASSERT_EQ(dev::compare_swap(a, &r[3], out.lkey(), target.addr(8), target.rkey(), 41, 2000),
              Status::Ok);  // mismatch
    ASSERT_EQ(
        dev::compare_swap(a, &r[4], out.lkey(), target.addr(8), target.rkey(), 1000, 0x123456789abcdef0ull),
        Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    Completion c[5];
    wait_ok(a, 5, c);
    EXPECT_EQ(c[0].wqe_opcode, MLX5_OPCODE_ATOMIC_FA);
    EXPECT_EQ(c[2].wqe_opcode, MLX5_OPCODE_ATOMIC_CS);
    EXPECT_EQ(r[0], 40u);
    EXPECT_EQ(r[1], 42u);
    EXPECT_EQ(r[2], 41u);
    EXPECT_EQ(r[3], 1000u);
    EXPECT_EQ(r[4], 1000u);
    EXPECT_EQ(*t, 0x123456789abcdef0ull);
    EXPECT_EQ(gvtest::first_not(target.data(), 8, 0), -1);
    EXPECT_EQ(gvtest::first_not(target.at(16), 48, 0), -1);
    EXPECT_EQ(gvtest::first_not(out.at(40), 24, 0xee), -1);
}

// More than 70,000 WQEs through one QP whose ring holds 128 WQEBBs: the 16-bit WQE counter
// wraps, multi-WQEBB WQEs cross the ring's end, and completions free the slots.
TEST(SoftDevice, RingWrapAround) {
    QpOptions o;
    o.sq_depth = 64;  // 2 WQEBBs per WQE (64 inline bytes): a 128-WQEBB ring
    Pair p(cpu_ctx(), o);
    auto a = p.h(0);
    constexpr uint32_t kN = 70'500, kSlots = 1024, kSlot = 64;
    HostBuf src(p.pd, size_t(kN) * 8, kLocalWrite);
    HostBuf dst(p.pd, kSlots * kSlot, kAllAccess);
    HostBuf res(p.pd, size_t(kN) * 8, kLocalWrite, 0);
    HostBuf counter(p.pd, 8, kAllAccess, 0);
    std::vector<uint8_t> shadow(dst.size(), gvtest::kGuard);
    for (uint32_t i = 0; i < kN; ++i) {
        uint64_t v = mix(i);
        std::memcpy(src.at(size_t(i) * 8), &v, 8);
    }
    struct Expect {
        uint16_t counter;
        uint8_t opcode;
    };
    std::deque<Expect> expect;
    unsigned long long pos = 0;
    uint64_t sum = 0;
    std::vector<uint64_t> want_old(kN, 0);
    uint8_t inl[64];
    // Completions come in order, each naming its WQE's 16-bit position and opcode.
    auto check = [&](const Completion& c) -> std::string {
        if (expect.empty()) return "unexpected completion";
        if (!c.ok()) return std::string("completion error ") + mlx5::syndrome_name(c.status);
        Expect e = expect.front();
        expect.pop_front();
        if (c.wqe_counter != e.counter || c.wqe_opcode != e.opcode)
            return "completion for WQE " + std::to_string(c.wqe_counter) + " opcode " +
                   std::to_string(c.wqe_opcode) + ", expected " + std::to_string(e.counter) + " opcode " +
                   std::to_string(e.opcode);
        return "";
    };
    for (uint32_t i = 0; i < kN; ++i) {
        uint32_t flags = (i % 16 == 15 || i == kN - 1) ? kSignaled : 0u;
        size_t slot = size_t(i % kSlots) * kSlot;
        uint8_t opcode;
        uint32_t bbs = 1;
        for (int attempt = 0;; ++attempt) {
            Status st;
            if (i % 7 == 3) {
                uint32_t len = i % 61;
                for (uint32_t j = 0; j < len; ++j) inl[j] = uint8_t(i * 31 + j);
                st = dev::write_inline(a, inl, len, dst.addr(slot + 3), dst.rkey(), flags, 0);
                opcode = MLX5_OPCODE_RDMA_WRITE;
                bbs = bbs_inline(true, len);
                if (st == Status::Ok) std::memcpy(&shadow[slot + 3], inl, len);
            } else if (i % 13 == 5) {
                st = dev::nop(a, flags, 0);
                opcode = MLX5_OPCODE_NOP;
            } else if (i % 101 == 50) {
                st = dev::fetch_add(a, reinterpret_cast<uint64_t*>(res.at(size_t(i) * 8)), res.lkey(),
                                    counter.addr(), counter.rkey(), i, flags, 0);
                opcode = MLX5_OPCODE_ATOMIC_FA;
                if (st == Status::Ok) {
                    want_old[i] = sum;
                    sum += i;
                }
            } else {
                st = dev::write(a, src.at(size_t(i) * 8), 8, src.lkey(), dst.addr(slot + (i % 50)),
                                dst.rkey(), flags, 0);
                opcode = MLX5_OPCODE_RDMA_WRITE;
                bbs = bbs_sge(opcode, 1);
                if (st == Status::Ok) std::memcpy(&shadow[slot + (i % 50)], src.at(size_t(i) * 8), 8);
            }
            if (st == Status::Ok) break;
            ASSERT_EQ(st, Status::Timeout);
            ASSERT_LT(attempt, 100000) << "no progress at WQE " << i;
            ASSERT_EQ(dev::commit(a), Status::Ok);
            for (const Completion& c : gvtest::poll_some(a, a.scq, 16)) {
                ASSERT_EQ(check(c), "") << "WQE " << i;
            }
        }
        if (flags) expect.push_back({uint16_t(pos), opcode});
        pos += bbs;
        if (i % 8 == 7) {
            ASSERT_EQ(dev::commit(a), Status::Ok);
        }
    }
    ASSERT_GT(pos, 70'000u);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    std::vector<Completion> rest(expect.size());
    ASSERT_EQ(dev::wait_send(a, uint32_t(rest.size()), rest.data(), kTimeout), Status::Ok);
    for (const Completion& c : rest) {
        ASSERT_EQ(check(c), "");
    }
    EXPECT_EQ(gvtest::first_diff(shadow.data(), dst.data(), dst.size()), -1);
    uint64_t got;
    std::memcpy(&got, counter.data(), 8);
    EXPECT_EQ(got, sum);
    for (uint32_t i = 0; i < kN; ++i)
        if (i % 101 == 50 && i % 7 != 3 && i % 13 != 5) {
            std::memcpy(&got, res.at(size_t(i) * 8), 8);
            ASSERT_EQ(got, want_old[i]) << "fetch-add " << i;
        }
    EXPECT_EQ(gvtest::sq_pos(a), pos);
}

namespace {
// RC ordering seen by a CPU thread polling the flag: WRITE of data, then WRITE of the
// flag on the same QP; once the flag shows iteration i, the data of iteration i is there.
// `split`: one thread posts the data WQE, another the flag WQE, both commit at once.
void data_then_flag(bool split) {
    Pair p(cpu_ctx());
    auto a = p.h(0);
    constexpr size_t kData = 256 << 10;
    constexpr uint64_t kIters = 150;
    HostBuf src(p.pd, kData, kLocalWrite), dst(p.pd, kData, kAllAccess, 0);
    HostBuf fsrc(p.pd, 8, kLocalWrite, 0), flag(p.pd, 8, kAllAccess, 0);
    std::atomic<uint64_t> checked{0}, data_posted{0};
    std::atomic<long> bad_at{-1};
    std::atomic<bool> stop{false};
    std::thread reader([&] {
        const uint64_t* f = reinterpret_cast<const uint64_t*>(flag.data());
        for (uint64_t i = 1; i <= kIters && !stop; ++i) {
            while (__atomic_load_n(f, __ATOMIC_ACQUIRE) < i && !stop) std::this_thread::yield();
            // Every data word must be from iteration i (it cannot be later: the writer
            // waits for this check before the next iteration).
            const uint64_t* d = reinterpret_cast<const uint64_t*>(dst.data());
            for (size_t w = 0; w < kData / 8 && bad_at < 0 && !stop; ++w)
                if (__atomic_load_n(&d[w], __ATOMIC_RELAXED) != i * 0x0101010101010101ull) bad_at = long(i);
            checked = i;
        }
    });
    std::thread flagger;
    std::string flag_error;
    if (split) {
        flagger = std::thread([&] {
            for (uint64_t i = 1; i <= kIters && !stop; ++i) {
                while (data_posted.load() < i && !stop) std::this_thread::yield();
                if (stop) break;
                Status st = dev::write(a, fsrc.data(), 8, fsrc.lkey(), flag.addr(), flag.rkey());
                if (st == Status::Ok) st = dev::commit(a);
                if (st != Status::Ok) {
                    flag_error = status_name(st);
                    stop = true;
                }
            }
        });
    }
    // Runs the writer's side; returns at the first failure so that the threads are joined.
    [&] {
        for (uint64_t i = 1; i <= kIters && !stop; ++i) {
            std::memset(src.data(), int(i), kData);
            std::memcpy(fsrc.data(), &i, 8);
            ASSERT_EQ(dev::write(a, src.data(), kData, src.lkey(), dst.addr(), dst.rkey(), 0), Status::Ok);
            if (split) {
                // The other thread posts the flag and commits while this one commits the
                // data: whichever executes, the data lands first.
                data_posted = i;
                ASSERT_EQ(dev::commit(a), Status::Ok);
            } else {
                ASSERT_EQ(dev::write(a, fsrc.data(), 8, fsrc.lkey(), flag.addr(), flag.rkey()), Status::Ok);
                ASSERT_EQ(dev::commit(a), Status::Ok);
            }
            wait_ok(a, 1);
            if (testing::Test::HasFatalFailure()) return;
            // Generous: with more posting threads than cores (CI runs tests side by side on 2
            // cores), every in-order publication can wait for a preempted thread's time
            // slice; slow is not wrong, only no progress at all is.
            auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
            while (checked.load() < i) {
                ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "reader stuck at " << i;
                std::this_thread::yield();
            }
            ASSERT_EQ(bad_at.load(), -1) << "the flag of an iteration was visible before its data";
        }
    }();
    stop = true;
    reader.join();
    if (split) flagger.join();
    EXPECT_EQ(flag_error, "");
    EXPECT_EQ(bad_at.load(), -1) << "the flag of an iteration was visible before its data";
}
}  // namespace

TEST(SoftDevice, RcOrderingDataThenFlag) { data_then_flag(false); }
TEST(SoftDevice, RcOrderingDataThenFlagFromTwoThreads) { data_then_flag(true); }

// One CQ serves the send and receive queues of both QPs of a pair: completions of four
// queues interleave in it, and each frees the slots of its own queue (small rings, many
// laps, so a completion credited to the wrong queue shows as a stall or an overwrite).
TEST(SoftDevice, OneCqForBothQueuesOfBothQps) {
    Context ctx = cpu_ctx();
    ProtectionDomain pd(ctx);
    CompletionQueue cq(ctx, CqOptions{64, MemoryKind::Default});
    QpOptions o;
    o.send_cq = o.recv_cq = &cq;
    o.sq_depth = 8;
    o.rq_depth = 4;
    QueuePair q0(pd, o), q1(pd, o);
    q0.connect(q1.endpoint());
    q1.connect(q0.endpoint());
    dev::QpHandle h[2] = {q0.device_handle(), q1.device_handle()};
    const uint32_t qpn[2] = {q0.qpn(), q1.qpn()};
    constexpr int kRounds = 3000;
    HostBuf src(pd, 64, kLocalWrite), rbuf(pd, 2 * 64, kLocalWrite), dst(pd, 64, kAllAccess, 0);
    uint32_t sends[2] = {0, 0}, recvs[2] = {0, 0}, writes = 0;
    for (int i = 0; i < kRounds; ++i) {
        int from = i & 1, to = from ^ 1;
        uint64_t v = mix(i);
        std::memcpy(src.data(), &v, 8);
        ASSERT_EQ(dev::recv(h[to], rbuf.at(to * 64), 64, rbuf.lkey(), kTimeout), Status::Ok) << i;
        ASSERT_EQ(dev::send(h[from], src.data(), 8, src.lkey(), kSignaled, kTimeout), Status::Ok) << i;
        ASSERT_EQ(dev::write(h[from], src.data(), 8, src.lkey(), dst.addr(), dst.rkey(), kSignaled, kTimeout),
                  Status::Ok)
            << i;
        ASSERT_EQ(dev::commit(h[from]), Status::Ok);
        // Three completions: the SEND and WRITE on the sender, the receive on the peer.
        Completion c[3];
        ASSERT_EQ(dev::wait_cq(h[from], cq.device_handle(), 3, c, kTimeout), Status::Ok) << i;
        for (const Completion& x : c) {
            if (x.is_recv()) {
                EXPECT_EQ(x.qpn, qpn[to]);
                EXPECT_EQ(x.wqe_counter, uint16_t(recvs[to]++));
                EXPECT_EQ(x.byte_len, 8u);
            } else {
                EXPECT_EQ(x.qpn, qpn[from]);
                if (x.wqe_opcode == MLX5_OPCODE_SEND) ++sends[from];
                else ++writes;
            }
        }
        uint64_t got;
        std::memcpy(&got, rbuf.at(to * 64), 8);
        ASSERT_EQ(got, v) << i;
        std::memcpy(&got, dst.data(), 8);
        ASSERT_EQ(got, v) << i;
    }
    EXPECT_EQ(sends[0] + sends[1], uint32_t(kRounds));
    EXPECT_EQ(writes, uint32_t(kRounds));
    EXPECT_EQ(recvs[0] + recvs[1], uint32_t(kRounds));
}

// Several pollers of one CQ retire send-queue slots in whatever order they finish: a
// poller that retires an older completion after another retired a newer one must not
// move the retirement point (it used to rebuild the position a full 2^16 lap ahead).
TEST(SoftDevice, LateRetireOfOlderCompletionIsHarmless) {
    Pair p(cpu_ctx());
    auto a = p.h(0);
    for (int i = 0; i < 4; ++i) ASSERT_EQ(dev::nop(a), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    Completion c[4];
    wait_ok(a, 4, c);
    ASSERT_EQ(__atomic_load_n(&a.q.ctr->sq_retired, __ATOMIC_ACQUIRE), 4u);
    // A second poller that claimed c[1] before c[3] was retired retires it now, late.
    dev::cq_retire(a.scq, c[1]);
    EXPECT_EQ(__atomic_load_n(&a.q.ctr->sq_retired, __ATOMIC_ACQUIRE), 4u);
    // The same for receive slots.
    auto b = p.h(1);
    for (int i = 0; i < 4; ++i) ASSERT_EQ(dev::recv(b, nullptr, 0, 0), Status::Ok);
    for (int i = 0; i < 4; ++i) ASSERT_EQ(dev::send(a, nullptr, 0, 0), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    wait_ok(a, 4);
    ASSERT_EQ(dev::wait_recv(b, 4, c, kTimeout), Status::Ok);
    ASSERT_EQ(__atomic_load_n(&b.q.ctr->rq_retired, __ATOMIC_ACQUIRE), 4u);
    dev::cq_retire(b.rcq, c[0]);
    EXPECT_EQ(__atomic_load_n(&b.q.ctr->rq_retired, __ATOMIC_ACQUIRE), 4u);
    // And the queue still works.
    ASSERT_EQ(dev::nop(a), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    wait_ok(a, 1, c);
    EXPECT_EQ(c[0].wqe_counter, 8u);
}
