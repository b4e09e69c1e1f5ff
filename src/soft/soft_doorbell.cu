// Executor launches for work that CPU threads commit to a software device executing on a
// GPU: CPU threads cannot run its executor (its state is GPU memory). Their doorbells go on
// the device's board (board.hpp), whose kernel serves every QP rung since it last looked;
// a QP without a slot (the board full or turned off) gets a one-block kernel per doorbell.
// Both run on the library's stream.
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/cuda_rt.hpp"
#include "gpuverbs/errors.hpp"
#include "gpuverbs/detail/soft/exec.cuh"
#include "soft/board.hpp"

namespace gv::detail {

namespace {
/// What a QP's doorbells since the last look ask for (one bit per kind).
enum RungBits : uint32_t {
    kRungSend = 1u << 16,   ///< SendQueue (Flush sets both)
    kRungRecv = 1u << 17,   ///< RecvQueue
    kRungDrive = 1u << 18,  ///< Drive
    kRungSlot = 0xffffu,    ///< the slot, in a board kernel's list
};

uint32_t rung_bits(dev::HostDoorbell what) {
    switch (what) {
        case dev::HostDoorbell::SendQueue: return kRungSend;
        case dev::HostDoorbell::RecvQueue: return kRungRecv;
        case dev::HostDoorbell::Flush: return kRungSend | kRungRecv;
        case dev::HostDoorbell::Drive: return kRungDrive;
    }
    return kRungSend | kRungRecv;
}

/// The library's executor kernels run a QP as a block that stages a host-memory send ring's
/// published WQEs in shared memory before reading them (stage_wqes in exec.cuh): one PCIe
/// round trip for up to kStageBbs WQEBBs, not one per WQE. (Application kernels' block groups
/// carry no stage: their shared memory is theirs.)
struct StageHeader {
    unsigned long long ci;
    const uint8_t* ring;
    uint32_t mask;
};
struct StagingBlockGroup : BlockGroup {
    static constexpr uint32_t kStageBbs = 64;
    uint4* stage;       ///< shared memory, kStageBbs * 4 units
    StageHeader* hdr;   ///< shared memory
};
#define GV_STAGING_GROUP(g)                      \
    __shared__ uint4 stage_[StagingBlockGroup::kStageBbs * 4]; \
    __shared__ StageHeader hdr_;                 \
    StagingBlockGroup g;                         \
    g.stage = stage_;                            \
    g.hdr = &hdr_

/// Serves one QP's doorbells (`rung`: RungBits) with the whole block: a send doorbell runs
/// the send queue; a receive flushes it in ERROR and retries a sender of this process that
/// waits for it under the RNR rules; a drive does what a waiting kernel's drive() does
/// (detail/soft/doorbell.cuh), for a CPU waiter. Uniform across the block.
__device__ void serve(soft::QpContext* q, uint32_t rung, const StagingBlockGroup& g) {
    uint32_t run = rung & kRungSend;
    if (!run && (rung & kRungDrive)) {
        uint32_t need = 0;
        if (g.leader()) need = soft::needs_progress(q) ? 1 : 0;
        run = g.bcast(need);
    }
    if (run) soft::progress(q, g);
    if (!(rung & kRungRecv) && !((rung & kRungDrive) && run)) return;
    const bool sys = soft::state_scope(q) != soft::kScopeGpu;  // a peer on the other GPU (xgpu)
    if (g.leader() && soft::load_state(q, sys) == QpState::Error) soft::flush_rq(q);
    if (!(rung & kRungRecv)) return;
    soft::QpContext* peer = q->remote;
    uint32_t waiting = 0;
    // Only a peer of this process: another process's executor runs its own QPs.
    if (g.leader() && peer && soft::peer_in_process(q)) waiting = atom::load_acquire(&peer->rnr_waiting, sys);
    if (g.bcast(waiting)) soft::progress(peer, g);
}

/// One doorbell, one launch: for a QP without a board slot.
__global__ void soft_doorbell_kernel(soft::QpContext* q, uint32_t rung) {
    GV_STAGING_GROUP(g);
    serve(q, rung, g);
}

// ---- the board's kernel -------------------------------------------------------------

/// Looks once at the slots of `part` below the board's count; serves each
/// whose counters moved since it was last served (its `seen` is updated before serving, so
/// a doorbell that comes during the service is found by the next sweep). Returns whether
/// it found any. Every thread of the block calls it.
__device__ bool sweep(const soft::BoardHost* h, soft::BoardDev* d, uint32_t part, const StagingBlockGroup& g) {
    __shared__ uint32_t list[soft::kBoardThreads];
    __shared__ uint32_t n, used;
    bool any = false;
    for (uint32_t base = 0;; base += soft::kBoardThreads) {
        if (g.leader()) n = 0;
        g.sync();
        const uint32_t i = base + threadIdx.x;
        // The count and the counters are loaded together (one PCIe round trip, not two): a
        // slot at or past the count is not used, and the board's memory has every slot.
        const uint32_t count = atom::load_relaxed(&h->count, true);
        soft::Bell b;
        asm volatile("ld.relaxed.sys.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(b.send), "=r"(b.recv), "=r"(b.drive), "=r"(b.pad)
                     : "l"(&h->bell[i < d->slots ? i : 0])
                     : "memory");
        if (i < count && soft::board_part(i) == part) {
            soft::BoardSlot& s = d->slot[i];
            uint32_t rung = 0;
            if (b.send != s.seen[0]) rung |= kRungSend;
            if (b.recv != s.seen[1]) rung |= kRungRecv;
            if (b.drive != s.seen[2]) rung |= kRungDrive;
            if (rung && s.q) {
                s.seen[0] = b.send;
                s.seen[1] = b.recv;
                s.seen[2] = b.drive;
                list[atomicAdd(&n, 1u)] = i | rung;
            }
        }
        // The counters were read before what the doorbells published (the queues' doorbell
        // records, read by progress() with its own acquire), and this orders them.
        atom::fence_acquire(true);
        if (g.leader()) used = count;  // the loop's end, the same for every thread
        g.sync();
        const uint32_t found = n, count_now = used;
        for (uint32_t k = 0; k < found; ++k) {
            const uint32_t e = list[k];
            soft::QpContext* q = d->slot[e & kRungSlot].q;
            if (!d->stats) {
                serve(q, e & ~kRungSlot, g);
                continue;
            }
            const uint64_t t = atom::now_ns();
            const unsigned long long ci = q->sq_ci;
            serve(q, e & ~kRungSlot, g);
            if (g.leader()) {
                atomicAdd(&d->serve_ns, (unsigned long long)(atom::now_ns() - t));
                atomicAdd(&d->wqebbs, (unsigned long long)(atom::load_relaxed(&q->sq_ci) - ci));
            }
        }
        if (d->stats && g.leader()) atomicAdd(&d->sweeps, 1ull);
        any |= found != 0;
        if (base + soft::kBoardThreads >= count_now) break;
    }
    return any;
}

/// Kernel `gen` of part `part` of the board (one block): serves the part's slots until a
/// sweep finds nothing (or its time, d->sweep_ns, is up), says it is done (finished = gen),
/// then sweeps once more (board.hpp says why that last sweep is enough).
///
/// Whether to sweep again is the leader's decision, broadcast to the block. Each thread
/// reading the clock itself (as this loop once did) lets the warps disagree when the time runs
/// out: warps that left the loop then meet the others' barriers with their own, the block's
/// barriers no longer pair up, and threads read the stage header of another drain. On the
/// H200 that lost WQEs: a drain's WQEs staged by warps 1 to 7 (WQEBBs 8 to 63 of its stage)
/// held other ring slots, and the first of them failed LOCAL_QP_OP_ERR, in about one run in
/// five of CpuDoorbells.ThreadsOnTheirOwnQpsLoseNothing repeated in one process.
///
/// Registers: launched with kBoardThreads (256) threads, one block per part, so up to 255 per
/// thread would fit; with __launch_bounds__(256) ptxas chose 128 and spilled about 500 bytes of
/// the executor's leader state into local memory (ptxas -v). A cap of 192 (256 x 192 = 48 K of an
/// SM's 64 K registers) compiles without spills (178 used, CUDA 13.0, sm_90). (__maxnreg__ and
/// __launch_bounds__ cannot be given together; the launch uses exactly kBoardThreads.)
static_assert(soft::kBoardThreads * 192 <= 65536, "a board block must fit an SM's registers");
__global__ void __maxnreg__(192) board_kernel(soft::BoardHost* h, soft::BoardDev* d,
                                                                      uint32_t part, unsigned long long gen) {
    GV_STAGING_GROUP(g);
    const uint64_t t0 = atom::now_ns();
    for (;;) {
        const bool found = sweep(h, d, part, g);  // the same in every thread
        uint32_t again = 0;
        if (g.leader()) again = found && atom::now_ns() - t0 < d->sweep_ns ? 1 : 0;
        if (!g.bcast(again)) break;
    }
    if (g.leader()) {
        atom::store_relaxed(&h->finished[part].gen, gen, true);
        atom::fence_seq_cst(true);  // the store, before the last sweep's loads of the counters
    }
    g.sync();
    sweep(h, d, part, g);
    if (d->stats && g.leader()) atomicAdd(&d->kernel_ns, (unsigned long long)(atom::now_ns() - t0));
}

/// A CPU waiter's drive requests come once per turn of its wait loop; one launch per QP every
/// kDriveIntervalNs is enough for RNR timers (at least 10 us) and flushes, and keeps a
/// spinning waiter from filling the stream with launches.
constexpr uint64_t kDriveIntervalNs = 20000;

bool drive_due(void* q) {
    static std::mutex mu;
    static std::unordered_map<void*, uint64_t> last;  // QP context -> last drive launch
    const uint64_t now = atom::now_ns();
    std::lock_guard<std::mutex> lock(mu);
    if (last.size() > 65536) last.clear();  // bounded: destroyed QPs leave entries behind
    uint64_t& t = last[q];
    if (t && now - t < kDriveIntervalNs) return false;
    t = now;
    return true;
}

void launch_one(void* q, uint32_t rung) {
    soft_doorbell_kernel<<<1, soft::kBoardThreads, 0, static_cast<cudaStream_t>(cuda::stream())>>>(
        static_cast<soft::QpContext*>(q), rung);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) throw_cuda("launch of the software device's executor", int(e), __FILE__, __LINE__);
}

void soft_doorbell(void* q, dev::HostDoorbell what) {
    if (what == dev::HostDoorbell::Drive && !drive_due(q)) return;
    launch_one(q, rung_bits(what));
}

/// The same on the QP's own GPU (the thread's current device is left as it was): with two
/// GPUs in one process, a CPU thread whose current device is the other GPU must not launch
/// the executor there. A QP with a board slot rings it.
void soft_doorbell_at(void* target, dev::HostDoorbell what);
}  // namespace

