// Groups of 256 threads or more plan a QP's next WQE while they copy the current one
// (drain() in gpuverbs/detail/soft/exec.cuh): the leader reads and checks WQE k+1 while the
// other warps copy WQE k. These tests run that path where it can go wrong:
//   - every opcode mixed in one block's commits (large and small WRITEs and READs, SENDs,
//     fetch-adds, NOPs, at odd offsets), so that plans made ahead meet the WQEs they must not
//     plan (a SEND claims a receive, an atomic acts, a small WQE runs in the leader alone);
//     every byte of every buffer is checked, guards included;
//   - a completion lost to a full CQ while the next WQE was already planned: the QP goes to
//     ERROR, and that WQE and every later one must be flushed with no byte written;
//   - chained WQEs (the next one handed out before the barrier that ends the current one):
//     a poller sees WQE i-1 whole whenever it sees WQE i's last word;
//   - SENDs planned ahead: each receive completion, taken as it comes, finds its SEND's bytes
//     whole; a receive completion lost to a full CQ stops the SENDs behind it (the receiver and
//     then the sender go to ERROR, and nothing of the later SENDs lands).
// The kernels declare __launch_bounds__(512): a kernel that commits at block scope with 512
// threads needs it (docs/execution-model.md, "Registers").
#include "gpu/gpu_verbs_util.cuh"

using namespace gv;
using gvtest::DevBuf;

