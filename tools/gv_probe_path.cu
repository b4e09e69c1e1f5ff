// gv_probe_path: where the time of one WRITE goes, posted and waited for by a single CUDA
// thread on the software device (clock64 around each step, averaged). The steps are the
// library's own functions, in the order dev::write + dev::commit + dev::wait_send run them.
// --peer-gpu N: the responder QP and the target buffer on GPU N (a cross-GPU QP: its executor
// on GPU 0 reaches the peer's QP state, queues and memory over NVLink, with system-scope
// fences), the steps timed on GPU 0 as before.
// --batch N: each iteration posts N 8-byte WRITEs (the last one signaled) with one reservation,
// one publication and one doorbell, so that one drain executes N WQEs: the executor's steps
// are then per WQE of a long drain (what bounds one QP's message rate), not of a lone WRITE.
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

enum { kReserve, kBuild, kPublish, kDbrec, kExecute, kPoll, kSteps };
const char* kStep[] = {"reserve (sq_reserve_group)", "build WQE", "publish (sq_publish_group)",
                       "doorbell record (not on soft)", "execute (progress)", "poll CQE (poll_cq)"};
// Inside execute and poll: the interval that ends at each stamp (detail::ExecStamp), and the
// last one of each step up to the step's end. In a drain of several WQEs the per-WQE stamps
// (kStampPublished .. kStampFinished) sum over its WQEs; "published" then also holds the
// step from one WQE's end to the next one's start.
using gv::detail::kStampCount;
const char* kInside[kStampCount + 2] = {
    "  execute: call",                        "  execute: ring (atomic add on the lock word)",
    "  execute: published count, state, config / next WQE", "  execute: read + check the WQE",
    "  execute: local memory region",         "  execute: peer memory region, plan",
    "  execute: copy 8 bytes",                "  execute: release fence",
    "  execute: requester CQE (slot, ci, write)", "  execute: sq_ci, error check",
    "  execute: drain's next look (nothing)", "  execute: give the QP back (CAS)",
    "  execute: (no re-check since the counting lock)",         "  poll: call",
    "  poll: consumer index, CQE ready, decode", "  poll: claim (CAS on ci)",
    "  poll: CQ doorbell record (not on soft)",             "  poll: retire the send queue's slots",
    "  execute: return",                      "  poll: return"};

// Failures are recorded in *fail after the iteration's last stamp (the reservation's status
// and the completion polled): the timed steps are left as they were. `batch` WRITEs per
// iteration, to consecutive 8-byte slots of dst.
__global__ void path_kernel(dev::QpHandle qp, uint8_t* src, uint32_t lkey, uint64_t dst, uint32_t rkey, int n,
                            int batch, unsigned long long* acc, unsigned long long* inside,
                            unsigned long long* stamp_cost, gvbench::Failure* fail) {
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
        unsigned long long t0 = clock64();
        dev::Reservation res;
        const Status rs = dev::sq_reserve_group(qp, uint32_t(batch), &res, kWaitForever);
        unsigned long long t1 = clock64();
        for (int b = 0; b < batch; ++b) {
            Sge s{reinterpret_cast<uint64_t>(src + 8 * b), 8, lkey};
            dev::build_sge_wqe(qp, res.pos + b, MLX5_OPCODE_RDMA_WRITE, b == batch - 1 ? kSignaled : 0, 0,
                               dst + 8 * b, rkey, &s, 1);
        }
        unsigned long long t2 = clock64();
        dev::sq_publish_group(qp, res);
        unsigned long long t3 = clock64();
        // As dev::commit: the software device's committers do not move the record.
        if (detail::commit_moves_record(qp)) dev::sq_dbrec_to_published(qp);
        unsigned long long t4 = clock64();
        gv_probe_prev = t4;
        soft::progress(qp.soft.ctx, ThreadGroup{});
        unsigned long long t5 = clock64();
        gv_probe_acc[kStampCount] += t5 - gv_probe_prev;  // the last executor stamp to the return
        Completion c;
        gv_probe_prev = clock64();
        while (dev::poll_cq(qp.scq, &c, 1) == 0) {
        }
        unsigned long long t6 = clock64();
        gv_probe_acc[kStampCount + 1] += t6 - gv_probe_prev;
        if (rs != Status::Ok) {
            gvbench::record_failure(fail, gvbench::Step::Post, 0, qp.q.qpn, i, rs);
            return;
        }
        if (!c.ok()) {
            gvbench::record_failure(fail, gvbench::Step::WaitSend, 0, qp.q.qpn, i, Status::CompletionError, c);
            return;
        }
        if (i >= 10) {
            sum[0] += t1 - t0, sum[1] += t2 - t1, sum[2] += t3 - t2;
            sum[3] += t4 - t3, sum[4] += t5 - t4, sum[5] += t6 - t5;
        }
    }
    for (int k = 0; k < kSteps; ++k) acc[k] = sum[k];
    // inside[k]: the interval that ends at stamp k (kStampEnter: from the doorbell record; the
    // poll's first, kStampPollEnter, also counts the executor's return; kStampCount and +1:
    // the last stamp of each step to its end).
    for (int k = 0; k < kStampCount + 2; ++k) inside[k] = gv_probe_acc[k] - warm[k];
}

