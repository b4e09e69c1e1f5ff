// gv_probe_path: where the time of one WRITE (or SEND: --op send) goes, posted and waited for
// by a single CUDA thread on the software device (clock64 around each step, averaged). The
// steps are the library's own functions, in the order dev::write + dev::commit +
// dev::wait_send run them; for a SEND the same thread first posts the receive it will fill
// (dev::recv on the peer QP) and last polls the peer's receive completion.
// --peer-gpu N: the responder QP and the target buffer on GPU N (a cross-GPU QP: its executor
// on GPU 0 reaches the peer's QP state, queues and memory over NVLink, with system-scope
// fences), the steps timed on GPU 0 as before.
// --batch N: each iteration posts N 8-byte WRITEs (the last one signaled) with one reservation,
// one publication and one doorbell, so that one drain executes N WQEs: the executor's steps
// are then per WQE of a long drain (what bounds one QP's message rate), not of a lone WRITE.
// --size N: bytes per WRITE or SEND (default 8). A SEND of at most 32 bytes takes the
// executor's fast_send_run, a larger one prepare() and the one-thread copy.
// --commit: each WRITE posted and committed in one call (kCommit), which a lone thread's WRITE
// of at most 128 bytes takes through the direct path (detail/soft/direct.cuh: the position's and
// the lock's RMWs together, one round of loads, the WQE executed from registers); the one call's
// time is split at the direct path's own stamps.
#include <cuda_runtime.h>

#include <cstdio>
#include <optional>
#include <string>

// The executor's and the poll's own time stamps (gpuverbs/detail/probe.cuh): this tool's copy
// of the device code records clock64 at each of them; the library's copy has none.
// Each stamp adds the time since the previous one to its own slot (the interval that ends
// there), in shared memory: a stamp costs a shared load and store, not a global round trip,
// and a drain of many WQEs sums its per-WQE intervals. The probe's own cost per stamp is
// measured (two stamps back to back) and printed.
#define GV_EXEC_PROBE 1
__shared__ unsigned long long gv_probe_acc[32];
__shared__ unsigned long long gv_probe_prev;
__device__ __forceinline__ void gv_exec_probe_stamp(int i) {
    const unsigned long long t = clock64();
    gv_probe_acc[i] += t - gv_probe_prev;
    gv_probe_prev = clock64();
}

#include "bench_common.hpp"
#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"

using namespace gv;

enum { kRecv, kReserve, kBuild, kPublish, kDbrec, kExecute, kPoll, kPollRecv, kSteps };
const char* kStep[] = {"post receive on the peer (dev::recv; SEND only)", "reserve (sq_reserve_group)", "build WQE",
                       "publish (sq_publish_group)", "doorbell record (not on soft)", "execute (progress)",
                       "poll CQE (poll_cq)", "poll the peer's receive CQE (SEND only)"};
// --commit: the one call (dev::write with kCommit) in place of reserve .. execute, and inside it
// the direct path's stamps (the interval that ends at each; detail/soft/direct.cuh).
const char* kCommitStep = "post + commit in one call (dev::write, kCommit)";
struct CommitStamp {
    int slot;
    const char* label;
};
const CommitStamp kCommitInside[] = {
    {gv::detail::kStampEnter, "  call: direct_ok, WQE built in registers"},
    {gv::detail::kStampLocked, "  round A: config loads, position + lock RMWs (acquire)"},
    {gv::detail::kStampPublished, "  round B: sq_ci, state, peer, regions, retirement"},
    {gv::detail::kStampChecked, "  WQE stored to the ring, fast_run: decode"},
    {gv::detail::kStampLocal, "  fast_run: regions (cached), peer up"},
    {gv::detail::kStampRemote, "  fast_run: checks, bounds"},
    {gv::detail::kStampCopied, "  fast_run: copy (source load, store)"},
    {gv::detail::kStampFenced, "  fast_run: release fence"},
    {gv::detail::kStampCqe, "  fast_run: requester CQE"},
    {gv::detail::kStampFinished, "  fast_run: sq_ci"},
    {gv::detail::kStampUnlocked, "  publish (sq_ready), give the QP back (CAS)"},
    {gv::detail::kStampCount, "  return"},
};