namespace {

/// SENDs the QP's executor took in runs (send_run.cuh), read from its context in GPU memory.
unsigned long long run_sends(const dev::QpHandle& h) { return d2h<unsigned long long>(&h.soft.ctx->run_sends, 1)[0]; }

enum Kind : uint32_t { kBigWrite, kBigRead, kSmallWrite, kSmallRead, kSend, kFetchAdd, kNop };

constexpr size_t kSlot = 16 << 10;  // bytes each (round, thread) owns in every data buffer
constexpr uint32_t kRounds = 6;

struct Op {
    uint32_t kind;
    uint32_t len;  // bytes moved (WRITE, READ, SEND)
    uint32_t off;  // where the data starts within the slot (0..63: misaligned at times)
};

/// One allocation, one memory region (one lkey, one rkey), carved in parts of n bytes.
struct Layout {
    uint8_t* src;       // local: WRITE and SEND sources
    uint8_t* wdst;      // remote: WRITE destinations
    uint8_t* rsrc;      // remote: READ sources
    uint8_t* rdst;      // local: READ destinations
    uint8_t* recv;      // remote: receive buffers (SEND destinations)
    uint64_t* olds;     // local: the old value of each fetch-add, one word per (round, thread)
    uint64_t* counter;  // remote: the fetch-add target
    uint32_t lkey, rkey;
};

// owners[r * T + i]: the thread whose SEND is the round's i-th (and so takes receive i);
// sends[r]: how many SENDs round r has.
__global__ void __launch_bounds__(512) mixed_kernel(dev::QpHandle a, dev::QpHandle b, const Op* ops,
                                                    const uint32_t* sends, const uint32_t* owners, Layout m,
                                                    DevErr* err) {
    const uint32_t t = threadIdx.x, T = blockDim.x;
    for (uint32_t r = 0; r < kRounds; ++r) {
        // The round's receives, in order, by one thread: receive i is the slot of the thread
        // that posts the round's i-th SEND.
        if (t == 0)
            for (uint32_t i = 0; i < sends[r]; ++i)
                DCHECK_EQ(dev::recv(b, m.recv + (size_t(r) * T + owners[r * T + i]) * kSlot, uint32_t(kSlot), m.lkey,
                                    kWait),
                          Status::Ok);
        __syncthreads();
        const Op op = ops[r * T + t];
        const size_t at = (size_t(r) * T + t) * kSlot + op.off;
        const uint32_t fl = t == T - 1 ? kSignaled : 0;
        // Block scope is collective: every thread makes the same calls (reserve, store,
        // publish), in which the warps shuffle and the block synchronises; only the WQE each
        // thread builds in its registers differs.
        dev::Reservation res;
        DCHECK_EQ(dev::sq_reserve_group<Scope::Block>(a, 1, &res, kWait), Status::Ok);
        dev::WqeBb w;
        if (op.kind == kBigWrite || op.kind == kSmallWrite)
            w = dev::sge1_wqebb(a, res.pos, MLX5_OPCODE_RDMA_WRITE, fl, 0, uint64_t(m.wdst + at), m.rkey,
                                Sge{uint64_t(m.src + at), op.len, m.lkey});
        else if (op.kind == kBigRead || op.kind == kSmallRead)
            w = dev::sge1_wqebb(a, res.pos, MLX5_OPCODE_RDMA_READ, fl, 0, uint64_t(m.rsrc + at), m.rkey,
                                Sge{uint64_t(m.rdst + at), op.len, m.lkey});
        else if (op.kind == kSend)
            w = dev::sge1_wqebb(a, res.pos, MLX5_OPCODE_SEND, fl, 0, 0, 0, Sge{uint64_t(m.src + at), op.len, m.lkey});
        else if (op.kind == kFetchAdd)
            w = dev::atomic_wqebb(a, res.pos, MLX5_OPCODE_ATOMIC_FA, m.olds + size_t(r) * T + t, m.lkey,
                                  uint64_t(m.counter), m.rkey, 1, 0, fl);
        else
            w = dev::nop_wqebb(a, res.pos, fl);
        dev::store_wqebb(a, res, w, res.status == Status::Ok);
        dev::sq_publish_group<Scope::Block>(a, res);
        DCHECK_EQ(dev::commit<Scope::Block>(a), Status::Ok);
        if (t == 0) {
            Completion c{};
            DCHECK_EQ(dev::wait_send(a, 1, &c, kWait), Status::Ok);
            DCHECK_EQ(c.status, 0);
            if (sends[r]) DCHECK_EQ(dev::wait_recv(b, sends[r], nullptr, kWait), Status::Ok);
        }
        __syncthreads();
    }
}

void run_mixed(uint32_t T, uint64_t seed) {
    QpOptions o;
    o.sq_depth = 1024;
    o.rq_depth = 1024;
    gvtest::Pair p(gvtest::gpu_ctx(), o);
    const size_t n = size_t(kRounds) * T * kSlot, words = size_t(kRounds) * T;
    DevBuf mem(5 * n + words * 8 + 64);
    ASSERT_TRUE(mem.p);
    MemoryRegion mr(p.pd, mem.p, mem.n, kAllAccess);
    Layout m{};
    m.src = mem.get();
    m.wdst = m.src + n;
    m.rsrc = m.wdst + n;
    m.rdst = m.rsrc + n;
    m.recv = m.rdst + n;
    m.olds = reinterpret_cast<uint64_t*>(m.recv + n);
    m.counter = m.olds + words;
    m.lkey = mr.lkey();
    m.rkey = mr.rkey();

    std::vector<uint8_t> src(n), rsrc(n);
    gvtest::fill_random(src.data(), n, seed);
    gvtest::fill_random(rsrc.data(), n, seed + 1);
    h2d(m.src, src.data(), n);
    h2d(m.rsrc, rsrc.data(), n);
    for (uint8_t* b : {m.wdst, m.rdst, m.recv}) CUDA_OK(cudaMemset(b, kGuard, n));
    CUDA_OK(cudaMemset(m.olds, 0xff, words * 8 + 64));
    CUDA_OK(cudaMemset(m.counter, 0, 8));

    // The operations, and what every byte must hold afterwards.
    std::mt19937_64 rng(seed);
    std::vector<Op> ops(words);
    std::vector<uint32_t> sends(kRounds, 0), owners(words, 0);
    std::vector<uint8_t> wdst(n, kGuard), rdst(n, kGuard), recv(n, kGuard);
    uint64_t adds = 0;
    uint32_t count[7] = {};
    for (uint32_t r = 0; r < kRounds; ++r) {
        for (uint32_t t = 0; t < T; ++t) {
            Op& op = ops[r * T + t];
            const uint32_t roll = uint32_t(rng() % 100);
            op.kind = roll < 30 ? kBigWrite : roll < 50 ? kBigRead : roll < 62 ? kSmallWrite : roll < 67 ? kSmallRead
                      : roll < 82 ? kSend : roll < 93 ? kFetchAdd : kNop;
            const bool small = op.kind == kSmallWrite || op.kind == kSmallRead;
            // Large: past the leader-alone limit (128 bytes), up to the slot; small: 1..128.
            op.len = small ? 1 + uint32_t(rng() % 128) : 129 + uint32_t(rng() % (kSlot - 64 - 129));
            if (op.kind == kSend && rng() % 4 == 0) op.len = 1 + uint32_t(rng() % 128);
            op.off = uint32_t(rng() % 64);
            ++count[op.kind];
            const size_t base = (size_t(r) * T + t) * kSlot, at = base + op.off;
            if (op.kind == kBigWrite || op.kind == kSmallWrite) std::memcpy(&wdst[at], &src[at], op.len);
            if (op.kind == kBigRead || op.kind == kSmallRead) std::memcpy(&rdst[at], &rsrc[at], op.len);
            if (op.kind == kSend) {
                std::memcpy(&recv[base], &src[at], op.len);
                owners[r * T + sends[r]++] = t;
            }
            if (op.kind == kFetchAdd) ++adds;
        }
    }
    auto d_ops = upload(ops);
    auto d_sends = upload(sends);
    auto d_owners = upload(owners);
    Err err;
    mixed_kernel<<<1, T>>>(p.h(0), p.h(1), d_ops->get<Op>(), d_sends->get<uint32_t>(), d_owners->get<uint32_t>(), m,
                           err.get());
    LAUNCH_OK();
    err.expect_none("mixed kernel");
    std::printf("[ gpu ] %u threads x %u rounds: %u large WRITEs, %u large READs, %u small WRITEs, %u small READs, "
                "%u SENDs, %u fetch-adds, %u NOPs\n",
                T, kRounds, count[kBigWrite], count[kBigRead], count[kSmallWrite], count[kSmallRead], count[kSend],
                count[kFetchAdd], count[kNop]);

    struct Check {
        const char* what;
        const uint8_t* dev;
        const std::vector<uint8_t>& want;
    } checks[] = {{"WRITE destinations", m.wdst, wdst}, {"READ destinations", m.rdst, rdst}, {"receive buffers", m.recv, recv}};
    for (const Check& c : checks) {
        const auto got = d2h(c.dev, n);
        const long d = gvtest::first_diff(got.data(), c.want.data(), n);
        EXPECT_EQ(d, -1) << c.what << ": first wrong byte at " << d << " (round " << (d / kSlot) / T << ", thread "
                         << (d / kSlot) % T << ", offset " << d % kSlot << " in its slot, kind "
                         << (d >= 0 ? ops[d / kSlot].kind : 0) << ")";
    }
    const auto olds = d2h<uint64_t>(m.olds, words + 1);
    std::vector<uint64_t> seen;
    for (size_t i = 0; i < words; ++i) {
        if (ops[i].kind == kFetchAdd) seen.push_back(olds[i]);
        else EXPECT_EQ(olds[i], ~0ull) << "a word no fetch-add owns changed: " << i;
    }
    std::sort(seen.begin(), seen.end());
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], i) << "fetch-add old values are not 0.." << adds - 1;
    EXPECT_EQ(olds[words], adds) << "the counter after " << adds << " fetch-adds of 1";
    EXPECT_EQ(p.qp[0]->state(), QpState::Rts);
    EXPECT_EQ(p.qp[1]->state(), QpState::Rts);
}

