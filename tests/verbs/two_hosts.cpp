// gv_verbs_two_hosts: one side of the two-"host" test (tests/verbs/two_hosts.sh runs a server
// and a client, each on its own rxe device). The sides swap QP and memory records over
// gv::oob, connect RC QPs, and run WRITE, READ, SEND (both ways) and atomics between them;
// each side checks every byte it can see, and the server reports what it found to the client
// over the channel. Every wait is bounded; exit 0 = all checked. Two APIs:
//   --api control   the verbs control layer and ibv_post_send directly (the default)
//   --api gpuverbs  gpuverbs objects of Backend::Verbs (Context, QueuePair, MemoryRegion) and
//                   the gv::dev calls a kernel makes, executed by the proxy thread
//
//   gv_verbs_two_hosts --role server|client --device NAME --address IP [--port N]
//                      [--gid-index N] [--timeout-ms N] [--api control|gpuverbs]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpuverbs/device.cuh"
#include "gpuverbs/gpuverbs.hpp"
#include "gpuverbs/oob.hpp"
#include "verbs/verbs.hpp"

namespace v = gv::detail::verbs;

namespace {

// Buffer layout, the same on both sides.
constexpr size_t kBlock = 16384;
constexpr size_t kSrc = 0;              // this side's pattern: the peer READs it, we WRITE from it
constexpr size_t kWritten = kBlock;     // the peer WRITEs its pattern here (client -> server);
                                        // the client READs the server's pattern here
constexpr size_t kRecv = 2 * kBlock;    // receive buffer for the peer's SEND
constexpr size_t kSendLen = 3000;
constexpr size_t kCounter = 3 * kBlock;  // u64 the client fetch-adds on the server
constexpr size_t kTotal = 3 * kBlock + 64;
constexpr uint64_t kCounterStart = 100;

uint8_t pattern(char side, size_t i) { return uint8_t((side == 's' ? 0x31 : 0x77) + i * 13 + (i >> 9)); }

struct Options {
    std::string role, device, address, api = "control";
    uint16_t port = 18515;
    int gid_index = -1;
    int timeout_ms = 30000;
};

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "gv_verbs_two_hosts: %s\nusage: gv_verbs_two_hosts --role server|client --device NAME "
                 "--address IP [--port N] [--gid-index N] [--timeout-ms N]\n",
                 why);
    std::exit(2);
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (i + 1 >= argc) usage(("missing value of " + a).c_str());
        std::string val = argv[++i];
        if (a == "--role") o.role = val;
        else if (a == "--device") o.device = val;
        else if (a == "--address") o.address = val;
        else if (a == "--port") o.port = uint16_t(std::atoi(val.c_str()));
        else if (a == "--gid-index") o.gid_index = std::atoi(val.c_str());
        else if (a == "--timeout-ms") o.timeout_ms = std::atoi(val.c_str());
        else if (a == "--api") o.api = val;
        else usage(("unknown option " + a).c_str());
    }
    if (o.role != "server" && o.role != "client") usage("--role must be server or client");
    if (o.device.empty() || o.address.empty()) usage("--device and --address are required");
    if (o.api != "control" && o.api != "gpuverbs") usage("--api must be control or gpuverbs");
    return o;
}

void check(bool ok, const std::string& what) {
    if (!ok) throw std::runtime_error(what);
}

ibv_wc expect_completion(v::Cq& cq, ibv_wc_opcode op, int timeout_ms, const char* what) {
    ibv_wc wc = cq.wait_one(timeout_ms);
    check(wc.status == IBV_WC_SUCCESS, std::string(what) + ": completion " + v::wc_status_name(wc.status) +
                                           " (syndrome " + v::syndrome_name(v::wc_status_to_syndrome(wc.status)) + ")");
    check(wc.opcode == op, std::string(what) + ": completion opcode " + std::to_string(wc.opcode) + ", expected " +
                               std::to_string(op));
    return wc;
}

void post_send(v::RcQp& qp, ibv_send_wr& wr, const char* what) {
    ibv_send_wr* bad = nullptr;
    int rc = ibv_post_send(qp.get(), &wr, &bad);
    check(rc == 0, std::string("ibv_post_send(") + what + ") failed: " + v::errno_text(rc));
}

std::string first_difference(const uint8_t* got, char side, size_t off, size_t n) {
    for (size_t i = 0; i < n; ++i)
        if (got[i] != pattern(side, off + i))
            return "byte " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " +
                   std::to_string(pattern(side, off + i));
    return "";
}

