// The software device driven by CPU threads through the same queue layer kernels use: many
// QPs with a thread each, many threads on one QP, one CQ shared by four queues, late
// retirement by concurrent pollers. (The data-path semantics, WRITE to errors, are the
// traffic suite's: tests/traffic/, run against every backend instance.)
#include <atomic>
#include <chrono>
#include <thread>

#include "soft_device_util.hpp"

using namespace gv;
using gvtest::HostBuf;
using gvtest::Pair;

// One thread per QP, 1 / 4 / 16 connected pairs at once: WRITE (random sizes), WRITE_IMM
// into receives the thread posts on the peer, inline WRITE, NOP; mostly unsignaled, a
// signaled WQE every 16 and a signaled NOP at the end.
TEST(SoftDevice, ManyQpsOneThreadEach) {
    for (int npairs : {1, 4, 16}) {
        SCOPED_TRACE(testing::Message() << npairs << " pairs");
        Context ctx = cpu_ctx();
        std::vector<std::unique_ptr<Pair>> pairs;
        for (int i = 0; i < npairs; ++i) pairs.push_back(std::make_unique<Pair>(ctx));
        constexpr int kOps = 400;
        constexpr size_t kSlot = 8192;
        std::vector<std::unique_ptr<HostBuf>> src, dst;
        for (int i = 0; i < npairs; ++i) {
            src.push_back(std::make_unique<HostBuf>(pairs[i]->pd, kOps * kSlot, kLocalWrite));
            dst.push_back(std::make_unique<HostBuf>(pairs[i]->pd, kOps * kSlot, kAllAccess));
            gvtest::fill_random(src[i]->data(), src[i]->size(), 100 + i);
        }
        std::vector<std::string> failures(npairs);
        std::vector<std::vector<size_t>> lens(npairs, std::vector<size_t>(kOps));
        std::vector<std::thread> threads;
        for (int t = 0; t < npairs; ++t) {
            threads.emplace_back([&, t] {
                auto fail = [&](const std::string& m) {
                    if (failures[t].empty()) failures[t] = m;
                };
                auto a = pairs[t]->h(0), b = pairs[t]->h(1);
                HostBuf &s = *src[t], &d = *dst[t];
                uint32_t signaled = 0, imms = 0;
                std::vector<Completion> c;
                // The ring holds fewer WQEs than the thread posts: poll to free slots.
                auto pump = [&] {
                    dev::commit(a);
                    for (const Completion& x : gvtest::poll_some(a, a.scq, 16)) c.push_back(x);
                };
                for (int i = 0; i < kOps; ++i) {
                    uint64_t r = mix(uint64_t(t) << 32 | uint32_t(i));
                    uint32_t flags = (i % 16 == 15) ? kSignaled : 0u;
                    size_t off = size_t(i) * kSlot;
                    Status st = Status::Timeout;
                    for (int attempt = 0; st == Status::Timeout; ++attempt) {
                        if (attempt) pump();
                        if (attempt > 1000000) return fail("no progress");
                        switch (r % 8) {
                            case 0: {  // WRITE_IMM: the peer needs a receive (no buffer needed)
                                lens[t][i] = 1 + (r >> 8) % kSlot;
                                if (!attempt && dev::recv(b, nullptr, 0, 0) != Status::Ok)
                                    return fail("recv");
                                st = dev::write_imm(a, s.at(off), uint32_t(lens[t][i]), s.lkey(), d.addr(off),
                                                    d.rkey(), uint32_t(i), flags, 0);
                                break;
                            }
                            case 1:  // inline WRITE
                                lens[t][i] = (r >> 8) % 65;
                                st = dev::write_inline(a, s.at(off), uint32_t(lens[t][i]), d.addr(off),
                                                       d.rkey(), flags, 0);
                                break;
                            case 2:
                                lens[t][i] = 0;
                                st = dev::nop(a, flags, 0);
                                break;
                            default:
                                lens[t][i] = 1 + (r >> 8) % kSlot;
                                st = dev::write(a, s.at(off), uint32_t(lens[t][i]), s.lkey(), d.addr(off),
                                                d.rkey(), flags, 0);
                        }
                    }
                    imms += (r % 8 == 0) ? 1 : 0;
                    if (st != Status::Ok) return fail(std::string("post: ") + status_name(st));
                    signaled += flags ? 1 : 0;
                    if (i % 4 == 3 && dev::commit(a) != Status::Ok) return fail("commit");
                }
                if (dev::nop(a) != Status::Ok || dev::commit(a) != Status::Ok) return fail("final nop");
                ++signaled;
                size_t have = c.size();
                c.resize(signaled);
                Status st = dev::wait_send(a, uint32_t(signaled - have), c.data() + have, kLongTimeout);
                if (st != Status::Ok) return fail(std::string("wait_send: ") + status_name(st));
                for (const Completion& x : c)
                    if (!x.ok())
                        return fail(std::string("completion error ") + mlx5::syndrome_name(x.status));
                if (c.back().wqe_opcode != MLX5_OPCODE_NOP) fail("last completion is not the NOP");
                for (size_t k = 1; k < c.size(); ++k)
                    if (uint16_t(c[k].wqe_counter - c[k - 1].wqe_counter) == 0 ||
                        uint16_t(c[k].wqe_counter - c[k - 1].wqe_counter) > 0x8000)
                        return fail("send completions out of order");
                std::vector<Completion> rc(imms);
                st = dev::wait_recv(b, imms, rc.data(), kLongTimeout);
                if (st != Status::Ok) return fail(std::string("wait_recv: ") + status_name(st));
                uint32_t k = 0;
                for (int i = 0; i < kOps; ++i) {
                    if (mix(uint64_t(t) << 32 | uint32_t(i)) % 8 != 0) continue;
                    const Completion& x = rc[k];
                    if (x.cqe_opcode != MLX5_CQE_RESP_WR_IMM || x.imm != uint32_t(i) ||
                        x.byte_len != lens[t][i] || x.wqe_counter != uint16_t(k) ||
                        x.qpn != pairs[t]->qp[1]->qpn())
                        return fail("receive completion " + std::to_string(k) + " wrong");
                    ++k;
                }
            });
        }
        for (auto& th : threads) th.join();
        for (int t = 0; t < npairs; ++t) {
            ASSERT_EQ(failures[t], "") << "thread " << t;
            for (int i = 0; i < kOps; ++i) {
                size_t off = size_t(i) * kSlot, n = lens[t][i];
                ASSERT_EQ(gvtest::first_diff(src[t]->at(off), dst[t]->at(off), n), -1)
                    << "QP " << t << " op " << i;
                ASSERT_EQ(gvtest::first_not(dst[t]->at(off + n), kSlot - n, gvtest::kGuard), -1)
                    << "QP " << t << " op " << i;
            }
        }
    }
}