namespace cuda {

/// A GPU's doorbell board (board.hpp): its memory, its parts' streams and launch counts,
/// and its free slots.
struct Board {
    int gpu = -1;
    uint32_t slots = 0;
    soft::BoardHost* host = nullptr;      ///< pinned, mapped
    soft::BoardHost* host_gpu = nullptr;  ///< the same memory, as the GPU addresses it
    soft::BoardDev* dev = nullptr;
    cudaStream_t streams[soft::kBoardParts] = {};
    /// Per part, kernels launched; equal to the part's `finished` when none is on its way.
    /// Changed under the part's mutex.
    std::atomic<unsigned long long> launched[soft::kBoardParts] = {};
    std::mutex part_mu[soft::kBoardParts];
    std::mutex mu;  ///< the slots' allocation
    std::vector<uint32_t> free_slots;
    /// Per slot, when a CPU waiter's drive last rang it (the drive rate limit, per slot).
    std::unique_ptr<std::atomic<uint64_t>[]> last_drive;

    static uint32_t part_of(uint32_t slot) { return soft::board_part(slot); }

    /// A doorbell on `slot` (see board.hpp for why a launch is needed only when the part's
    /// `finished` has caught up with its `launched`).
    void ring(uint32_t slot, dev::HostDoorbell what) {
        soft::Bell& b = host->bell[slot];
        switch (what) {
            case dev::HostDoorbell::SendQueue: __atomic_fetch_add(&b.send, 1u, __ATOMIC_SEQ_CST); break;
            case dev::HostDoorbell::RecvQueue: __atomic_fetch_add(&b.recv, 1u, __ATOMIC_SEQ_CST); break;
            case dev::HostDoorbell::Flush:
                __atomic_fetch_add(&b.recv, 1u, __ATOMIC_SEQ_CST);
                __atomic_fetch_add(&b.send, 1u, __ATOMIC_SEQ_CST);
                break;
            case dev::HostDoorbell::Drive: {
                const uint64_t now = atom::now_ns();
                const uint64_t t = last_drive[slot].load(std::memory_order_relaxed);
                if (t && now - t < kDriveIntervalNs) return;
                last_drive[slot].store(now, std::memory_order_relaxed);
                __atomic_fetch_add(&b.drive, 1u, __ATOMIC_SEQ_CST);
                break;
            }
        }
        // The counter's store, then this full fence, then the read of `finished`: the Dekker
        // pair with the kernel's store of `finished`, fence, and last sweep.
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        const uint32_t p = part_of(slot);
        unsigned long long* fin = &host->finished[p].gen;
        if (__atomic_load_n(fin, __ATOMIC_ACQUIRE) != launched[p].load(std::memory_order_acquire)) return;
        std::lock_guard<std::mutex> lock(part_mu[p]);
        const unsigned long long gen = launched[p].load(std::memory_order_relaxed);
        if (__atomic_load_n(fin, __ATOMIC_ACQUIRE) != gen) return;  // another thread launched
        launched[p].store(gen + 1, std::memory_order_release);
        board_kernel<<<1, soft::kBoardThreads, 0, streams[p]>>>(host_gpu, dev, p, gen + 1);
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) {
            launched[p].store(gen, std::memory_order_release);
            throw_cuda("launch of the software device's executor (doorbell board)", int(e), __FILE__, __LINE__);
        }
    }