std::string text(const std::vector<uint8_t>& m) { return std::string(m.begin(), m.end()); }
std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

int run(const Options& o) {
    const bool server = o.role == "server";
    const char me = server ? 's' : 'c', peer_side = server ? 'c' : 's';
    v::Device dev(o.device);
    v::Pd pd(dev);
    v::Cq cq(dev, 64);
    v::QpConfig cfg;
    cfg.sq_depth = 32;
    cfg.rq_depth = 32;
    cfg.gid_index = o.gid_index;
    v::RcQp qp(dev, pd, cq, cq, cfg);
    std::vector<uint8_t> buf(kTotal, 0);
    for (size_t i = 0; i < kBlock; ++i) buf[kSrc + i] = pattern(me, i);
    uint64_t counter = server ? kCounterStart : 0;
    std::memcpy(&buf[kCounter], &counter, 8);
    v::Mr mr = v::Mr::host(pd, buf.data(), buf.size(),
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                               IBV_ACCESS_REMOTE_ATOMIC);
    const uint64_t base = reinterpret_cast<uintptr_t>(buf.data());

    gv::oob::Channel ch;
    if (server) {
        gv::oob::Listener l = gv::oob::Channel::listen(o.port, o.address);
        ch = l.accept(o.timeout_ms);
    } else {
        ch = gv::oob::Channel::connect(o.address, o.port, o.timeout_ms);
    }
    gv::RemoteBuffer mine{base, kTotal, mr.rkey(), gv::kAllAccess};
    gv::oob::Exchanged ex = ch.exchange(gv::Backend::Verbs, {qp.endpoint()}, {mine}, o.timeout_ms);
    check(ex.qps.size() == 1 && ex.buffers.size() == 1, "the peer sent other than one QP and one buffer");
    const gv::QpEndpoint& pe = ex.qps[0];
    const gv::RemoteBuffer& rb = ex.buffers[0];
    std::printf("%s: %s qpn 0x%x gid %s  <->  peer %s qpn 0x%x gid %s mtu %u\n", o.role.c_str(), dev.name().c_str(),
                qp.qpn(), v::gid_to_string(qp.path().sgid.gid).c_str(), pe.device.c_str(), pe.qpn,
                v::gid_to_string(pe.gid).c_str(), pe.mtu);
    check(pe.device != dev.name(), "the peer uses the same device " + dev.name() + ": not two hosts");
    qp.connect(pe);
    // The receive for the peer's SEND, posted before the peer hears 'ready' (verbs takes
    // receives from INIT on; rxe refuses them in RESET with EINVAL).
    ibv_sge rsge{base + kRecv, uint32_t(kBlock), mr.lkey()};
    ibv_recv_wr rwr{};
    rwr.wr_id = 100;
    rwr.sg_list = &rsge;
    rwr.num_sge = 1;
    ibv_recv_wr* rbad = nullptr;
    int rc = ibv_post_recv(qp.get(), &rwr, &rbad);
    check(rc == 0, "ibv_post_recv failed: " + v::errno_text(rc));

    // Both sides in RTS before any traffic.
    ch.send_message(bytes("ready"), o.timeout_ms);
    check(text(ch.recv_message(o.timeout_ms)) == "ready", "the peer did not say ready");

    // SEND both ways.
    ibv_sge ssge{base + kSrc, uint32_t(kSendLen), mr.lkey()};
    ibv_send_wr swr{};
    swr.wr_id = 1;
    swr.opcode = IBV_WR_SEND;
    swr.sg_list = &ssge;
    swr.num_sge = 1;
    swr.send_flags = IBV_SEND_SIGNALED;
    post_send(qp, swr, "SEND");
    // Our SEND's and the peer's SEND's completions share the CQ in either order.
    std::vector<ibv_wc> two = cq.wait(2, o.timeout_ms);
    if (two[0].opcode == IBV_WC_RECV) std::swap(two[0], two[1]);
    ibv_wc rwc = two[1];
    for (const ibv_wc& wc : two)
        check(wc.status == IBV_WC_SUCCESS, std::string("SEND/RECV: completion ") + v::wc_status_name(wc.status));
    check(two[0].opcode == IBV_WC_SEND && rwc.opcode == IBV_WC_RECV,
          "SEND/RECV: completions of opcodes " + std::to_string(two[0].opcode) + " and " + std::to_string(rwc.opcode));
    check(rwc.byte_len == kSendLen, "RECV of " + std::to_string(rwc.byte_len) + " bytes, expected " +
                                        std::to_string(kSendLen));
    std::string d = first_difference(&buf[kRecv], peer_side, 0, kSendLen);
    check(d.empty(), "the peer's SEND: " + d);
    std::printf("%s: SEND/RECV %zu bytes both ways: ok\n", o.role.c_str(), kSendLen);

    if (server) {
        // Wait for the client's WRITE, READ and atomics, then check what arrived here.
        std::string m = text(ch.recv_message(o.timeout_ms));
        check(m == "client-done", "the client said '" + m + "'");
        std::string verdict = "ok";
        d = first_difference(&buf[kWritten], 'c', 0, kBlock);
        if (!d.empty()) verdict = "WRITE: " + d;
        std::memcpy(&counter, &buf[kCounter], 8);
        if (verdict == "ok" && counter != kCounterStart + 10)
            verdict = "fetch-add: counter " + std::to_string(counter) + ", expected " + std::to_string(kCounterStart + 10);
        if (verdict == "ok") {
            d = first_difference(&buf[kSrc], 's', 0, kBlock);  // READ must not have changed it
            if (!d.empty()) verdict = "source after READ: " + d;
        }
        ch.send_message(bytes(verdict), o.timeout_ms);
        check(verdict == "ok", verdict);
        std::printf("server: the client's WRITE (%zu bytes) and 2 fetch-adds (counter %llu) verified\n", kBlock,
                    static_cast<unsigned long long>(counter));
    } else {
        // WRITE our pattern into the server's kWritten block.
        ibv_sge wsge{base + kSrc, uint32_t(kBlock), mr.lkey()};
        ibv_send_wr w{};
        w.wr_id = 2;
        w.opcode = IBV_WR_RDMA_WRITE;
        w.sg_list = &wsge;
        w.num_sge = 1;
        w.send_flags = IBV_SEND_SIGNALED;
        w.wr.rdma.remote_addr = rb.addr + kWritten;
        w.wr.rdma.rkey = rb.rkey;
        post_send(qp, w, "WRITE");
        expect_completion(cq, IBV_WC_RDMA_WRITE, o.timeout_ms, "WRITE");
        // READ the server's pattern into our kWritten block.
        ibv_sge rdsge{base + kWritten, uint32_t(kBlock), mr.lkey()};
        ibv_send_wr r = w;
        r.wr_id = 3;
        r.opcode = IBV_WR_RDMA_READ;
        r.sg_list = &rdsge;
        r.wr.rdma.remote_addr = rb.addr + kSrc;
        post_send(qp, r, "READ");
        expect_completion(cq, IBV_WC_RDMA_READ, o.timeout_ms, "READ");
        d = first_difference(&buf[kWritten], 's', 0, kBlock);
        check(d.empty(), "READ of the server's block: " + d);
        std::printf("client: WRITE %zu bytes, READ %zu bytes: ok\n", kBlock, kBlock);
        // Two fetch-adds of 5 on the server's counter.
        for (uint64_t k = 0; k < 2; ++k) {
            ibv_sge asge{base + kCounter + 8, 8, mr.lkey()};
            ibv_send_wr a{};
            a.wr_id = 4 + k;
            a.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
            a.sg_list = &asge;
            a.num_sge = 1;
            a.send_flags = IBV_SEND_SIGNALED;
            a.wr.atomic.remote_addr = rb.addr + kCounter;
            a.wr.atomic.rkey = rb.rkey;
            a.wr.atomic.compare_add = 5;
            post_send(qp, a, "fetch-add");
            expect_completion(cq, IBV_WC_FETCH_ADD, o.timeout_ms, "fetch-add");
            uint64_t old = 0;
            std::memcpy(&old, &buf[kCounter + 8], 8);
            check(old == kCounterStart + 5 * k, "fetch-add returned " + std::to_string(old) + ", expected " +
                                                    std::to_string(kCounterStart + 5 * k));
        }
        std::printf("client: fetch-add x2: ok\n");
        ch.send_message(bytes("client-done"), o.timeout_ms);
        std::string verdict = text(ch.recv_message(o.timeout_ms));
        check(verdict == "ok", "the server found: " + verdict);
    }
    std::printf("%s: PASS\n", o.role.c_str());
    return 0;
}