// Several threads post to ONE QP at once (positions reserved atomically) through a small
// ring, commit and poll the one send CQ concurrently. WRITE, inline WRITE, fetch-add and
// NOP; every byte and every fetch-add result checked.
namespace {
void many_threads_one_qp() {
    QpOptions o;
    o.sq_depth = 32;
    Pair p(cpu_ctx(), o);
    constexpr int kThreads = 4, kOps = 4000;
    constexpr size_t kSlot = 512;
    const int total = kThreads * kOps;
    HostBuf src(p.pd, total * kSlot, kLocalWrite);
    HostBuf dst(p.pd, total * kSlot, kAllAccess);
    HostBuf res(p.pd, total * 8, kLocalWrite, 0xff);
    HostBuf counter(p.pd, 64, kAllAccess, 0);
    gvtest::fill_random(src.data(), src.size(), 3);
    std::vector<size_t> lens(total);
    std::vector<uint8_t> kind(total);
    std::atomic<uint32_t> signaled{0}, polled{0}, posted_done{0};
    std::atomic<bool> bad{false};
    std::vector<std::string> failures(kThreads);
    auto h = p.h(0);
    auto poll = [&](std::string& why) {
        Completion c[16];
        dev::drive(h);
        uint32_t k = dev::poll_cq(h.scq, c, 16);
        for (uint32_t i = 0; i < k; ++i)
            if (!c[i].ok() && why.empty())
                why = std::string("completion error ") + mlx5::syndrome_name(c[i].status);
        polled += k;
        return k;
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            std::string& why = failures[t];
            // Generous: with more posting threads than cores (CI runs tests side by side on 2
            // cores), every in-order publication can wait for a preempted thread's time
            // slice; slow is not wrong, only no progress at all is.
            auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
            for (int i = 0; i < kOps && why.empty(); ++i) {
                int g = t * kOps + i;
                uint64_t r = mix(uint64_t(g) + 12345);
                uint32_t flags = (i % 8 == 7 || i == kOps - 1) ? kSignaled : 0u;
                size_t off = size_t(g) * kSlot;
                kind[g] = uint8_t(r % 10);
                for (;;) {
                    Status st;
                    if (kind[g] < 6) {
                        lens[g] = 1 + (r >> 8) % kSlot;
                        st = dev::write(h, src.at(off), uint32_t(lens[g]), src.lkey(), dst.addr(off),
                                        dst.rkey(), flags, 0);
                    } else if (kind[g] < 8) {
                        lens[g] = (r >> 8) % 65;
                        st = dev::write_inline(h, src.at(off), uint32_t(lens[g]), dst.addr(off), dst.rkey(),
                                               flags, 0);
                    } else if (kind[g] == 8) {
                        lens[g] = 0;
                        st = dev::fetch_add(h, reinterpret_cast<uint64_t*>(res.at(size_t(g) * 8)), res.lkey(),
                                            counter.addr(), counter.rkey(), 1, flags, 0);
                    } else {
                        lens[g] = 0;
                        st = dev::nop(h, flags, 0);
                    }
                    if (st == Status::Ok) break;
                    if (st != Status::Timeout) {
                        why = std::string("post: ") + status_name(st);
                        break;
                    }
                    // The ring is full: let the executor run and free slots by polling.
                    dev::commit(h);
                    if (!poll(why)) std::this_thread::yield();  // the executor may be preempted
                    if (std::chrono::steady_clock::now() > deadline) {
                        why = "no progress: " + gvtest::qp_debug(h);
                        break;
                    }
                }
                if (flags) ++signaled;
                dev::commit(h);  // committers race: one executes, the others hand over
                if (i % 5 == 4) poll(why);
            }
            dev::commit(h);
            ++posted_done;
            while (why.empty() && (posted_done < kThreads || polled < signaled)) {
                if (!poll(why)) std::this_thread::yield();
                if (std::chrono::steady_clock::now() > deadline)
                    why = "completions missing: " + std::to_string(polled.load()) + " of " +
                          std::to_string(signaled.load()) + " polled; " + gvtest::qp_debug(h);
            }
            if (!why.empty()) bad = true;
        });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) ASSERT_EQ(failures[t], "") << "thread " << t;
    ASSERT_FALSE(bad);
    EXPECT_EQ(polled.load(), signaled.load());
    EXPECT_EQ(p.qp[0]->state(), QpState::Rts);
    uint64_t atomics = 0;
    std::vector<uint8_t> seen(total, 0);
    for (int g = 0; g < total; ++g) {
        size_t off = size_t(g) * kSlot;
        if (kind[g] == 8) {
            uint64_t old;
            std::memcpy(&old, res.at(size_t(g) * 8), 8);
            ASSERT_LT(old, uint64_t(total)) << "fetch-add " << g;
            ASSERT_EQ(seen[old], 0) << "two fetch-adds returned " << old;
            seen[old] = 1;
            ++atomics;
        }
        ASSERT_EQ(gvtest::first_diff(src.at(off), dst.at(off), lens[g]), -1) << "op " << g;
        ASSERT_EQ(gvtest::first_not(dst.at(off + lens[g]), kSlot - lens[g], gvtest::kGuard), -1)
            << "op " << g;
    }
    uint64_t final_count;
    std::memcpy(&final_count, counter.data(), 8);
    EXPECT_EQ(final_count, atomics);
    for (uint64_t v = 0; v < atomics; ++v) EXPECT_EQ(seen[v], 1) << v;
}
}  // namespace