    /// Writes slot i's GPU part on its part's stream, after that part's kernels, and waits.
    void write_slot(uint32_t i, const void* src, size_t off, size_t n) {
        cudaStream_t s = streams[part_of(i)];
        auto* dst = reinterpret_cast<uint8_t*>(&dev->slot[i]) + off;
        cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s);
        if (e != cudaSuccess) throw_cuda("writing a doorbell board slot", int(e), __FILE__, __LINE__);
    }
};

namespace {
/// The environment variable `name` as a decimal number from 0 to `max`; `dflt` when it is
/// unset or empty. Anything else (a sign, other characters, too large) is refused, saying
/// what was expected.
unsigned long long env_number(const char* name, unsigned long long dflt, unsigned long long max,
                              const char* expected) {
    const char* e = std::getenv(name);
    if (!e || !*e) return dflt;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(e, &end, 10);
    if (*end || *e == '-' || v > max) throw InvalidUsage(std::string(name) + "=" + e + ": expected " + expected);
    return v;
}

/// GV_DOORBELL_BOARD_SLOTS: how many QPs a GPU's board serves (default 1024; 0 turns the
/// board off: one launch per doorbell, as for QPs beyond the board's slots).
uint32_t board_slots_wanted() {
    return uint32_t(env_number("GV_DOORBELL_BOARD_SLOTS", soft::kBoardDefaultSlots, 65535,
                               "a number of slots from 0 (no board) to 65535"));
}

/// GV_DOORBELL_BOARD_SWEEP_NS: how long a board kernel keeps sweeping while it finds work
/// (default kBoardDefaultSweepNs). Longer saves launches under steady CPU posting; shorter
/// lets a cudaDeviceSynchronize elsewhere return sooner.
unsigned long long board_sweep_ns_wanted() {
    return env_number("GV_DOORBELL_BOARD_SWEEP_NS", soft::kBoardDefaultSweepNs, 1000000000ull,
                      "nanoseconds from 0 (one sweep per kernel) to 1000000000 (1 s)");
}
}  // namespace

