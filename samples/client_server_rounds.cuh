// The protocol of one round, written once for a CUDA block and a CPU thread: the
// patterns and immediates, the server's and the client's round, their kernels.
// Part of samples/client_server.cu (one translation unit: the helpers stay in its
// anonymous namespace).
#pragma once

namespace {

// ---- what travels: patterns and immediates --------------------------------------------------

enum Kind : uint32_t { kA = 1, kB = 2, kC = 3 };  // WRITE_IMM into A, SEND_IMM into B, READ of C

/// Byte i of round r's pattern for one buffer: every round and every buffer differ.
GV_HOST_DEVICE uint8_t pattern(uint32_t kind, uint32_t round, uint64_t i) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t(round) << 8) | kind) * 0xC2B2AE3D27D4EB4Full;
    return uint8_t(x >> 56);
}

/// Immediate data of the WRITE_IMM (kind kA) and the SEND_IMM (kB) of a round.
GV_HOST_DEVICE uint32_t imm_of(uint32_t kind, uint32_t round) { return (kind << 28) | round; }

constexpr uint32_t kMaxRounds = 1000000;  // rounds fit the immediate's low 28 bits
constexpr uint64_t kMaxSize = 256ull << 20;
constexpr int kThreads = 256;  // one block per round kernel

// ---- one round, for a CUDA block or a CPU thread --------------------------------------------

/// Where a round stopped (0: it completed) and why: filled by the group's leader.
enum Step : uint32_t {
    kDone = 0,
    kPostRecv,      // server: the two receives
    kPostFlag,      // server: inline WRITE of the go flag
    kCommit,        // either: the doorbell
    kWaitFlagSent,  // server: completion of the flag WRITE
    kWaitRecv,      // server: the two receive completions
    kRecvCheck,     // server: one receive completion is not what the client sent
    kPostRead,      // server: READ of the client's C
    kWaitRead,      // server: its completion
    kWaitFlag,      // client: the go flag
    kPost,          // client: WRITE_IMM, SEND_IMM or READ (index 0, 1, 2)
    kWaitSends,     // client: their three completions
    kSendCheck,     // client: one of them failed
    kRoundHung,     // host: the round did not finish in time (a wait that is not bounded?)
    kPeerLeft,      // host: the peer closed the connection during the round
};

/// What went wrong in a check: the field, what was expected and what came.
enum Field : uint32_t { kNoField = 0, kStatus, kOpcode, kImm, kByteLen };

struct RoundResult {
    uint32_t step;
    int32_t status;   // gv::Status of the failed call
    uint32_t index;   // which completion or post
    uint32_t polled;  // completions that came before a timeout
    uint32_t field;   // Field of a failed check
    uint32_t pad;
    uint64_t expected;  // ... and the values compared (also the flag: expected round, read value)
    uint64_t got;
};

struct ServerJob {
    dev::QpHandle qp;
    uint8_t* b;  // receive buffer B (shared): the SEND_IMM lands here
    uint32_t b_lkey;
    uint8_t* d;  // READ destination D (private)
    uint32_t d_lkey;
    RemoteBuffer flag;  // the client's go flag
    RemoteBuffer c;     // the client's buffer C
    uint32_t size;
    uint64_t timeout_ns;
};

struct ClientJob {
    dev::QpHandle qp;
    unsigned long long* flag;  // our go flag (shared): the server WRITEs the round number here
    uint8_t* src;              // private: pattern A at [0, size), pattern B at [size, 2 size)
    uint32_t src_lkey;
    uint8_t* c;     // shared: the server READs it
    uint8_t* back;  // private: our READ of the server's A lands here
    uint32_t back_lkey;
    RemoteBuffer a;  // the server's buffer A
    uint32_t size;
    uint64_t timeout_ns;
};

/// A CPU thread alone.
struct CpuGroup {
    GV_HOST_DEVICE bool lead() const { return true; }
    GV_HOST_DEVICE void sync() const {}
    GV_HOST_DEVICE uint32_t rank() const { return 0; }
    GV_HOST_DEVICE uint32_t size() const { return 1; }
    GV_HOST_DEVICE Status commit(const dev::QpHandle& qp) const { return dev::commit(qp); }
    /// Our stores before the WQEs that tell the peer to read them.
    GV_HOST_DEVICE void fence() const {
#if !GV_DEVICE_CODE
        std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
    }
};