// Inside execute and poll: the interval that ends at each stamp (detail::ExecStamp), and the
// last one of each step up to the step's end. In a drain of several WQEs the per-WQE stamps
// (kStampPublished .. kStampFinished) sum over its WQEs; "published" then also holds the
// step from one WQE's end to the next one's start.
using gv::detail::kStampCount;
const char* kInside[kStampCount + 2] = {
    "  execute: call",                        "  execute: ring (atomic add on the lock word)",
    "  execute: published count, state, config / next WQE", "  execute: read + check the WQE",
    "  execute: local memory region",         "  execute: peer memory region, plan (WRITE)",
    "  execute: peer's receive: view, claim, scatter (SEND)",
    "  execute: copy",                        "  execute: release fence",
    "  execute: peer's receive CQE (SEND)",   "  execute: requester CQE (slot, ci, write)",
    "  execute: sq_ci, error check",
    "  execute: drain's next look (nothing)", "  execute: give the QP back (CAS)",
    "  execute: (no re-check since the counting lock)",         "  poll: call",
    "  poll: consumer index, CQE ready, decode", "  poll: claim (CAS on ci)",
    "  poll: CQ doorbell record (not on soft)",             "  poll: retire the send queue's slots",
    "  execute: return",                      "  poll: return"};
static_assert(sizeof(kInside) / sizeof(kInside[0]) == kStampCount + 2, "a label for every stamp");

// Failures are recorded in *fail after the iteration's last stamp (the reservation's status
// and the completions polled): the timed steps are left as they were. `batch` WRITEs per
// iteration, to consecutive `size`-byte slots of dst; or (send) `batch` receives posted on peer
// (slots of dst, its lkey dlkey) and as many SENDs from consecutive slots of src.
__global__ void path_kernel(dev::QpHandle qp, dev::QpHandle peer, bool send, uint32_t size, uint8_t* src,
                            uint32_t lkey, uint64_t dst, uint32_t rkey, uint32_t dlkey, int n, int batch,
                            unsigned long long* acc, unsigned long long* inside, unsigned long long* stamp_cost,
                            gvbench::Failure* fail, bool commit) {
    using namespace gv::detail;
    unsigned long long sum[kSteps] = {};
    for (int k = 0; k < 32; ++k) gv_probe_acc[k] = 0;
    // The probe's own cost: two stamps back to back, many times (slot 31 is no step's).
    gv_probe_prev = clock64();
    for (int k = 0; k < 100; ++k) gv_exec_probe_stamp(31);
    *stamp_cost = gv_probe_acc[31] / 100;
    unsigned long long warm[kStampCount + 2] = {};
    for (int i = 0; i < n; ++i) {
        if (i == 10)
            for (int k = 0; k < kStampCount + 2; ++k) warm[k] = gv_probe_acc[k];
        unsigned long long tr = clock64();
        Status rv = Status::Ok;
        if (send)
            for (int b = 0; b < batch && rv == Status::Ok; ++b)
                rv = dev::recv(peer, reinterpret_cast<void*>(dst + uint64_t(size) * b), size, dlkey);
        unsigned long long t0 = clock64();
        dev::Reservation res;
        Status rs = Status::Ok;
        unsigned long long t1 = t0, t2 = t0, t3 = t0, t4 = t0, t5 = t0;
        if (commit) {
            // One call; its stamps (detail/soft/direct.cuh) split it from t0 on.
            gv_probe_prev = t0;
            rs = dev::write(qp, src, size, lkey, dst, rkey, kSignaled | kCommit);
            t5 = clock64();
            gv_probe_acc[kStampCount] += t5 - gv_probe_prev;
        } else {
            rs = dev::sq_reserve_group(qp, uint32_t(batch), &res, kWaitForever);
            t1 = clock64();
            for (int b = 0; b < batch; ++b) {
                Sge s{reinterpret_cast<uint64_t>(src + uint64_t(size) * b), size, lkey};
                dev::build_sge_wqe(qp, res.pos + b, send ? MLX5_OPCODE_SEND : MLX5_OPCODE_RDMA_WRITE,
                                   b == batch - 1 ? kSignaled : 0, 0, send ? 0 : dst + uint64_t(size) * b, send ? 0 : rkey,
                                   &s, 1);
            }
            t2 = clock64();
            dev::sq_publish_group(qp, res);
            t3 = clock64();
            // As dev::commit: the software device's committers do not move the record.
            if (detail::commit_moves_record(qp)) dev::sq_dbrec_to_published(qp);
            t4 = clock64();
            gv_probe_prev = t4;
            soft::progress(qp.soft.ctx, ThreadGroup{});
            t5 = clock64();
            gv_probe_acc[kStampCount] += t5 - gv_probe_prev;  // the last executor stamp to the return
        }
        Completion c;
        gv_probe_prev = clock64();
        while (dev::poll_cq(qp.scq, &c, 1) == 0) {
        }
        unsigned long long t6 = clock64();
        gv_probe_acc[kStampCount + 1] += t6 - gv_probe_prev;
        Completion rc{};
        int got = 0;
        if (send)
            while (got < batch) got += int(dev::poll_cq(peer.rcq, &rc, 1));
        unsigned long long t7 = clock64();
        if (rv != Status::Ok) {
            gvbench::record_failure(fail, gvbench::Step::PostRecv, 0, peer.q.qpn, i, rv);
            return;
        }
        if (rs != Status::Ok) {
            gvbench::record_failure(fail, gvbench::Step::Post, 0, qp.q.qpn, i, rs);
            return;
        }
        if (!c.ok()) {
            gvbench::record_failure(fail, gvbench::Step::WaitSend, 0, qp.q.qpn, i, Status::CompletionError, c);
            return;
        }
        if (send && (!rc.ok() || rc.byte_len != size)) {
            gvbench::record_failure(fail, gvbench::Step::WaitRecv, 0, peer.q.qpn, i, Status::CompletionError, rc);
            return;
        }
        if (i >= 10) {
            sum[kRecv] += t0 - tr, sum[kReserve] += t1 - t0, sum[kBuild] += t2 - t1, sum[kPublish] += t3 - t2;
            sum[kDbrec] += t4 - t3, sum[kExecute] += t5 - t4, sum[kPoll] += t6 - t5, sum[kPollRecv] += t7 - t6;
        }
    }
    for (int k = 0; k < kSteps; ++k) acc[k] = sum[k];
    // inside[k]: the interval that ends at stamp k (kStampEnter: from the doorbell record; the
    // poll's first, kStampPollEnter, also counts the executor's return; kStampCount and +1:
    // the last stamp of each step to its end).
    for (int k = 0; k < kStampCount + 2; ++k) inside[k] = gv_probe_acc[k] - warm[k];
}

