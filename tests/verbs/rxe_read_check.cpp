// gv_rxe_read_check: plain libibverbs, no gpuverbs code. Two RC QPs, one on each of two RDMA
// devices of this host (rxe_a and rxe_b of tests/verbs/rxe_hosts.sh), each round posting an RDMA
// WRITE and then an RDMA READ of SIZE bytes to the other at the same time, then checking every
// byte that each WRITE and each READ put in place.
//
// Why it exists: Soft-RoCE (rdma_rxe) of Linux 6.1 can complete a READ with IBV_WC_SUCCESS while
// part of its data never landed, when its packets are dropped on their way out of the sending
// host (the "rdma_rxe: Failed sending ..." lines of dmesg). The real-verbs tier checks with this
// program that the VM's network does not drop that way (RdmaVm.rxe_read_check), and
// GV_RXE_NETEM (tests/verbs/rxe_hosts.sh) reproduces the kernel's fault: docs/verbs.md.
//
//   gv_rxe_read_check [SIZE [ROUNDS]]     defaults 1 MiB, 20 rounds
//
// Exit status: 0 every byte right, 1 a completion failed or data is wrong (each one printed),
// 2 the set-up failed (which step).
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

[[noreturn]] void setup_failed(const std::string& what) {
    std::fprintf(stderr, "gv_rxe_read_check: %s\n", what.c_str());
    std::exit(2);
}

// Byte i of a buffer's content in round r; `which` tells the four buffers of a round apart.
uint8_t pattern(uint32_t round, uint32_t which, uint64_t i) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t(round) * 8 + which + 1) * 0xC2B2AE3D27D4EB4Full;
    return uint8_t(x >> 56);
}

constexpr uint8_t kFill = 0xe7;  // what a destination holds before its round
constexpr int kWrite = 0, kWriteDst = 1, kReadSrc = 2, kReadDst = 3;  // the four buffers of a side

struct Side {
    const char* name;
    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    ibv_cq* cq = nullptr;
    ibv_qp* qp = nullptr;
    ibv_mr* mr = nullptr;
    uint8_t* mem = nullptr;  // the four buffers, one after the other
    union ibv_gid gid;
    int gid_index = -1;
    uint8_t* buf(int which, size_t size) const { return mem + size_t(which) * size; }
};

void open_side(Side& s, const char* dev, const char* ipv4, size_t size) {
    s.name = dev;
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    for (int i = 0; list && i < n; ++i)
        if (std::strcmp(ibv_get_device_name(list[i]), dev) == 0) s.ctx = ibv_open_device(list[i]);
    if (list) ibv_free_device_list(list);
    if (!s.ctx)
        setup_failed(std::string("no RDMA device named ") + dev + " (tests/verbs/rxe_hosts.sh makes it)");
    in_addr addr{};
    if (inet_pton(AF_INET, ipv4, &addr) != 1) setup_failed(std::string("bad IPv4 address ") + ipv4);
    for (int g = 0; g < 32 && s.gid_index < 0; ++g) {  // the IPv4-mapped GID of the address (RoCE v2)
        union ibv_gid gid;
        if (ibv_query_gid(s.ctx, 1, g, &gid) != 0) continue;
        static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (std::memcmp(gid.raw, v4_prefix, 12) == 0 && std::memcmp(gid.raw + 12, &addr, 4) == 0) {
            s.gid = gid;
            s.gid_index = g;
        }
    }
    if (s.gid_index < 0) setup_failed(std::string(dev) + " has no GID for " + ipv4);
    s.pd = ibv_alloc_pd(s.ctx);
    s.cq = s.pd ? ibv_create_cq(s.ctx, 16, nullptr, nullptr, 0) : nullptr;
    ibv_qp_init_attr qa{};
    qa.send_cq = qa.recv_cq = s.cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = qa.cap.max_recv_wr = 8;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    s.qp = s.cq ? ibv_create_qp(s.pd, &qa) : nullptr;
    s.mem = static_cast<uint8_t*>(std::aligned_alloc(4096, 4 * size));
    s.mr = s.qp && s.mem
               ? ibv_reg_mr(s.pd, s.mem, 4 * size,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE)
               : nullptr;
    if (!s.mr)
        setup_failed(std::string("PD, CQ, QP or MR of ") + dev +
                     " could not be made: " + std::strerror(errno));
}

// INIT -> RTR -> RTS towards the peer's QP, as the verbs backend connects its QPs (16 reads in
// flight each way, retries on).
void connect(Side& s, const Side& peer) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(s.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        setup_failed(std::string(s.name) + ": QP to INIT failed");
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = peer.qp->qp_num;
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = peer.gid;
    a.ah_attr.grh.sgid_index = uint8_t(s.gid_index);
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(s.qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        setup_failed(std::string(s.name) + ": QP to RTR failed");
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 16;
    if (ibv_modify_qp(s.qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC))
        setup_failed(std::string(s.name) + ": QP to RTS failed");
}

// Compares a buffer with its pattern; prints what differs. True when every byte is right.
bool check(const char* what, const Side& s, const uint8_t* got, size_t size, uint32_t round, uint32_t which) {
    size_t first = size, last = 0, diff = 0, fill = 0;
    for (size_t i = 0; i < size; ++i)
        if (got[i] != pattern(round, which, i)) {
            if (first == size) first = i;
            last = i;
            ++diff;
            fill += got[i] == kFill;
        }
    if (diff)
        std::printf(
            "round %u, %s: %s completed successfully, but %zu of %zu bytes are wrong (offsets %zu to %zu; "
            "%zu of them still hold the fill 0x%02x of before the round)\n",
            round, s.name, what, diff, size, first, last, fill, kFill);
    return diff == 0;
}

}  // namespace