#if defined(__CUDACC__)
/// One CUDA block: thread 0 posts and waits, every thread fills buffers and takes part in
/// the doorbell (the software device then executes the WQEs with the whole block).
struct BlockGroup {
    GV_HOST_DEVICE bool lead() const {
#if GV_DEVICE_CODE
        return threadIdx.x == 0;
#else
        return true;
#endif
    }
    GV_HOST_DEVICE void sync() const {
#if GV_DEVICE_CODE
        __syncthreads();
#endif
    }
    GV_HOST_DEVICE uint32_t rank() const {
#if GV_DEVICE_CODE
        return threadIdx.x;
#else
        return 0;
#endif
    }
    GV_HOST_DEVICE uint32_t size() const {
#if GV_DEVICE_CODE
        return blockDim.x;
#else
        return 1;
#endif
    }
    GV_HOST_DEVICE Status commit(const dev::QpHandle& qp) const {
#if GV_DEVICE_CODE
        return dev::commit<Scope::Block>(qp);
#else
        return dev::commit(qp);
#endif
    }
    GV_HOST_DEVICE void fence() const {
#if GV_DEVICE_CODE
        __threadfence_system();
#endif
    }
};
#endif

GV_HOST_DEVICE void fail(RoundResult* out, uint32_t step, Status st, uint32_t index = 0,
                         uint32_t polled = 0) {
    out->step = step;
    out->status = int32_t(st);
    out->index = index;
    out->polled = polled;
}

/// Records which value was wrong (after fail()).
GV_HOST_DEVICE void found(RoundResult* out, uint32_t field, uint64_t expected, uint64_t got) {
    out->field = field;
    out->expected = expected;
    out->got = got;
}

GV_HOST_DEVICE void mismatch(RoundResult* out, uint32_t step, uint32_t index, uint32_t field,
                             uint64_t expected, uint64_t got) {
    fail(out, step, Status::Ok, index);
    found(out, field, expected, got);
}

/// Checks a receive completion against what the client posted; false (and *out) if it differs.
GV_HOST_DEVICE bool check_recv(const Completion& c, uint32_t index, uint8_t opcode, uint32_t imm,
                               uint32_t len, RoundResult* out) {
    if (c.status != 0) mismatch(out, kRecvCheck, index, kStatus, 0, c.status);
    else if (c.cqe_opcode != opcode) mismatch(out, kRecvCheck, index, kOpcode, opcode, c.cqe_opcode);
    else if (c.imm != imm) mismatch(out, kRecvCheck, index, kImm, imm, c.imm);
    else if (c.byte_len != len) mismatch(out, kRecvCheck, index, kByteLen, len, c.byte_len);
    else return true;
    return false;
}

/// The server's part of round r.
template <class G>
GV_HOST_DEVICE void server_round(const G& g, const ServerJob& j, uint32_t r, RoundResult* out) {
    const dev::QpHandle& qp = j.qp;
    if (g.lead()) {
        *out = RoundResult{};
        // The WRITE_IMM consumes a receive too, but its data goes to the address it names:
        // that receive needs no buffer. The SEND_IMM's lands in B.
        Status st = dev::post_recv(qp, nullptr, 0, j.timeout_ns);
        if (st == Status::Ok) st = dev::recv(qp, j.b, j.size, j.b_lkey, j.timeout_ns);
        if (st != Status::Ok) {
            fail(out, kPostRecv, st);
        } else {
            // Both receives are posted: let the client go. Its WRITE_IMM and SEND_IMM find
            // them (one not yet visible to the peer would make the SEND wait and retry, as the
            // RNR rules say, not fail).
            const unsigned long long flag = r;
            st = dev::write_inline(qp, &flag, sizeof flag, j.flag.addr, j.flag.rkey, kSignaled, j.timeout_ns);
            if (st != Status::Ok) fail(out, kPostFlag, st);
        }
    }
    g.sync();
    if (out->step) return;
    Status cs = g.commit(qp);
    if (g.lead()) {
        Completion c[2];
        uint32_t polled = 0;
        Status st;
        if (cs != Status::Ok) {
            fail(out, kCommit, cs);
        } else if ((st = dev::wait_send(qp, 1, c, j.timeout_ns, &polled)) != Status::Ok) {
            fail(out, kWaitFlagSent, st, 0, polled);
            if (st == Status::CompletionError) found(out, kStatus, 0, c[0].status);
        } else if ((st = dev::wait_recv(qp, 2, c, j.timeout_ns, &polled)) != Status::Ok &&
                   st != Status::CompletionError) {
            fail(out, kWaitRecv, st, 0, polled);
        } else if (check_recv(c[0], 0, MLX5_CQE_RESP_WR_IMM, imm_of(kA, r), j.size, out) &&
                   check_recv(c[1], 1, MLX5_CQE_RESP_SEND_IMM, imm_of(kB, r), j.size, out)) {
            st = dev::read(qp, j.d, j.size, j.d_lkey, j.c.addr, j.c.rkey, kSignaled, j.timeout_ns);
            if (st != Status::Ok) fail(out, kPostRead, st);
        }
    }
    g.sync();
    if (out->step) return;
    cs = g.commit(qp);
    if (g.lead()) {
        Completion c[1];
        uint32_t polled = 0;
        Status st;
        if (cs != Status::Ok) {
            fail(out, kCommit, cs);
        } else if ((st = dev::wait_send(qp, 1, c, j.timeout_ns, &polled)) != Status::Ok) {
            fail(out, kWaitRead, st, 0, polled);
            if (st == Status::CompletionError) found(out, kStatus, 0, c[0].status);
        }
    }
}

