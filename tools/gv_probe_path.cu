// gv_probe_path: where the time of one WRITE goes, posted and waited for by a single CUDA
// thread on the software device (clock64 around each step, averaged). The steps are the
// library's own functions, in the order dev::write + dev::commit + dev::wait_send run them.
// --peer-gpu N: the responder QP and the target buffer on GPU N (a cross-GPU QP: its executor
// on GPU 0 reaches the peer's QP state, queues and memory over NVLink, with system-scope
// fences), the steps timed on GPU 0 as before.
#include <cuda_runtime.h>

#include <cstdio>
#include <optional>
#include <string>

// The executor's and the poll's own time stamps (gpuverbs/detail/probe.cuh): this tool's copy
// of the device code records clock64 at each of them; the library's copy has none.
#define GV_EXEC_PROBE 1
__device__ unsigned long long gv_probe_stamps[32];
__device__ __forceinline__ void gv_exec_probe_stamp(int i) { gv_probe_stamps[i] = clock64(); }

#include "bench_common.hpp"
#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"

using namespace gv;

enum { kReserve, kBuild, kPublish, kDbrec, kExecute, kPoll, kSteps };
const char* kStep[] = {"reserve (sq_reserve_group)", "build WQE", "publish (sq_publish_group)",
                       "doorbell record (commit)", "execute (progress)", "poll CQE (poll_cq)"};
// Inside execute and poll: the intervals between consecutive stamps (detail::ExecStamp), the
// last one of each up to the step's end.
using gv::detail::kStampCount;
const char* kInside[kStampCount] = {
    "  execute: hand-off fence + lock CAS",   "  execute: doorbell record, state, config",
    "  execute: read + check the WQE",        "  execute: local memory region",
    "  execute: peer memory region, plan",    "  execute: copy 8 bytes",
    "  execute: release fence",               "  execute: requester CQE (slot, ci, write)",
    "  execute: sq_ci, error check",          "  execute: drain's next look (nothing)",
    "  execute: unlock + hand-off fence",     "  execute: re-check (has_work)",
    "  execute: return",                      "  poll: consumer index, CQE ready, decode",
    "  poll: claim (CAS on ci)",              "  poll: CQ doorbell record",
    "  poll: retire the send queue's slots",  "  poll: return"};

// Failures are recorded in *fail after the iteration's last stamp (the reservation's status
// and the completion polled): the timed steps are left as they were.
__global__ void path_kernel(dev::QpHandle qp, uint8_t* src, uint32_t lkey, uint64_t dst, uint32_t rkey, int n,
                            unsigned long long* acc, unsigned long long* inside, gvbench::Failure* fail) {
    unsigned long long sum[kSteps] = {};
    unsigned long long in[kStampCount] = {};
    for (int i = 0; i < n; ++i) {
        unsigned long long t0 = clock64();
        dev::Reservation res;
        const Status rs = dev::sq_reserve_group(qp, 1, &res, kWaitForever);
        unsigned long long t1 = clock64();
        Sge s{reinterpret_cast<uint64_t>(src), 8, lkey};
        dev::build_sge_wqe(qp, res.pos, MLX5_OPCODE_RDMA_WRITE, kSignaled, 0, dst, rkey, &s, 1);
        unsigned long long t2 = clock64();
        dev::sq_publish_group(qp, res);
        unsigned long long t3 = clock64();
        dev::sq_update_dbrec(qp, atom::load_acquire(&qp.q.ctr->sq_ready));
        unsigned long long t4 = clock64();
        gv::detail::soft::progress(qp.soft.ctx, gv::detail::ThreadGroup{});
        unsigned long long t5 = clock64();
        Completion c;
        while (dev::poll_cq(qp.scq, &c, 1) == 0) {
        }
        unsigned long long t6 = clock64();
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
            using namespace gv::detail;
            for (int k = kStampEnter; k < kStampRechecked; ++k) in[k] += gv_probe_stamps[k + 1] - gv_probe_stamps[k];
            in[kStampRechecked] += t5 - gv_probe_stamps[kStampRechecked];
            for (int k = kStampPollEnter; k < kStampPollRetired; ++k)
                in[k] += gv_probe_stamps[k + 1] - gv_probe_stamps[k];
            in[kStampPollRetired] += t6 - gv_probe_stamps[kStampPollRetired];
        }
    }
    for (int k = 0; k < kSteps; ++k) acc[k] = sum[k];
    for (int k = 0; k < kStampCount; ++k) inside[k] = in[k];
}

const char* const kUsage =
    "usage: gv_probe_path [--peer-gpu N]\n"
    "Where the time of one WRITE goes on the software device, step by step (reserve, build,\n"
    "publish, doorbell record, execute, poll), one CUDA thread on GPU 0, clock64. Needs a CUDA GPU.\n"
    "  --peer-gpu N   the responder QP and the target buffer on GPU N (1 .. 1023): a QP across GPUs\n"
    "  --help         this text\n"
    "Exit status: 0 measured, 1 failed (the reason on stderr), 2 bad usage.\n";

int main(int argc, char** argv) {
    return gvcli::run(argc, argv, kUsage, [](gvcli::Args& args) {
        int peer = -1;
        while (args.next()) {
            if (args.is("--peer-gpu")) peer = int(args.integer(1, 1023));
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
        gvbench::Buffer<unsigned long long> inside(kStampCount, gvbench::Mem::Managed);
        gvbench::Buffer<gvbench::Failure> fail(1);
        CUDA_CHECK(cudaMemset(fail.get(), 0, sizeof(gvbench::Failure)));
        const int n = 2010;
        path_kernel<<<1, 1>>>(a.device_handle(), src.get(), ms.lkey(), uint64_t(dst.get()), md.rkey(), n,
                              acc.get(), inside.get(), fail.get());
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaDeviceSynchronize());
        const gvbench::Failure f = gvbench::read_failure(fail.get());
        if (f.count) throw Error("the probe kernel failed: " + gvbench::describe(f, "WRITE"));
        int clk = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0));
        double total = 0;
        std::printf("# gv_probe_path: one thread on GPU 0, 8-byte signaled WRITE to %s, %d iterations (SM clock %d MHz)\n",
                    peer >= 0 ? ("GPU " + std::to_string(peer)).c_str() : "the same GPU", n - 10, clk / 1000);
        for (int k = 0; k < kSteps; ++k) {
            double ns = double(acc.get()[k]) / (n - 10) / (clk / 1e6);
            total += ns;
            std::printf("%-30s %10.1f ns\n", kStep[k], ns);
            if (k == kExecute || k == kPoll) {
                const int first = k == kExecute ? gv::detail::kStampEnter : gv::detail::kStampPollEnter;
                const int last = k == kExecute ? gv::detail::kStampRechecked : gv::detail::kStampPollRetired;
                for (int j = first; j <= last; ++j)
                    std::printf("%-42s %10.1f ns\n", kInside[j], double(inside.get()[j]) / (n - 10) / (clk / 1e6));
            }
        }
        std::printf("%-30s %10.1f ns\n", "total", total);
        return 0;
    });
}