int main(int argc, char** argv) {
    const size_t size = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : size_t(1) << 20;
    const uint32_t rounds = argc > 2 ? uint32_t(std::strtoul(argv[2], nullptr, 0)) : 20;
    if (size == 0 || size > (size_t(1) << 30) || rounds == 0)
        setup_failed("usage: gv_rxe_read_check [SIZE (1 byte to 1 GiB) [ROUNDS (at least 1)]]");
    Side sides[2];
    open_side(sides[0], "rxe_a", "10.1.0.1", size);
    open_side(sides[1], "rxe_b", "10.1.0.2", size);
    connect(sides[0], sides[1]);
    connect(sides[1], sides[0]);

    uint32_t wrong = 0;
    for (uint32_t r = 0; r < rounds; ++r) {
        // Side k's WRITE source is pattern k, its READ source pattern 2 + k; destinations hold the fill.
        for (int k = 0; k < 2; ++k) {
            for (size_t i = 0; i < size; ++i) {
                sides[k].buf(kWrite, size)[i] = pattern(r, k, i);
                sides[k].buf(kReadSrc, size)[i] = pattern(r, 2 + k, i);
            }
            std::memset(sides[k].buf(kWriteDst, size), kFill, size);
            std::memset(sides[k].buf(kReadDst, size), kFill, size);
        }
        for (int k = 0; k < 2; ++k) {  // both sides post before either polls: traffic both ways
            Side& me = sides[k];
            const Side& peer = sides[1 - k];
            ibv_sge wsge{uintptr_t(me.buf(kWrite, size)), uint32_t(size), me.mr->lkey};
            ibv_sge rsge{uintptr_t(me.buf(kReadDst, size)), uint32_t(size), me.mr->lkey};
            ibv_send_wr read{}, write{}, *bad = nullptr;
            read.wr_id = kReadDst;
            read.sg_list = &rsge;
            read.num_sge = 1;
            read.opcode = IBV_WR_RDMA_READ;
            read.send_flags = IBV_SEND_SIGNALED;
            read.wr.rdma.remote_addr = uintptr_t(peer.buf(kReadSrc, size));
            read.wr.rdma.rkey = peer.mr->rkey;
            write = read;
            write.wr_id = kWrite;
            write.sg_list = &wsge;
            write.opcode = IBV_WR_RDMA_WRITE;
            write.wr.rdma.remote_addr = uintptr_t(peer.buf(kWriteDst, size));
            write.next = &read;
            if (int e = ibv_post_send(me.qp, &write, &bad))
                setup_failed(std::string(me.name) + ": ibv_post_send failed: " + std::strerror(e));
        }
        int completions[2] = {0, 0};
        bool failed = false;
        const auto start = std::chrono::steady_clock::now();
        while (completions[0] < 2 || completions[1] < 2) {
            for (int k = 0; k < 2; ++k) {
                ibv_wc wc{};
                if (ibv_poll_cq(sides[k].cq, 1, &wc) != 1) continue;
                ++completions[k];
                const char* what = wc.wr_id == kWrite ? "its WRITE" : "its READ";
                if (wc.status != IBV_WC_SUCCESS) {
                    std::printf("round %u, %s: %s completed with %s\n", r, sides[k].name, what,
                                ibv_wc_status_str(wc.status));
                    failed = true;
                } else if (wc.wr_id == kReadDst && !check(what, sides[k], sides[k].buf(kReadDst, size), size,
                                                          r, uint32_t(2 + (1 - k)))) {
                    ++wrong;
                }
            }
            if (std::chrono::steady_clock::now() - start > std::chrono::seconds(60)) {
                std::printf("round %u: %d and %d of the 2 completions of each side came in 60 s\n", r,
                            completions[0], completions[1]);
                return 1;
            }
        }
        if (failed) return 1;        // the QPs are in error: later rounds would only flush
        for (int k = 0; k < 2; ++k)  // each side's WRITE landed at the other
            if (!check("the peer's WRITE into it", sides[k], sides[k].buf(kWriteDst, size), size, r,
                       uint32_t(1 - k)))
                ++wrong;
    }
    std::printf(
        "gv_rxe_read_check: %u rounds of a %zu-byte WRITE and READ each way between rxe_a and rxe_b: %s\n",
        rounds, size, wrong ? "DATA WRONG (above)" : "every byte right");
    return wrong ? 1 : 0;
}