// RC ordering across chained WQEs (unsignaled WRITEs of more than 128 bytes in a block of 256
// or more, exec.cuh: each copier fences its own stores, one barrier between two WQEs, the
// leader's fence gone from between them). The writer block posts one 1 KiB WRITE per thread
// per round at block scope (ring order = thread order), every one unsignaled but the last;
// the last word of each WRITE is the round. Poller thread i spins until WRITE i's last word
// shows the round, then checks every word of WRITE i-1: with RC ordering, WRITE i-1 landed
// whole before any byte of WRITE i. The writer waits for the pollers before the next round
// overwrites the destination.
constexpr uint32_t kChainBytes = 1024;

__device__ uint64_t chain_word(uint32_t round, uint32_t wqe, uint32_t w) {
    return (uint64_t(round) << 40) | (uint64_t(wqe) << 16) | w;
}

__global__ void __launch_bounds__(512) chain_order_kernel(dev::QpHandle qp, uint8_t* src, uint32_t lkey, uint8_t* dst,
                                                          uint32_t rkey, uint32_t rounds, uint32_t* done,
                                                          unsigned long long* errors) {
    constexpr uint32_t kWords = kChainBytes / 8;
    const uint32_t t = threadIdx.x, n = blockDim.x;
    if (blockIdx.x == 0) {
        for (uint32_t r = 1; r <= rounds; ++r) {
            auto* mine = reinterpret_cast<uint64_t*>(src + (size_t(r & 1) * n + t) * kChainBytes);
            for (uint32_t w = 0; w + 1 < kWords; ++w) mine[w] = chain_word(r, t, w);
            mine[kWords - 1] = r;
            __syncthreads();
            Status st = dev::write<Scope::Block>(qp, mine, kChainBytes, lkey, uint64_t(dst + size_t(t) * kChainBytes),
                                                 rkey, t == n - 1 ? kSignaled : 0u, 5'000'000'000ull);
            if (st == Status::Ok) st = dev::commit<Scope::Block>(qp);
            if (st != Status::Ok) atomicAdd(errors, 1ull << 32);
            if (t == 0) {
                if (dev::wait_send(qp, 1, nullptr, 5'000'000'000ull) != Status::Ok) atomicAdd(errors, 1ull << 40);
                if (!gvtest::wait_at_least<uint32_t>(done, r, 5'000'000'000ull)) atomicAdd(errors, 1ull << 48);
            }
            __syncthreads();
        }
    } else {
        for (uint32_t r = 1; r <= rounds; ++r) {
            const auto* tail = reinterpret_cast<const uint64_t*>(dst + size_t(t) * kChainBytes) + kWords - 1;
            if (!gvtest::wait_at_least<uint64_t>(tail, r, 5'000'000'000ull)) {
                atomicAdd(errors, 1ull << 56);
            } else if (t > 0) {
                const volatile uint64_t* before = reinterpret_cast<const uint64_t*>(dst + size_t(t - 1) * kChainBytes);
                uint32_t bad = 0;
                for (uint32_t w = 0; w + 1 < kWords; ++w) bad += before[w] != chain_word(r, t - 1, w);
                bad += before[kWords - 1] != r;
                if (bad) atomicAdd(errors, bad);
            }
            __syncthreads();
            if (t == 0) atom::store_release(done, r);
        }
    }
}

void run_chain_order(uint32_t T, uint32_t rounds) {
    QpOptions o;
    o.sq_depth = 1024;
    gvtest::Pair p(gvtest::gpu_ctx(), o);
    DevBuf src(2 * size_t(T) * kChainBytes), dst(size_t(T) * kChainBytes), aux(64);
    ASSERT_TRUE(src.p && dst.p && aux.p);
    MemoryRegion ms(p.pd, src.p, src.n, kLocalWrite), md(p.pd, dst.p, dst.n, kAllAccess);
    CUDA_OK(cudaMemset(dst.p, 0, dst.n));
    CUDA_OK(cudaMemset(aux.p, 0, aux.n));
    auto* done = aux.get<uint32_t>();
    auto* errors = reinterpret_cast<unsigned long long*>(aux.get<uint8_t>() + 8);
    chain_order_kernel<<<2, T>>>(p.h(0), src.get(), ms.lkey(), dst.get(), md.rkey(), rounds, done, errors);
    LAUNCH_OK();
    const unsigned long long e = d2h<unsigned long long>(errors, 1)[0];
    EXPECT_EQ(e & 0xffffffffull, 0u) << "words of WRITE i-1 not landed when WRITE i's last word had";
    EXPECT_EQ(e >> 32, 0u) << "post/commit failures: " << ((e >> 32) & 0xff) << ", wait_send: " << ((e >> 40) & 0xff)
                           << ", writer waits: " << ((e >> 48) & 0xff) << ", poller waits: " << (e >> 56);
    EXPECT_EQ(p.qp[0]->state(), QpState::Rts);
}

// A SEND's receive completion comes after its data, in SENDs planned ahead (more than 128 bytes
// and at most kSendAheadBytes, from a block of 256 or more: the leader plans SEND i+1 and peeks
// at its receive while the group copies SEND i, and writes SEND i's receive completion after
// the group's barrier; a change that chains SENDs, writing that completion while the group
// copies SEND i+1, must keep this). Block 1 posts one receive per thread per round (block scope: receive i is
// slot i) and takes the round's receive completions one at a time: completion i must name
// receive i and kChainBytes, and find SEND i's bytes whole (this round's words, not the last
// round's): a completion written before its data would show old words. Block 0 sends once the
// round's receives are posted, every SEND unsignaled but the round's last.
__global__ void __launch_bounds__(512) send_chain_kernel(dev::QpHandle a, dev::QpHandle b, uint8_t* src, uint8_t* dst,
                                                         uint32_t lkey, uint32_t rounds, uint32_t* posted,
                                                         unsigned long long* errors) {
    constexpr uint32_t kWords = kChainBytes / 8;
    static_assert(kWords <= 256, "one word per checking thread");
    const uint32_t t = threadIdx.x, n = blockDim.x;
    __shared__ Completion c;
    __shared__ uint32_t stop;
    if (t == 0) stop = 0;
    __syncthreads();
    for (uint32_t r = 1; r <= rounds; ++r) {
        if (blockIdx.x == 0) {
            auto* mine = reinterpret_cast<uint64_t*>(src + size_t(t) * kChainBytes);
            for (uint32_t w = 0; w < kWords; ++w) mine[w] = chain_word(r, t, w);
            if (t == 0 && !gvtest::wait_at_least<uint32_t>(posted, r, kWait)) {
                atomicAdd(errors, 1ull << 48);
                stop = 1;
            }
            __syncthreads();
            if (stop) return;
            Status st = dev::send<Scope::Block>(a, mine, kChainBytes, lkey, t == n - 1 ? kSignaled : 0u, kWait);
            if (st == Status::Ok) st = dev::commit<Scope::Block>(a);
            if (st != Status::Ok) atomicAdd(errors, 1ull << 32);
            if (t == 0 && dev::wait_send(a, 1, nullptr, kWait) != Status::Ok) atomicAdd(errors, 1ull << 40);
            __syncthreads();
        } else {
            if (dev::recv<Scope::Block>(b, dst + size_t(t) * kChainBytes, kChainBytes, lkey, kWait) != Status::Ok)
                atomicAdd(errors, 1ull << 32);
            __syncthreads();
            if (t == 0) atom::store_release(posted, r);
            for (uint32_t i = 0; i < n; ++i) {
                if (t == 0) {
                    Completion got{};
                    if (dev::wait_recv(b, 1, &got, kWait) != Status::Ok) {
                        atomicAdd(errors, 1ull << 56);
                        stop = 1;
                    }
                    c = got;
                }
                __syncthreads();
                if (stop) return;
                if (c.status != 0 || c.byte_len != kChainBytes || c.wqe_counter != uint16_t((r - 1) * n + i)) {
                    if (t == 0) atomicAdd(errors, 1ull << 24);
                } else if (t < kWords) {
                    const volatile uint64_t* m = reinterpret_cast<const uint64_t*>(dst + size_t(i) * kChainBytes);
                    if (m[t] != chain_word(r, i, t)) atomicAdd(errors, 1);
                }
                __syncthreads();
            }
        }
    }
}

void run_send_chain(uint32_t T, uint32_t rounds) {
    QpOptions o;
    o.sq_depth = 1024;
    o.rq_depth = 1024;
    gvtest::Pair p(gvtest::gpu_ctx(), o);
    // One region (one lkey) for the sources and the receive buffers.
    const size_t half = size_t(T) * kChainBytes;
    DevBuf mem(2 * half), aux(64);
    ASSERT_TRUE(mem.p && aux.p);
    MemoryRegion mr(p.pd, mem.p, mem.n, kAllAccess);
    CUDA_OK(cudaMemset(mem.p, 0, mem.n));
    CUDA_OK(cudaMemset(aux.p, 0, aux.n));
    auto* posted = aux.get<uint32_t>();
    auto* errors = reinterpret_cast<unsigned long long*>(aux.get<uint8_t>() + 8);
    send_chain_kernel<<<2, T>>>(p.h(0), p.h(1), mem.get(), mem.get() + half, mr.lkey(), rounds, posted, errors);
    LAUNCH_OK();
    const unsigned long long e = d2h<unsigned long long>(errors, 1)[0];
    EXPECT_EQ(e & 0xffffffull, 0u) << "words of SEND i not landed when its receive completion was seen";
    EXPECT_EQ((e >> 24) & 0xff, 0u) << "receive completions that were not receive i's success of " << kChainBytes
                                    << " bytes";
    EXPECT_EQ(e >> 32, 0u) << "post/commit failures: " << ((e >> 32) & 0xff) << ", wait_send: " << ((e >> 40) & 0xff)
                           << ", sender's waits for the receives: " << ((e >> 48) & 0xff)
                           << ", wait_recv: " << (e >> 56);
    EXPECT_EQ(p.qp[0]->state(), QpState::Rts);
    EXPECT_EQ(p.qp[1]->state(), QpState::Rts);
    EXPECT_GT(run_sends(p.h(0)), 0u) << "SENDs taken in runs (send_run.cuh)";
}

// A receive completion lost to a full CQ while the next SEND was planned ahead (its receive
// peeked at, not claimed: the plan is dropped when the completion moves a QP to ERROR). Every thread
// posts a receive, then an unsignaled SEND of len bytes; one block commit. The receiver's CQ
// holds depth completions, and nobody polls it during the commit: SENDs 0..depth-1 complete,
// SEND depth lands but its completion is lost (the receiver goes to ERROR), SEND depth+1 finds
// no receiver (transport retries exceeded: the sender goes to ERROR) and every later one
// flushes; not one byte of theirs may land.
__global__ void __launch_bounds__(512) lost_recv_kernel(dev::QpHandle a, dev::QpHandle b, const uint8_t* src,
                                                        uint8_t* dst, uint32_t len, uint32_t slkey, uint32_t dlkey,
                                                        uint32_t depth, Completion* scqes, uint32_t* out) {
    const uint32_t t = threadIdx.x, T = blockDim.x;
    if (dev::recv<Scope::Block>(b, dst + size_t(t) * len, len, dlkey, kWait) != Status::Ok) atomicAdd(&out[0], 1u);
    if (dev::send<Scope::Block>(a, src + size_t(t) * len, len, slkey, 0u, kWait) != Status::Ok) atomicAdd(&out[0], 1u);
    const Status cs = dev::commit<Scope::Block>(a);
    if (t == 0) {
        out[1] = uint32_t(cs);
        Completion rc[8];
        out[2] = uint32_t(dev::wait_recv(b, depth, rc, kWait, &out[3]));
        for (uint32_t i = 0; i < depth && i < 8; ++i)
            if (rc[i].status != 0 || rc[i].wqe_counter != i || rc[i].byte_len != len) atomicAdd(&out[4], 1u);
        out[5] = uint32_t(dev::wait_recv(b, 1, nullptr, kWait));
        out[6] = uint32_t(dev::wait_send(a, T - depth - 1, scqes, kWait, &out[7]));
    }
}

void run_lost_recv(uint32_t T, uint32_t len) {
    Context ctx = gvtest::gpu_ctx();
    ProtectionDomain pd(ctx);
    CompletionQueue big(ctx, CqOptions{1024}), small(ctx, CqOptions{4});
    const uint32_t depth = small.depth();
    ASSERT_LE(depth, 8u);
    QpOptions o;
    o.sq_depth = 1024;
    o.rq_depth = 1024;
    o.send_cq = o.recv_cq = &big;
    QueuePair qa(pd, o);
    o.recv_cq = &small;
    QueuePair qb(pd, o);
    qa.connect(qb.endpoint());
    qb.connect(qa.endpoint());
    const size_t n = size_t(T) * len;
    DevBuf src(n), dst(n), out(64), scqes(T * sizeof(Completion));
    ASSERT_TRUE(src.p && dst.p && out.p && scqes.p);
    MemoryRegion mr_src(pd, src.p, n, kLocalWrite), mr_dst(pd, dst.p, n, kAllAccess);
    std::vector<uint8_t> hsrc(n);
    gvtest::fill_random(hsrc.data(), n, T + len + 7);
    h2d(src.p, hsrc.data(), n);
    CUDA_OK(cudaMemset(dst.p, kGuard, n));
    CUDA_OK(cudaMemset(out.p, 0, out.n));
    lost_recv_kernel<<<1, T>>>(qa.device_handle(), qb.device_handle(), src.get(), dst.get(), len, mr_src.lkey(),
                               mr_dst.lkey(), depth, scqes.get<Completion>(), out.get<uint32_t>());
    LAUNCH_OK();
    const auto res = d2h<uint32_t>(out.p, 8);
    EXPECT_EQ(res[0], 0u) << "posts that failed";
    EXPECT_EQ(Status(res[1]), Status::QpError) << "the commit's status";
    EXPECT_EQ(Status(res[2]), Status::Ok) << "wait_recv for the " << depth << " completions (polled " << res[3] << ")";
    EXPECT_EQ(res[4], 0u) << "receive completions that were not receive i's success of " << len << " bytes";
    EXPECT_EQ(Status(res[5]), Status::CqOverrun) << "wait_recv after them";
    EXPECT_EQ(Status(res[6]), Status::CompletionError) << "wait_send (polled " << res[7] << ")";
    ASSERT_EQ(res[7], T - depth - 1);
    const auto sc = d2h<Completion>(scqes.p, T - depth - 1);
    EXPECT_EQ(sc[0].wqe_counter, depth + 1);
    EXPECT_EQ(sc[0].status, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR) << "the SEND after the lost completion";
    for (uint32_t i = 1; i < sc.size(); ++i) {
        EXPECT_EQ(sc[i].wqe_counter, depth + 1 + i);
        ASSERT_EQ(sc[i].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR) << "SEND " << depth + 1 + i;
    }
    EXPECT_EQ(qa.state(), QpState::Error);
    EXPECT_EQ(qb.state(), QpState::Error);
    const auto got = d2h(dst.p, n);
    for (uint32_t s = 0; s <= depth; ++s)
        ASSERT_EQ(std::memcmp(&got[size_t(s) * len], &hsrc[size_t(s) * len], len), 0) << "SEND " << s << " did not land";
    for (uint32_t s = depth + 1; s < T; ++s)
        for (size_t i = 0; i < len; ++i)
            ASSERT_EQ(got[size_t(s) * len + i], kGuard) << "SEND " << s << " (not executed) wrote byte " << i;
}

// SEND t reads the receive buffer SEND t-1 fills (from byte 16 on), so every buffer is the first
// SEND's bytes shifted along: a run copies its SENDs at once, four words in flight per thread
// across all of them, so such a SEND must start a run of its own (send_run.cuh). One block: every
// thread posts a receive, then its SEND; one commit, the last SEND signaled.
__global__ void __launch_bounds__(512) send_reads_receive_kernel(dev::QpHandle a, dev::QpHandle b, const uint8_t* src,
                                                                 uint8_t* dst, uint32_t len, uint32_t slot, uint32_t shift,
                                                                 uint32_t lkey, uint32_t* out) {
    const uint32_t t = threadIdx.x, T = blockDim.x;
    if (dev::recv<Scope::Block>(b, dst + size_t(t) * slot, slot, lkey, kWait) != Status::Ok) atomicAdd(&out[0], 1u);
    const uint8_t* from = t == 0 ? src : dst + size_t(t - 1) * slot + shift;
    if (dev::send<Scope::Block>(a, from, len, lkey, t == T - 1 ? kSignaled : 0u, kWait) != Status::Ok)
        atomicAdd(&out[0], 1u);
    const Status cs = dev::commit<Scope::Block>(a);
    if (t == 0) {
        out[1] = uint32_t(cs);
        out[2] = uint32_t(dev::wait_send(a, 1, nullptr, kWait));
        out[3] = uint32_t(dev::wait_recv(b, T, nullptr, kWait, &out[4]));
    }
}

void run_send_reads_receive(uint32_t T, uint32_t len) {
    QpOptions o;
    o.sq_depth = 1024;
    o.rq_depth = 1024;
    gvtest::Pair p(gvtest::gpu_ctx(), o);
    const uint32_t slot = 2 * len, shift = 16;
    const size_t n = size_t(T) * slot;
    DevBuf mem(slot + n), out(64);  // the first SEND's source, then the receive buffers
    ASSERT_TRUE(mem.p && out.p);
    MemoryRegion mr(p.pd, mem.p, mem.n, kAllAccess);
    std::vector<uint8_t> first(slot);
    gvtest::fill_random(first.data(), slot, T + len);
    h2d(mem.p, first.data(), slot);
    CUDA_OK(cudaMemset(mem.get() + slot, kGuard, n));
    CUDA_OK(cudaMemset(out.p, 0, out.n));
    send_reads_receive_kernel<<<1, T>>>(p.h(0), p.h(1), mem.get(), mem.get() + slot, len, slot, shift, mr.lkey(),
                                        out.get<uint32_t>());
    LAUNCH_OK();
    const auto res = d2h<uint32_t>(out.p, 5);
    EXPECT_EQ(res[0], 0u) << "posts that failed";
    EXPECT_EQ(Status(res[1]), Status::Ok) << "the commit";
    EXPECT_EQ(Status(res[2]), Status::Ok) << "wait_send";
    EXPECT_EQ(Status(res[3]), Status::Ok) << "wait_recv (polled " << res[4] << ")";
    std::vector<uint8_t> want(n, kGuard);
    for (uint32_t t = 0; t < T; ++t) {
        const uint8_t* from = t == 0 ? first.data() : want.data() + size_t(t - 1) * slot + shift;
        std::memmove(want.data() + size_t(t) * slot, from, len);
    }
    const auto got = d2h(mem.get() + slot, n);
    const long d = gvtest::first_diff(want.data(), got.data(), n);
    EXPECT_EQ(d, -1) << "byte " << d << " (SEND " << d / long(slot) << ")";
    EXPECT_EQ(run_sends(p.h(0)), T) << "each SEND a run of its own";
    EXPECT_EQ(p.qp[0]->state(), QpState::Rts);
    EXPECT_EQ(p.qp[1]->state(), QpState::Rts);
}

}  // namespace

TEST(GpuPlanAhead, SendRunStopsAtASendReadingAnEarlierOnesReceive) {
    GV_SKIP_WITHOUT_GPU();
    run_send_reads_receive(256, 4 << 10);
    run_send_reads_receive(512, 1 << 10);
}

TEST(GpuPlanAhead, SendsCompleteAfterTheirDataBlockOf256) {
    GV_SKIP_WITHOUT_GPU();
    run_send_chain(256, 40);
}

TEST(GpuPlanAhead, SendsCompleteAfterTheirDataBlockOf512) {
    GV_SKIP_WITHOUT_GPU();
    run_send_chain(512, 20);
}

TEST(GpuPlanAhead, LostReceiveCompletionStopsTheSendsPlannedAhead) {
    GV_SKIP_WITHOUT_GPU();
    run_lost_recv(256, 4 << 10);
}

TEST(GpuPlanAhead, MixedOpsBlockOf512) {
    GV_SKIP_WITHOUT_GPU();
    run_mixed(512, 21);
}

TEST(GpuPlanAhead, MixedOpsBlockOf256) {
    GV_SKIP_WITHOUT_GPU();
    run_mixed(256, 22);
}

TEST(GpuPlanAhead, MixedOpsBlockOf128) {  // below the plan-ahead size: the same checks, in turns
    GV_SKIP_WITHOUT_GPU();
    run_mixed(128, 23);
}

TEST(GpuPlanAhead, LostCompletionFlushesThePlanMadeAhead) {
    GV_SKIP_WITHOUT_GPU();
    run_overrun(512, 16 << 10);
    run_overrun(256, 4 << 10);
}

TEST(GpuPlanAhead, ChainedWritesLandInOrderBlockOf512) {
    GV_SKIP_WITHOUT_GPU();
    run_chain_order(512, 200);
}

TEST(GpuPlanAhead, ChainedWritesLandInOrderBlockOf256) {
    GV_SKIP_WITHOUT_GPU();
    run_chain_order(256, 200);
}