const char* const kUsage =
    "usage: gv_probe_path [--peer-gpu N] [--batch N]\n"
    "Where the time of one WRITE goes on the software device, step by step (reserve, build,\n"
    "publish, doorbell record, execute, poll), one CUDA thread on GPU 0, clock64. Needs a CUDA GPU.\n"
    "  --peer-gpu N   the responder QP and the target buffer on GPU N (1 .. 1023): a QP across GPUs\n"
    "  --batch N      N WRITEs per iteration (1 .. 512), one doorbell, the last one signaled: one\n"
    "                 drain executes N WQEs (default 1)\n"
    "  --help         this text\n"
    "Exit status: 0 measured, 1 failed (the reason on stderr), 2 bad usage.\n";

int main(int argc, char** argv) {
    return gvcli::run(argc, argv, kUsage, [](gvcli::Args& args) {
        int peer = -1;
        int batch = 1;
        while (args.next()) {
            if (args.is("--peer-gpu")) peer = int(args.integer(1, 1023));
            else if (args.is("--batch")) batch = int(args.integer(1, 512));
            else args.unknown();
        }
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
        o.send_cq = o.recv_cq = &c0;
        QueuePair a(pd, o);
        o.send_cq = o.recv_cq = &c1;
        QueuePair b(bpd, o);
        a.connect(b.endpoint());
        b.connect(a.endpoint());
        gvbench::Buffer<uint8_t> src(4096);
        if (peer >= 0) CUDA_CHECK(cudaSetDevice(peer));
        gvbench::Buffer<uint8_t> dst(4096);
        CUDA_CHECK(cudaSetDevice(0));
        MemoryRegion ms(pd, src.get(), 4096, kLocalWrite), md(bpd, dst.get(), 4096, kAllAccess);
        gvbench::Buffer<unsigned long long> acc(kSteps, gvbench::Mem::Managed);
        gvbench::Buffer<unsigned long long> inside(kStampCount + 2, gvbench::Mem::Managed);
        gvbench::Buffer<unsigned long long> stamp_cost(1, gvbench::Mem::Managed);
        gvbench::Buffer<gvbench::Failure> fail(1);
        CUDA_CHECK(cudaMemset(fail.get(), 0, sizeof(gvbench::Failure)));
        CUDA_CHECK(cudaDeviceSynchronize());  // the buffers' setup lands before the kernel runs
        const int n = batch > 1 ? 410 : 2010;
        path_kernel<<<1, 1>>>(a.device_handle(), src.get(), ms.lkey(), uint64_t(dst.get()), md.rkey(), n, batch,
                              acc.get(), inside.get(), stamp_cost.get(), fail.get());
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaDeviceSynchronize());
        const gvbench::Failure f = gvbench::read_failure(fail.get());
        if (f.count) throw Error("the probe kernel failed: " + gvbench::describe(f, "WRITE"));
        int clk = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0));
        const double per_iter = double(n - 10) * (clk / 1e6);  // clock ticks -> ns per iteration
        double total = 0;
        std::printf("# gv_probe_path: one thread on GPU 0, %d 8-byte WRITE(s) per doorbell (the last signaled) to %s, "
                    "%d iterations (SM clock %d MHz); a probe stamp costs %.1f ns (included below)\n",
                    batch, peer >= 0 ? ("GPU " + std::to_string(peer)).c_str() : "the same GPU", n - 10, clk / 1000,
                    double(*stamp_cost.get()) / (clk / 1e6));
        std::printf("%-52s %12s %12s\n", "step", "ns/doorbell", "ns/WRITE");
        for (int k = 0; k < kSteps; ++k) {
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
