// The software device driven by CPU threads through the same queue layer kernels use: WRITE
// and READ byte by byte, many QPs, many threads on one QP.
#include "soft_device_util.hpp"

using namespace gv;
using gvtest::HostBuf;
using gvtest::Pair;

TEST(SoftDevice, WriteThenReadBackEveryByte) {
    Pair p(cpu_ctx());
    const size_t n = 1 << 20;
    std::vector<uint8_t> src(n), dst(n, 0), back(n, 0);
    gvtest::fill_random(src.data(), n, 1);
    MemoryRegion ms(p.pd, src.data(), n, kLocalWrite);
    MemoryRegion md(p.pd, dst.data(), n, kAllAccess);
    MemoryRegion mb(p.pd, back.data(), n, kLocalWrite);
    auto a = p.h(0);
    ASSERT_EQ(dev::write(a, src.data(), n, ms.lkey(), uint64_t(dst.data()), md.rkey()), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    Completion c[2];
    ASSERT_EQ(dev::wait_send(a, 1, c, kTimeout), Status::Ok);
    EXPECT_EQ(c[0].wqe_opcode, MLX5_OPCODE_RDMA_WRITE);
    EXPECT_EQ(gvtest::first_diff(src.data(), dst.data(), n), -1);
    ASSERT_EQ(dev::read(a, back.data(), n, mb.lkey(), uint64_t(dst.data()), md.rkey()), Status::Ok);
    ASSERT_EQ(dev::commit(a), Status::Ok);
    ASSERT_EQ(dev::wait_send(a, 1, c, kTimeout), Status::Ok);
    EXPECT_EQ(c[0].wqe_opcode, MLX5_OPCODE_RDMA_READ);
    EXPECT_EQ(gvtest::first_diff(src.data(), back.data(), n), -1);
}

// Sizes from 1 B to 8 MiB (log-uniform, plus edge cases) at random, unaligned offsets
// inside larger regions: WRITE then READ back, every byte checked, and every byte outside
// the target ranges (guard pattern) unchanged.
TEST(SoftDevice, RandomSizesAndOffsetsKeepGuards) {
    Pair p(cpu_ctx());
    const size_t kMax = 8u << 20;
    const size_t kSlack = 4096 + 13;
    HostBuf src(p.pd, kMax + kSlack, kLocalWrite);
    HostBuf dst(p.pd, 2 * kMax, kAllAccess);
    HostBuf back(p.pd, kMax + kSlack, kLocalWrite);
    gvtest::fill_random(src.data(), src.size(), 7);
    std::mt19937_64 rng(11);
    std::vector<size_t> sizes = {1, 2, 3, 7, 8, 9, 63, 64, 65, 4095, 4096, 4097, kMax - 1, kMax};
    const double lmax = std::log(double(kMax));
    while (sizes.size() < 110)
        sizes.push_back(std::min(
            kMax, std::max<size_t>(1, size_t(std::exp(std::uniform_real_distribution<>(0, lmax)(rng))))));
    auto a = p.h(0);
    unsigned long long pos = 0;
    for (size_t it = 0; it < sizes.size(); ++it) {
        const size_t n = sizes[it];
        const size_t os = rng() % (src.size() - n + 1);
        const size_t od = rng() % (dst.size() - n + 1);
        const size_t ob = rng() % (back.size() - n + 1);
        SCOPED_TRACE(testing::Message() << "iteration " << it << ": " << n << " bytes, src+" << os << " dst+"
                                        << od << " back+" << ob);
        ASSERT_EQ(dev::write(a, src.at(os), uint32_t(n), src.lkey(), dst.addr(od), dst.rkey()), Status::Ok);
        ASSERT_EQ(dev::commit(a), Status::Ok);
        Completion c{};
        wait_ok(a, 1, &c);
        EXPECT_EQ(c.wqe_opcode, MLX5_OPCODE_RDMA_WRITE);
        EXPECT_EQ(c.wqe_counter, uint16_t(pos));
        EXPECT_EQ(c.qpn, p.qp[0]->qpn());
        pos += 1;
        ASSERT_EQ(gvtest::first_diff(src.at(os), dst.at(od), n), -1);
        ASSERT_EQ(dev::read(a, back.at(ob), uint32_t(n), back.lkey(), dst.addr(od), dst.rkey()), Status::Ok);
        ASSERT_EQ(dev::commit(a), Status::Ok);
        wait_ok(a, 1, &c);
        EXPECT_EQ(c.wqe_opcode, MLX5_OPCODE_RDMA_READ);
        EXPECT_EQ(c.wqe_counter, uint16_t(pos));
        pos += 1;
        ASSERT_EQ(gvtest::first_diff(src.at(os), back.at(ob), n), -1);
        // Restore the targets, then the whole of both buffers must be guard bytes again:
        // nothing outside [off, off+n) was written.
        std::memset(dst.at(od), gvtest::kGuard, n);
        std::memset(back.at(ob), gvtest::kGuard, n);
        ASSERT_EQ(gvtest::first_not(dst.data(), dst.size(), gvtest::kGuard), -1);
        ASSERT_EQ(gvtest::first_not(back.data(), back.size(), gvtest::kGuard), -1);
    }
}

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