const char* const kUsage =
    "usage: gv_probe_path [--op write|send] [--size N] [--peer-gpu N] [--batch N] [--commit]\n"
    "Where the time of one WRITE (or SEND) goes on the software device, step by step (reserve,\n"
    "build, publish, doorbell record, execute, poll), one CUDA thread on GPU 0, clock64. Needs a CUDA GPU.\n"
    "  --op OP        write (default) or send: each SEND's receive is posted on the peer first, and\n"
    "                 its receive completion polled last\n"
    "  --size N       bytes per WRITE or SEND (1 .. 4096, default 8)\n"
    "  --peer-gpu N   the responder QP and the target buffer on GPU N (1 .. 1023): a QP across GPUs\n"
    "  --batch N      N WQEs per iteration (1 .. 512), one doorbell, the last one signaled: one\n"
    "                 drain executes N WQEs (default 1); N x size at most 65536\n"
    "  --commit       each WRITE posted and committed in one call (kCommit: the direct path, for\n"
    "                 WRITEs of 1 .. 128 bytes, one per iteration, on one GPU), split at its steps\n"
    "  --help         this text\n"
    "Exit status: 0 measured, 1 failed (the reason on stderr), 2 bad usage.\n";

int main(int argc, char** argv) {
    return gvcli::run(argc, argv, kUsage, [](gvcli::Args& args) {
        int peer = -1;
        int batch = 1;
        uint32_t size = 8;
        bool send = false;
        bool commit = false;
        while (args.next()) {
            if (args.is("--peer-gpu")) peer = int(args.integer(1, 1023));
            else if (args.is("--batch")) batch = int(args.integer(1, 512));
            else if (args.is("--size")) size = uint32_t(args.integer(1, 4096));
            else if (args.is("--commit")) commit = true;
            else if (args.is("--op")) {
                const std::string op = args.value();
                if (op != "write" && op != "send")
                    throw gvcli::UsageError("--op: write or send, not '" + op + "'");
                send = op == "send";
            } else args.unknown();
        }
        if (uint64_t(batch) * size > 65536)
            throw gvcli::UsageError("--batch x --size: at most 65536 bytes per iteration, not " +
                                    std::to_string(uint64_t(batch) * size));
        if (commit && (send || batch != 1 || size > 128 || peer >= 0))
            throw gvcli::UsageError(
                "--commit probes the direct path: one WRITE of 1 .. 128 bytes per iteration on one GPU "
                "(not with --op send, --batch above 1, --size above 128 or --peer-gpu, which take the ordinary way)");
        gvbench::require_gpu();
        if (peer >= 0 && peer >= Context::gpu_count())
            throw gvcli::UsageError("--peer-gpu " + std::to_string(peer) + ": only " +
                                    std::to_string(Context::gpu_count()) + " GPU(s) visible");
        CUDA_CHECK(cudaSetDevice(0));
        Context ctx(ContextOptions{Backend::Soft, 0});
        ProtectionDomain pd(ctx);
        std::optional<Context> pctx;
        std::optional<ProtectionDomain> ppd;
        if (peer >= 0) {
            pctx.emplace(ContextOptions{Backend::Soft, peer});
            ppd.emplace(*pctx);
        }
        Context& bctx = peer >= 0 ? *pctx : ctx;
        ProtectionDomain& bpd = peer >= 0 ? *ppd : pd;
        CompletionQueue c0(ctx, {64}), c1(bctx, {64});
        QpOptions o;
        o.sq_depth = 1024;  // room for --batch's largest drain
        o.rq_depth = 1024;
        o.send_cq = o.recv_cq = &c0;
        QueuePair a(pd, o);
        o.send_cq = o.recv_cq = &c1;
        QueuePair b(bpd, o);
        a.connect(b.endpoint());
        b.connect(a.endpoint());
        constexpr size_t kBuf = 65536;
        gvbench::Buffer<uint8_t> src(kBuf);
        if (peer >= 0) CUDA_CHECK(cudaSetDevice(peer));
        gvbench::Buffer<uint8_t> dst(kBuf);
        CUDA_CHECK(cudaSetDevice(0));
        MemoryRegion ms(pd, src.get(), kBuf, kLocalWrite), md(bpd, dst.get(), kBuf, kAllAccess);
        gvbench::Buffer<unsigned long long> acc(kSteps, gvbench::Mem::Managed);
        gvbench::Buffer<unsigned long long> inside(kStampCount + 2, gvbench::Mem::Managed);
        gvbench::Buffer<unsigned long long> stamp_cost(1, gvbench::Mem::Managed);
        gvbench::Buffer<gvbench::Failure> fail(1);
        CUDA_CHECK(cudaMemset(fail.get(), 0, sizeof(gvbench::Failure)));
        CUDA_CHECK(cudaDeviceSynchronize());  // the buffers' setup lands before the kernel runs
        const int n = batch > 1 ? 410 : 2010;
        path_kernel<<<1, 1>>>(a.device_handle(), b.device_handle(), send, size, src.get(), ms.lkey(),
                              uint64_t(dst.get()), md.rkey(), md.lkey(), n, batch, acc.get(), inside.get(),
                              stamp_cost.get(), fail.get(), commit);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaDeviceSynchronize());
        const gvbench::Failure f = gvbench::read_failure(fail.get());
        if (f.count) throw Error("the probe kernel failed: " + gvbench::describe(f, send ? "SEND" : "WRITE"));
        int clk = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0));
        const double per_iter = double(n - 10) * (clk / 1e6);  // clock ticks -> ns per iteration
        double total = 0;
        const char* what = send ? "SEND" : "WRITE";
        std::printf("# gv_probe_path: one thread on GPU 0, %d %u-byte %s(s) per doorbell (the last signaled) to %s, "
                    "%d iterations (SM clock %d MHz); a probe stamp costs %.1f ns (included below)\n",
                    batch, size, what, peer >= 0 ? ("GPU " + std::to_string(peer)).c_str() : "the same GPU", n - 10,
                    clk / 1000, double(*stamp_cost.get()) / (clk / 1e6));
        std::printf("%-52s %12s %9s/%s\n", "step", "ns/doorbell", "ns", what);
        if (commit) {
            // The one call, split at the direct path's stamps; then the poll as below.
            const double call = double(acc.get()[kExecute]) / per_iter;
            std::printf("%-52s %12.1f %12.1f\n", kCommitStep, call, call);
            for (const CommitStamp& c : kCommitInside) {
                const double v = double(inside.get()[c.slot]) / per_iter;
                std::printf("%-52s %12.1f %12.1f\n", c.label, v, v);
            }
            total += call;
        }
        for (int k = 0; k < kSteps; ++k) {
            if (commit && k != kPoll) continue;
            if (!send && (k == kRecv || k == kPollRecv)) continue;
            double ns = double(acc.get()[k]) / per_iter;
            total += ns;
            std::printf("%-52s %12.1f %12.1f\n", kStep[k], ns, ns / batch);
            if (k == kExecute || k == kPoll) {
                const int first = k == kExecute ? gv::detail::kStampEnter : gv::detail::kStampPollEnter;
                const int last = k == kExecute ? gv::detail::kStampRechecked : gv::detail::kStampPollRetired;
                for (int j = first; j <= last + 1; ++j) {
                    const int slot = j <= last ? j : (k == kExecute ? kStampCount : kStampCount + 1);
                    const double v = double(inside.get()[slot]) / per_iter;
                    std::printf("%-52s %12.1f %12.1f\n", kInside[slot], v, v / batch);
                }
            }
        }
        std::printf("%-52s %12.1f %12.1f\n", "total", total, total / batch);
        return 0;
    });
}