Board* board_open(int gpu) {
    const uint32_t slots = board_slots_wanted();
    if (slots == 0) return nullptr;
    const unsigned long long sweep_ns = board_sweep_ns_wanted();  // before anything is allocated
    DeviceGuard guard(gpu);
    auto b = std::make_unique<Board>();
    b->gpu = gpu;
    b->slots = slots;
    const size_t host_bytes = sizeof(soft::BoardHost) + sizeof(soft::Bell) * (slots - 1);
    const size_t dev_bytes = sizeof(soft::BoardDev) + sizeof(soft::BoardSlot) * (slots - 1);
    void* hp = nullptr;
    if (cudaError_t e = cudaHostAlloc(&hp, host_bytes, cudaHostAllocMapped | cudaHostAllocPortable); e != cudaSuccess)
        throw_cuda("allocating the doorbell board (pinned host memory)", int(e), __FILE__, __LINE__);
    std::memset(hp, 0, host_bytes);
    b->host = static_cast<soft::BoardHost*>(hp);
    void* hg = nullptr;
    if (cudaError_t e = cudaHostGetDevicePointer(&hg, hp, 0); e != cudaSuccess) {
        cudaFreeHost(hp);
        throw_cuda("mapping the doorbell board for the GPU", int(e), __FILE__, __LINE__);
    }
    b->host_gpu = static_cast<soft::BoardHost*>(hg);
    void* dp = nullptr;
    if (cudaError_t e = cudaMalloc(&dp, dev_bytes); e != cudaSuccess) {
        cudaFreeHost(hp);
        throw_cuda("allocating the doorbell board", int(e), __FILE__, __LINE__);
    }
    b->dev = static_cast<soft::BoardDev*>(dp);
    std::vector<uint8_t> init(dev_bytes, 0);
    reinterpret_cast<soft::BoardDev*>(init.data())->slots = slots;
    const char* st = std::getenv("GV_DOORBELL_BOARD_STATS");
    reinterpret_cast<soft::BoardDev*>(init.data())->stats = st && *st == '1' ? 1 : 0;
    reinterpret_cast<soft::BoardDev*>(init.data())->sweep_ns = sweep_ns;
    try {
        copy_to_device(dp, init.data(), dev_bytes);
    } catch (...) {
        cudaFree(dp);
        cudaFreeHost(hp);
        throw;
    }
    for (uint32_t p = 0; p < soft::kBoardParts; ++p) {
        if (cudaError_t e = cudaStreamCreateWithFlags(&b->streams[p], cudaStreamNonBlocking); e != cudaSuccess) {
            for (uint32_t k = 0; k < p; ++k) cudaStreamDestroy(b->streams[k]);
            cudaFree(dp);
            cudaFreeHost(hp);
            throw_cuda("creating the doorbell board's streams", int(e), __FILE__, __LINE__);
        }
    }
    b->last_drive = std::make_unique<std::atomic<uint64_t>[]>(slots);
    for (uint32_t i = 0; i < slots; ++i) b->last_drive[i].store(0);
    b->free_slots.reserve(slots);
    for (uint32_t i = slots; i-- > 0;) b->free_slots.push_back(i);  // lowest first
    return b.release();
}