/// The client's part of round r.
template <class G>
GV_HOST_DEVICE void client_round(const G& g, const ClientJob& j, uint32_t r, RoundResult* out) {
    const dev::QpHandle& qp = j.qp;
    if (g.lead()) {
        *out = RoundResult{};
        // The server's executor writes the flag; system scope: it runs in another process.
        // No completion tells us when the server is gone, but our QP goes to ERROR then (the
        // library watches the peer process): stop at once rather than at the timeout.
        const uint64_t start = atom::now_ns();
        uint32_t spins = 0;
        unsigned long long v;
        while ((v = atom::load_acquire(j.flag, true)) != r) {
            const bool error = dev::qp_in_error(qp);
            if (error || atom::now_ns() - start > j.timeout_ns) {
                fail(out, kWaitFlag, error ? Status::QpError : Status::Timeout);
                found(out, kNoField, r, v);
                break;
            }
            dev::spin_pause(spins, 1024);
        }
    }
    g.sync();
    if (out->step) return;
    for (uint64_t i = g.rank(); i < j.size; i += g.size()) {
        j.src[i] = pattern(kA, r, i);
        j.src[j.size + i] = pattern(kB, r, i);
        j.c[i] = pattern(kC, r, i);
    }
    // C must be visible to the server's executor (another process) before it READs C, which
    // it does once our SEND_IMM arrived.
    g.fence();
    g.sync();
    if (g.lead()) {
        Status st = dev::write_imm(qp, j.src, j.size, j.src_lkey, j.a.addr, j.a.rkey, imm_of(kA, r),
                                   kSignaled, j.timeout_ns);
        if (st != Status::Ok) {
            fail(out, kPost, st, 0);
        } else if ((st = dev::send_imm(qp, j.src + j.size, j.size, j.src_lkey, imm_of(kB, r), kSignaled,
                                       j.timeout_ns)) != Status::Ok) {
            fail(out, kPost, st, 1);
        } else if ((st = dev::read(qp, j.back, j.size, j.back_lkey, j.a.addr, j.a.rkey, kSignaled,
                                   j.timeout_ns)) != Status::Ok) {
            fail(out, kPost, st, 2);
        }
    }
    g.sync();
    if (out->step) return;
    Status cs = g.commit(qp);  // one doorbell for the three WQEs
    if (g.lead()) {
        Completion c[3];
        uint32_t polled = 0;
        Status st;
        if (cs != Status::Ok) {
            fail(out, kCommit, cs);
        } else if ((st = dev::wait_send(qp, 3, c, j.timeout_ns, &polled)) != Status::Ok) {
            if (st != Status::CompletionError) {
                fail(out, kWaitSends, st, 0, polled);
            } else {
                for (uint32_t i = 0; i < 3; ++i)
                    if (c[i].status != 0) {
                        fail(out, kSendCheck, st, i);
                        found(out, kStatus, 0, c[i].status);
                        break;
                    }
            }
        }
    }
}

#if defined(__CUDACC__)
__global__ void server_kernel(ServerJob j, uint32_t r, RoundResult* out) {
    server_round(BlockGroup{}, j, r, out);
}
__global__ void client_kernel(ClientJob j, uint32_t r, RoundResult* out) {
    client_round(BlockGroup{}, j, r, out);
}
void launch(const ServerJob& j, uint32_t r, RoundResult* out) { server_kernel<<<1, kThreads>>>(j, r, out); }
void launch(const ClientJob& j, uint32_t r, RoundResult* out) { client_kernel<<<1, kThreads>>>(j, r, out); }
#endif
void run_cpu(const ServerJob& j, uint32_t r, RoundResult* out) { server_round(CpuGroup{}, j, r, out); }
void run_cpu(const ClientJob& j, uint32_t r, RoundResult* out) { client_round(CpuGroup{}, j, r, out); }

}  // namespace