// ---- the same through gpuverbs: Backend::Verbs and the gv::dev calls ----------------------

constexpr size_t kPut = 3 * kBlock + 64;  // put-with-signal's data (client -> server)
constexpr size_t kPutLen = 512;
constexpr size_t kTotalGv = kPut + kPutLen;

/// Waits for one completion of the QP's send or receive CQ and expects success.
gv::Completion wait_one(const gv::dev::QpHandle& h, bool recv, int timeout_ms, const char* what) {
    gv::Completion c{};
    const uint64_t ns = uint64_t(timeout_ms) * 1000000ull;
    const gv::Status st = recv ? gv::dev::wait_recv(h, 1, &c, ns) : gv::dev::wait_send(h, 1, &c, ns);
    check(st == gv::Status::Ok, std::string(what) + ": " + gv::status_name(st) + " (" + gv::mlx5::syndrome_name(c.status) + ")");
    return c;
}

void commit(const gv::dev::QpHandle& h, const char* what) {
    const gv::Status st = gv::dev::commit(h);
    check(st == gv::Status::Ok, std::string(what) + ": commit returned " + gv::status_name(st));
}

int run_gpuverbs(const Options& o) {
    const bool server = o.role == "server";
    const char me = server ? 's' : 'c', peer_side = server ? 'c' : 's';
    gv::ContextOptions co;
    co.backend = gv::Backend::Verbs;
    co.gpu = -1;
    co.device = o.device;
    co.verbs.gid_index = o.gid_index;
    gv::Context ctx(co);
    gv::ProtectionDomain pd(ctx);
    gv::CompletionQueue scq(ctx, gv::CqOptions{256}), rcq(ctx, gv::CqOptions{256});
    gv::QpOptions qo;
    qo.send_cq = &scq;
    qo.recv_cq = &rcq;
    qo.sq_depth = 64;
    qo.rq_depth = 16;
    gv::QueuePair qp(pd, qo);
    std::vector<uint8_t> buf(kTotalGv, 0);
    for (size_t i = 0; i < kBlock; ++i) buf[kSrc + i] = pattern(me, i);
    uint64_t counter = server ? kCounterStart : 0;
    std::memcpy(&buf[kCounter], &counter, 8);
    gv::MemoryRegion mr(pd, buf.data(), buf.size(), gv::kAllAccess);
    const uint64_t base = reinterpret_cast<uintptr_t>(buf.data());

    gv::oob::Channel ch;
    if (server) {
        gv::oob::Listener l = gv::oob::Channel::listen(o.port, o.address);
        ch = l.accept(o.timeout_ms);
    } else {
        ch = gv::oob::Channel::connect(o.address, o.port, o.timeout_ms);
    }
    gv::oob::Exchanged ex = ch.exchange(gv::Backend::Verbs, {qp.endpoint()}, {mr.remote()}, o.timeout_ms);
    check(ex.qps.size() == 1 && ex.buffers.size() == 1, "the peer sent other than one QP and one buffer");
    const gv::QpEndpoint& pe = ex.qps[0];
    const gv::RemoteBuffer& rb = ex.buffers[0];
    std::printf("%s (gpuverbs): %s qpn 0x%x  <->  peer %s qpn 0x%x psn 0x%x\n", o.role.c_str(), ctx.name().c_str(),
                qp.qpn(), pe.device.c_str(), pe.qpn, pe.psn);
    check(pe.device != ctx.name(), "the peer uses the same device " + ctx.name() + ": not two hosts");
    check(ctx.backend() == gv::Backend::Verbs && pe.backend == gv::Backend::Verbs, "not a verbs pair");
    qp.connect(pe);
    const gv::dev::QpHandle h = qp.device_handle();
    // The receive for the peer's SEND, posted before the peer hears 'ready' (the proxy posts it
    // to the device as soon as it sees it; it takes receives from INIT on).
    check(gv::dev::recv(h, &buf[kRecv], uint32_t(kBlock), mr.lkey()) == gv::Status::Ok, "posting the receive");
    ch.send_message(bytes("ready"), o.timeout_ms);
    check(text(ch.recv_message(o.timeout_ms)) == "ready", "the peer did not say ready");

    check(gv::dev::send(h, &buf[kSrc], uint32_t(kSendLen), mr.lkey()) == gv::Status::Ok, "posting the SEND");
    commit(h, "SEND");
    wait_one(h, false, o.timeout_ms, "SEND");
    gv::Completion rc = wait_one(h, true, o.timeout_ms, "the peer's SEND");
    check(rc.cqe_opcode == MLX5_CQE_RESP_SEND && rc.byte_len == kSendLen,
          "RECV completion of opcode " + std::to_string(rc.cqe_opcode) + ", " + std::to_string(rc.byte_len) + " bytes");
    std::string d = first_difference(&buf[kRecv], peer_side, 0, kSendLen);
    check(d.empty(), "the peer's SEND: " + d);
    std::printf("%s (gpuverbs): SEND/RECV %zu bytes both ways: ok\n", o.role.c_str(), kSendLen);

    const uint64_t expect_counter = kCounterStart + 10;  // two fetch-adds of 5
    if (server) {
        std::string m = text(ch.recv_message(o.timeout_ms));
        check(m == "client-done", "the client said '" + m + "'");
        std::string verdict = "ok";
        d = first_difference(&buf[kWritten], 'c', 0, kBlock);
        if (!d.empty()) verdict = "WRITE: " + d;
        std::memcpy(&counter, &buf[kCounter], 8);
        // fetch-add 5 twice, compare-swap (expected value) to 1000, put-with-signal adds 1.
        if (verdict == "ok" && counter != 1001)
            verdict = "atomics: counter " + std::to_string(counter) + ", expected 1001";
        if (verdict == "ok") {
            d = first_difference(&buf[kPut], 'c', 100, kPutLen);
            if (!d.empty()) verdict = "put-with-signal's data: " + d;
        }
        if (verdict == "ok") {
            d = first_difference(&buf[kSrc], 's', 0, kBlock);
            if (!d.empty()) verdict = "source after READ: " + d;
        }
        ch.send_message(bytes(verdict), o.timeout_ms);
        check(verdict == "ok", verdict);
        std::printf("server (gpuverbs): the client's WRITE, fetch-adds, compare-swap and put-with-signal verified\n");
    } else {
        check(gv::dev::write(h, &buf[kSrc], uint32_t(kBlock), mr.lkey(), rb.addr + kWritten, rb.rkey) == gv::Status::Ok,
              "posting the WRITE");
        commit(h, "WRITE");
        wait_one(h, false, o.timeout_ms, "WRITE");
        check(gv::dev::read(h, &buf[kWritten], uint32_t(kBlock), mr.lkey(), rb.addr + kSrc, rb.rkey) == gv::Status::Ok,
              "posting the READ");
        commit(h, "READ");
        wait_one(h, false, o.timeout_ms, "READ");
        d = first_difference(&buf[kWritten], 's', 0, kBlock);
        check(d.empty(), "READ of the server's block: " + d);
        std::printf("client (gpuverbs): WRITE %zu bytes, READ %zu bytes: ok\n", kBlock, kBlock);
        auto* old = reinterpret_cast<uint64_t*>(&buf[kCounter + 8]);
        for (uint64_t k = 0; k < 2; ++k) {
            check(gv::dev::fetch_add(h, old, mr.lkey(), rb.addr + kCounter, rb.rkey, 5) == gv::Status::Ok, "fetch-add");
            commit(h, "fetch-add");
            wait_one(h, false, o.timeout_ms, "fetch-add");
            check(*old == kCounterStart + 5 * k, "fetch-add returned " + std::to_string(*old));
        }
        check(gv::dev::compare_swap(h, old, mr.lkey(), rb.addr + kCounter, rb.rkey, expect_counter, 1000) ==
                  gv::Status::Ok,
              "compare-swap");
        commit(h, "compare-swap");
        wait_one(h, false, o.timeout_ms, "compare-swap");
        check(*old == expect_counter, "compare-swap returned " + std::to_string(*old));
        // Put with signal: the data, then the signal word's fetch-add, in order.
        check(gv::dev::put_signal(h, &buf[kSrc + 100], uint32_t(kPutLen), mr.lkey(), rb.addr + kPut, rb.rkey, old,
                                  mr.lkey(), rb.addr + kCounter, rb.rkey, 1) == gv::Status::Ok,
              "put-with-signal");
        commit(h, "put-with-signal");
        wait_one(h, false, o.timeout_ms, "put-with-signal");
        check(*old == 1000, "put-with-signal's fetch-add returned " + std::to_string(*old));
        std::printf("client (gpuverbs): fetch-add x2, compare-swap, put-with-signal: ok\n");
        ch.send_message(bytes("client-done"), o.timeout_ms);
        std::string verdict = text(ch.recv_message(o.timeout_ms));
        check(verdict == "ok", "the server found: " + verdict);
    }
    std::printf("%s (gpuverbs): PASS\n", o.role.c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options o = parse(argc, argv);
    alarm(unsigned(o.timeout_ms / 1000 * 3 + 10));  // never outlive a broken peer
    try {
        if (o.api == "gpuverbs") return run_gpuverbs(o);
        return run(o);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: FAIL: %s\n", o.role.c_str(), e.what());
        return 1;
    }
}