void board_close(Board* b) noexcept {
    if (!b) return;
    DeviceGuard guard(b->gpu);
    // Its kernels run on its parts' streams: done before the memory goes.
    for (cudaStream_t s : b->streams) {
        cudaStreamSynchronize(s);
        cudaStreamDestroy(s);
    }
    if (const char* e = std::getenv("GV_DOORBELL_BOARD_STATS"); e && *e == '1') {
        // How well the board batched: doorbells rung on it against kernels launched.
        unsigned long long rung = 0;
        for (uint32_t i = 0; i < b->host->count; ++i)
            rung += b->host->bell[i].send + b->host->bell[i].recv + b->host->bell[i].drive;
        unsigned long long kernels = 0;
        for (const auto& l : b->launched) kernels += l.load();
        soft::BoardDev st{};
        cudaMemcpy(&st, b->dev, sizeof st, cudaMemcpyDeviceToHost);
        std::fprintf(stderr,
                     "gpuverbs: doorbell board of GPU %d: %llu doorbells (slots reused count again), %llu kernels "
                     "(%.1f us in all), %llu sweeps, %llu WQEBBs executed in %.1f us of serving (%.3f us each)\n",
                     b->gpu, rung, kernels, st.kernel_ns / 1e3, st.sweeps, st.wqebbs, st.serve_ns / 1e3,
                     st.wqebbs ? st.serve_ns / 1e3 / double(st.wqebbs) : 0.0);
    }
    cudaFree(b->dev);
    cudaFreeHost(b->host);
    delete b;
}