TEST(SoftDevice, ManyThreadsOneQp) {
    // Races are timing-dependent: a few independent rounds make a lost race likely to show.
    for (int round = 0; round < 3 && !testing::Test::HasFailure(); ++round) {
        SCOPED_TRACE(testing::Message() << "round " << round);
        many_threads_one_qp();
    }
}

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

// A full send ring: a poster with a timeout takes nothing and times out; one without (the
// default) takes its positions at once and waits for room in place (ring_reserve's fetch-add),
// the weak form then sees nothing free, and polling lets it go on, its WQE where it reserved it.
TEST(SoftDevice, FullRingPosterWithoutTimeoutWaitsInPlace) {
    QpOptions o;
    o.sq_depth = 8;
    Pair p(cpu_ctx(), o);
    auto a = p.h(0);
    const uint32_t ring = 1u << a.q.sq_log_bb;
    auto reserved = [&] { return __atomic_load_n(&a.q.ctr->sq_reserved, __ATOMIC_ACQUIRE); };
    for (uint32_t i = 0; i < ring; ++i) ASSERT_EQ(dev::nop(a), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    EXPECT_EQ(dev::nop(a, kSignaled, 2000000), Status::Timeout);  // 2 ms
    EXPECT_EQ(reserved(), ring);
    std::atomic<int> posted{0};
    std::thread t([&] {
        EXPECT_EQ(dev::nop(a), Status::Ok);
        posted.store(1);
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (reserved() != ring + 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    ASSERT_EQ(reserved(), ring + 1) << "the poster without a timeout did not take its place";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(posted.load(), 0) << "a poster went on with no room in the ring";
    EXPECT_EQ(dev::get_position(a).free, 0u);
    std::vector<Completion> c(ring);
    wait_ok(a, ring, c.data());
    t.join();
    EXPECT_EQ(posted.load(), 1);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    wait_ok(a, 1, c.data());
    EXPECT_EQ(c[0].wqe_counter, uint16_t(ring));
    EXPECT_EQ(dev::get_position(a).free, ring);
}

// poll_cq takes the ready entries at the consumer index together (up to dev::kPollBatch, never
// more than asked): every completion once and in order, the queue's slots retired up to the
// last one; with a CQ smaller than the batch (the entries after a pass's last are the next
// pass's, not ready yet); and with an error inside a batch (its own completion, then flushes).
namespace {
// Polls cq with at most `max` per call until `n` completions came; checks each call's count.
std::vector<Completion> poll_all(const dev::CqHandle& cq, uint32_t n, uint32_t max) {
    std::vector<Completion> got;
    Completion c[16];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
        const uint32_t k = dev::poll_cq(cq, c, max);
        EXPECT_LE(k, max);
        got.insert(got.end(), c, c + k);
    }
    return got;
}
}  // namespace

TEST(SoftDevice, PollTakesReadyRunsTogetherOnceEach) {
    {
        Pair p(cpu_ctx());
        auto a = p.h(0);
        for (int i = 0; i < 20; ++i) ASSERT_EQ(dev::nop(a, kSignaled, kTimeout), Status::Ok);
        ASSERT_EQ(dev::commit(a), Status::Ok);
        const std::vector<Completion> c = poll_all(a.scq, 20, 5);
        ASSERT_EQ(c.size(), 20u);
        for (uint32_t i = 0; i < 20; ++i) {
            EXPECT_TRUE(c[i].ok()) << i;
            EXPECT_EQ(c[i].wqe_counter, i);
        }
        Completion extra;
        EXPECT_EQ(dev::poll_cq(a.scq, &extra, 1), 0u);
        EXPECT_EQ(__atomic_load_n(&a.q.ctr->sq_retired, __ATOMIC_ACQUIRE), 20u);
    }
    {
        Pair p(cpu_ctx(), QpOptions{}, MemoryKind::Default, 4);  // a 4-entry CQ
        auto a = p.h(0);
        for (uint32_t lap = 0; lap < 50; ++lap) {
            for (int i = 0; i < 4; ++i) ASSERT_EQ(dev::nop(a, kSignaled, kTimeout), Status::Ok);
            ASSERT_EQ(dev::commit(a), Status::Ok);
            const std::vector<Completion> c = poll_all(a.scq, 4, 8);
            ASSERT_EQ(c.size(), 4u) << "lap " << lap;
            for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(c[i].wqe_counter, uint16_t(4 * lap + i)) << "lap " << lap;
        }
        EXPECT_FALSE(dev::cq_overrun(a.scq));
        EXPECT_EQ(__atomic_load_n(&a.q.ctr->sq_retired, __ATOMIC_ACQUIRE), 200u);
    }
    {
        Pair p(cpu_ctx());
        auto a = p.h(0);
        HostBuf src(p.pd, 64, kLocalWrite);
        for (int i = 0; i < 3; ++i) ASSERT_EQ(dev::nop(a, kSignaled, kTimeout), Status::Ok);
        // No region has this key: REMOTE_ACCESS_ERR, the QP goes to ERROR, what follows flushes.
        ASSERT_EQ(dev::write(a, src.data(), 8, src.lkey(), 0x1000, 0x7fff01, kSignaled, kTimeout), Status::Ok);
        for (int i = 0; i < 3; ++i) ASSERT_EQ(dev::nop(a, kSignaled, kTimeout), Status::Ok);
        dev::commit(a);  // QpError: the WRITE failed
        const std::vector<Completion> c = poll_all(a.scq, 7, 8);
        ASSERT_EQ(c.size(), 7u);
        for (uint32_t i = 0; i < 7; ++i) EXPECT_EQ(c[i].wqe_counter, i);
        for (uint32_t i = 0; i < 3; ++i) EXPECT_TRUE(c[i].ok()) << i;
        EXPECT_EQ(c[3].status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
        for (uint32_t i = 4; i < 7; ++i) EXPECT_EQ(c[i].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR) << i;
        EXPECT_EQ(__atomic_load_n(&a.q.ctr->sq_retired, __ATOMIC_ACQUIRE), 7u);
        EXPECT_EQ(p.qp[0]->state(), QpState::Error);
    }
}

// kCommit (post and commit in one call) from many threads on one QP, racing WQEs posted and
// committed in two calls, through a ring of 64 that a poller thread frees: each thread WRITEs
// a value into its data word, then the same value into its flag word; a checker reads flag,
// then data, and must never find the data behind the flag (RC order: a thread's WQEs run in
// its posting order, whichever way each took: the direct path's, executed in the posting
// thread, or the ordinary one). Every completion succeeds, in position order; every word ends
// at its last value.
TEST(SoftDevice, CommitFlagRacingThreadsKeepOrder) {
    QpOptions o;
    o.sq_depth = 64;
    Pair p(cpu_ctx(), o);
    auto a = p.h(0);
    constexpr uint32_t kThreads = 6, kIters = 1000;
    HostBuf src(p.pd, kIters * 8, kLocalWrite), dst(p.pd, 2 * kThreads * 64, kAllAccess, 0);
    for (uint32_t i = 0; i < kIters; ++i) {
        const uint64_t v = i;
        std::memcpy(src.at(i * 8), &v, 8);
    }
    auto word = [&](uint32_t t, bool flag) {
        return reinterpret_cast<uint64_t*>(dst.at((2 * t + (flag ? 1 : 0)) * 64));
    };
    std::atomic<bool> done{false}, stop{false};
    std::atomic<uint64_t> behind{0}, polled{0}, bad{0};
    std::thread checker([&] {
        while (!done.load()) {
            for (uint32_t t = 0; t < kThreads; ++t) {
                const uint64_t f = __atomic_load_n(word(t, true), __ATOMIC_ACQUIRE);
                const uint64_t d = __atomic_load_n(word(t, false), __ATOMIC_ACQUIRE);
                if (d < f) behind.fetch_add(1);
            }
        }
    });
    std::thread poller([&] {
        Completion c[16];
        int last = -1;
        while (!stop.load()) {
            const uint32_t k = dev::poll_cq(a.scq, c, 16);
            for (uint32_t i = 0; i < k; ++i) {
                if (!c[i].ok() || (last >= 0 && int16_t(uint16_t(c[i].wqe_counter - last)) <= 0)) bad.fetch_add(1);
                last = c[i].wqe_counter;
            }
            polled.fetch_add(k);
            if (!k) std::this_thread::yield();
        }
    });
    std::vector<std::thread> ts;
    std::atomic<uint64_t> failed{0};
    for (uint32_t t = 0; t < kThreads; ++t) {
        ts.emplace_back([&, t] {
            for (uint32_t i = 1; i < kIters; ++i) {
                const uint32_t sig = (i % 8) == 0 ? kSignaled : 0u;
                const bool one_call = (i + t) % 3 != 0;
                for (const bool flag : {false, true}) {
                    const uint64_t to = reinterpret_cast<uint64_t>(word(t, flag));
                    Status st = dev::write(a, src.at(i * 8), 8, src.lkey(), to, dst.rkey(),
                                           (flag ? sig : 0u) | (one_call ? kCommit : 0u));
                    if (st == Status::Ok && !one_call) st = dev::commit(a);
                    if (st != Status::Ok) failed.fetch_add(1);
                }
            }
        });
    }
    for (auto& t : ts) t.join();
    ASSERT_EQ(dev::nop(a, kSignaled | kCommit), Status::Ok);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    const uint64_t want = kThreads * ((kIters - 1) / 8) + 1;
    while (polled.load() < want && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    done.store(true);
    checker.join();
    stop.store(true);
    poller.join();
    EXPECT_EQ(polled.load(), want) << gvtest::qp_debug(a);
    EXPECT_EQ(failed.load(), 0u);
    EXPECT_EQ(bad.load(), 0u) << "a failed completion, or one out of position order";
    EXPECT_EQ(behind.load(), 0u) << "a flag landed before the data written before it";
    for (uint32_t t = 0; t < kThreads; ++t) {
        EXPECT_EQ(*word(t, false), kIters - 1) << "thread " << t;
        EXPECT_EQ(*word(t, true), kIters - 1) << "thread " << t;
    }
    EXPECT_EQ(__atomic_load_n(&a.q.ctr->sq_ready, __ATOMIC_ACQUIRE), 2ull * kThreads * (kIters - 1) + 1)
        << gvtest::qp_debug(a);
}