int board_attach(Board* b, void* qp_context) {
    if (!b) return -1;
    std::lock_guard<std::mutex> lock(b->mu);
    if (b->free_slots.empty()) return -1;
    const uint32_t i = b->free_slots.back();
    soft::BoardSlot s{};
    s.q = static_cast<soft::QpContext*>(qp_context);
    const soft::Bell& bell = b->host->bell[i];
    s.seen[0] = __atomic_load_n(&bell.send, __ATOMIC_RELAXED);
    s.seen[1] = __atomic_load_n(&bell.recv, __ATOMIC_RELAXED);
    s.seen[2] = __atomic_load_n(&bell.drive, __ATOMIC_RELAXED);
    DeviceGuard guard(b->gpu);
    // After any kernel of its part still running.
    b->write_slot(i, &s, 0, sizeof s);
    b->free_slots.pop_back();
    b->last_drive[i].store(0);
    if (i >= b->host->count) __atomic_store_n(&b->host->count, i + 1, __ATOMIC_RELEASE);
    return int(i);
}

void board_detach(Board* b, int slot) {
    if (!b || slot < 0) return;
    std::lock_guard<std::mutex> lock(b->mu);
    DeviceGuard guard(b->gpu);
    soft::QpContext* none = nullptr;
    // Ordered after every kernel of the part launched so far, and synchronous: when it
    // returns, no kernel serves the QP any more, and later ones skip the slot.
    b->write_slot(uint32_t(slot), &none, offsetof(soft::BoardSlot, q), sizeof none);
    b->free_slots.push_back(uint32_t(slot));
}

}  // namespace cuda

namespace {
void soft_doorbell_at(void* target, dev::HostDoorbell what) {
    const auto* t = static_cast<const cuda::SoftDoorbellTarget*>(target);
    cuda::DeviceGuard guard(t->gpu);
    if (t->board && t->slot >= 0) {
        t->board->ring(uint32_t(t->slot), what);
        return;
    }
    soft_doorbell(t->qp_context, what);
}
}  // namespace

namespace cuda {
DoorbellFn soft_doorbell_fn() { return &soft_doorbell; }
DoorbellFn soft_doorbell_at_fn() { return &soft_doorbell_at; }

namespace {
/// An executor kernel's CUfunction on the current device (null, error state cleared, if none):
/// the one-doorbell kernel by default, or the board's.
CUfunction executor_function(const void* kernel = reinterpret_cast<const void*>(&soft_doorbell_kernel)) {
    cudaFunction_t f = nullptr;
    if (cudaGetFuncBySymbol(&f, kernel) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    return reinterpret_cast<CUfunction>(f);
}
}  // namespace

void load_executor(int gpu) {
    DeviceGuard guard(gpu);
    // cuFuncLoad (CUDA 12.4) loads the function itself; the runtime call below loads it too
    // where the driver lacks it, and reports a failure in the runtime's terms.
    using LoadFn = CUresult (*)(CUfunction);
    LoadFn load = nullptr;
    for (const void* k : {reinterpret_cast<const void*>(&soft_doorbell_kernel),
                          reinterpret_cast<const void*>(&board_kernel)}) {
        if (CUfunction f = executor_function(k); f && driver_fn("cuFuncLoad", load, 12040)) (void)load(f);
        cudaFuncAttributes a{};
        const cudaError_t e = cudaFuncGetAttributes(&a, k);
        if (e != cudaSuccess) throw_cuda("loading the software device's executor kernels", int(e), __FILE__, __LINE__);
    }
}

int executor_loaded(int gpu) {
    DeviceGuard guard(gpu);
    using IsLoadedFn = CUresult (*)(CUfunctionLoadingState*, CUfunction);
    IsLoadedFn is_loaded = nullptr;
    CUfunction f = executor_function();
    if (!f || !driver_fn("cuFuncIsLoaded", is_loaded, 12040)) return -1;
    CUfunctionLoadingState st{};
    if (is_loaded(&st, f) != CUDA_SUCCESS) return -1;
    return st == CU_FUNCTION_LOADING_STATE_LOADED ? 1 : 0;
}
}  // namespace cuda

}  // namespace gv::detail
