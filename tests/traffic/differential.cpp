// gv_differential: the differential check of the software device against a real RDMA device.
//
// Runs one list of operation sequences, good and bad ones (wrong rkey, out of bounds, missing
// access, misaligned atomics, a receive too small or with a bad key, a SEND without a receive
// until the RNR retries run out, a QP not ready, a responder not ready, operations after an
// error), on one backend instance of the traffic suite (tests/traffic/traffic_env.hpp: the same
// scripts, the same gv::dev calls), and writes what came out as one JSON object per case:
// the requester's and the responder's completions (opcode and status, in order; the byte count
// of receives), both QPs' states afterwards (QueuePair::state(): on the verbs backend the
// device's own, ibv_query_qp), what commit returned where that is deterministic, and how every
// buffer changed. tests/traffic/differential.py compares two such files (the software device's
// and rxe's, recorded in the same VM run by tests/traffic/differential.sh) and prints the table.
//
//   gv_differential --backend soft|verbs [--out FILE] [--case SUBSTRING]
//
// verbs: Backend::Verbs on RDMA_DEVICE (RDMA_GID_INDEX), as the traffic suite's verbs
// instance. Nothing here asserts what the outcome should be: the traffic suite does that
// against the mlx5 rules; this records, and the comparison says where two devices differ.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "traffic/traffic_env.hpp"
#include "traffic/traffic_verbs.hpp"

using namespace gvtest::traffic;

namespace {

constexpr uint64_t kShort = 2'000 * kMs;  ///< bound of a wait for completions that should come
constexpr size_t kBuf = 8192;

/// Accept whatever status the call returns: the outcome is recorded, not asserted.
StepId any(Script& s, StepRef r) {
    const StepId id = r;
    s.at(id).expect_also = ~0u;
    return id;
}

std::string json_str(const std::string& s) {
    std::string o = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') o += '\\';
        o += c;
    }
    return o + "\"";
}

const char* wqe_op(uint8_t op) {
    switch (op) {
        case MLX5_OPCODE_RDMA_WRITE: return "WRITE";
        case MLX5_OPCODE_RDMA_WRITE_IMM: return "WRITE_IMM";
        case MLX5_OPCODE_RDMA_READ: return "READ";
        case MLX5_OPCODE_SEND: return "SEND";
        case MLX5_OPCODE_SEND_IMM: return "SEND_IMM";
        case MLX5_OPCODE_ATOMIC_FA: return "FETCH_ADD";
        case MLX5_OPCODE_ATOMIC_CS: return "CMP_SWAP";
        case MLX5_OPCODE_NOP: return "NOP";
        default: return "OP?";
    }
}

/// "WRITE:OK", "READ:WR_FLUSH_ERR" (requester); "RECV:OK:100", "RECV:LOCAL_LENGTH_ERR"
/// (responder; WRITE_IMM's receive: "RECV_WR_IMM:OK:0").
std::string cqe_text(const gv::Completion& c, bool recv) {
    std::string s;
    if (recv) {
        s = c.cqe_opcode == MLX5_CQE_RESP_WR_IMM ? "RECV_WR_IMM" : "RECV";
    } else {
        s = wqe_op(c.wqe_opcode);
        // A flushed WQE's opcode is not part of what a device must report (rxe reports the
        // work request's, ConnectX the WQE's): the status is what is compared.
        if (c.status == MLX5_CQE_SYNDROME_WR_FLUSH_ERR) s = "WQE";
    }
    s += ":";
    s += c.ok() ? "OK" : gv::mlx5::syndrome_name(c.status);
    if (recv && c.ok()) s += ":" + std::to_string(c.byte_len);
    return s;
}

/// How a buffer changed against its first contents: "same", or "changed [a,b]" (first and
/// last changed byte) with a digest of the changed range.
std::string change_of(const std::vector<uint8_t>& before, const std::vector<uint8_t>& after) {
    long first = -1, last = -1;
    for (size_t i = 0; i < after.size(); ++i)
        if (after[i] != before[i]) {
            if (first < 0) first = long(i);
            last = long(i);
        }
    if (first < 0) return "same";
    uint32_t h = 2166136261u;
    for (long i = first; i <= last; ++i) h = (h ^ after[size_t(i)]) * 16777619u;
    char d[64];
    std::snprintf(d, sizeof d, "changed [%ld,%ld] fnv %08x", first, last, h);
    return d;
}

/// One case's world: a pair, three buffers (src random, dst and back guard bytes), and the
/// record of what happened.
struct World {
    World(const Instance& inst, const PairConfig& cfg)
        : e(inst, cfg),
          src(e.buffer(kBuf, gv::kLocalWrite)),
          dst(e.buffer(kBuf, gv::kAllAccess)),
          back(e.buffer(kBuf, gv::kLocalWrite)),
          src0(src.randomize(31)),
          dst0(dst.download()),
          back0(back.download()) {}
    TrafficEnv e;
    Buffer &src, &dst, &back;
    std::vector<uint8_t> src0, dst0, back0;
    std::vector<std::string> req, resp, commits;
    void add(const RunResult& r, StepId id, bool recv) {
        for (const gv::Completion& c : r.cqes(id)) (recv ? resp : req).push_back(cqe_text(c, recv));
    }
    /// Runs the script; a run that did not complete (a step's status unexpected) ends the case.
    RunResult run(const Script& s) {
        RunResult r = e.run(s);
        if (!r.ok()) throw std::runtime_error(r.report());
        return r;
    }
};

/// A case: its name, the pair's configuration, and what it does.
struct Case {
    std::string name;
    std::function<PairConfig()> config;
    std::function<void(World&)> body;
};

PairConfig plain() {
    PairConfig c;
    c.cq_depth = 64;
    return c;
}

/// A 256-byte WRITE and a NOP behind it, one commit, and the requester's two completions
/// (within `wait`) recorded: what the requester sees when its responder cannot take the WRITE.
void write_then_nop(World& w, uint64_t wait) {
    Script s;
    s.use(0).write(w.src.addr(), 256, w.src.lkey(), w.dst.addr(0), w.dst.rkey());
    s.nop();
    any(s, s.commit());
    StepId ws = any(s, s.wait_send(2, wait));
    w.add(w.run(s), ws, false);
}

/// The common shape of a bad-request case: `before` (the responder's receives, n_recv of
/// them), a good signaled WRITE, the bad WQE, a signaled WRITE behind it, one commit; the
/// requester's completions (3 expected); a NOP posted after the error; then the responder's
/// completions (n_recv expected) and a WRITE the responder posts afterwards (its completion).
void bad_request(World& w, const std::function<void(Script&)>& before, uint32_t n_recv,
                 const std::function<void(Script&)>& bad, uint64_t wait = kShort) {
    Script s;
    if (before) {
        before(s);
        // Where a proxy posts the receives, give it time to reach the device first.
        if (!w.e.instance().commit_executes) s.spin(50 * kMs);
    }
    s.use(0).write(w.src.addr(0), 256, w.src.lkey(), w.dst.addr(0), w.dst.rkey());
    bad(s);
    s.use(0).write(w.src.addr(512), 64, w.src.lkey(), w.dst.addr(512), w.dst.rkey());
    any(s, s.commit());
    StepId ws = any(s, s.wait_send(3, wait));
    s.nop();
    any(s, s.commit());
    StepId wn = any(s, s.wait_send(1, kShort));
    StepId wr{};
    if (n_recv) wr = any(s, s.use(1).wait_recv(n_recv, kShort));
    StepId xs = any(s, s.use(0).poll_send(4));
    StepId xr = any(s, s.use(1).poll_recv(4));
    // The responder's own work afterwards (a NOP: local, no peer needed): flushed where the
    // responder is in ERROR, completed where it is not.
    s.use(1).nop();
    any(s, s.commit());
    StepId wa = any(s, s.wait_send(1, kShort));
    RunResult r = w.run(s);
    w.add(r, ws, false);
    w.add(r, wn, false);
    w.add(r, xs, false);
    if (n_recv) w.add(r, wr, true);
    w.add(r, xr, true);
    for (const gv::Completion& c : r.cqes(wa)) w.resp.push_back("after: " + cqe_text(c, false));
    if (r.cqes(wa).empty()) w.resp.push_back("after: none");
}

std::vector<Case> cases() {
    std::vector<Case> v;
    auto none = std::function<void(Script&)>();
    v.push_back({"good write, read, send", plain, [](World& w) {
                     Script s;
                     s.use(1).recv(w.back.addr(0), 1024, w.back.lkey());
                     s.use(0).write(w.src.addr(0), 256, w.src.lkey(), w.dst.addr(0), w.dst.rkey());
                     s.read(w.back.addr(2048), 128, w.back.lkey(), w.dst.addr(0), w.dst.rkey());
                     s.send(w.src.addr(1024), 100, w.src.lkey());
                     s.fetch_add(w.back.addr(3072), w.back.lkey(), w.dst.addr(1024), w.dst.rkey(), 3);
                     s.commit();
                     StepId ws = any(s, s.wait_send(4, kShort));
                     StepId wr = any(s, s.use(1).wait_recv(1, kShort));
                     RunResult r = w.run(s);
                     w.add(r, ws, false);
                     w.add(r, wr, true);
                 }});
    auto recv1 = [](World* w) {
        return [w](Script& s) { s.use(1).recv(w->back.addr(0), 1024, w->back.lkey()); };
    };
    struct Bad {
        const char* name;
        std::function<PairConfig()> cfg;
        std::function<void(World&, Script&)> bad;
    };
    const std::vector<Bad> bads = {
        {"write, wrong rkey", plain,
         [](World& w, Script& s) { s.use(0).write(w.src.addr(), 256, w.src.lkey(), w.dst.addr(1024), w.dst.rkey() ^ 0x80); }},
        {"write_imm, wrong rkey", plain,
         [](World& w, Script& s) {
             s.use(0).write_imm(w.src.addr(), 256, w.src.lkey(), w.dst.addr(1024), w.dst.rkey() ^ 0x80, 7);
         }},
        {"read, wrong rkey", plain,
         [](World& w, Script& s) { s.use(0).read(w.back.addr(2048), 256, w.back.lkey(), w.dst.addr(1024), 0u); }},
        {"write past the region's end", plain,
         [](World& w, Script& s) { s.use(0).write(w.src.addr(), 256, w.src.lkey(), w.dst.addr(kBuf - 128), w.dst.rkey()); }},
        {"read past the region's end", plain,
         [](World& w, Script& s) { s.use(0).read(w.back.addr(2048), 256, w.back.lkey(), w.dst.addr(kBuf - 128), w.dst.rkey()); }},
        {"write, region without remote write", plain,
         [](World& w, Script& s) {
             const auto& m = w.e.region(w.dst, 0, kBuf, gv::kLocalWrite | gv::kRemoteRead | gv::kRemoteAtomic);
             s.use(0).write(w.src.addr(), 256, w.src.lkey(), w.dst.addr(1024), m.rkey());
         }},
        {"read, responder QP without remote read",
         [] {
             PairConfig c = plain();
             c.responder_init.access = gv::kRemoteWrite | gv::kRemoteAtomic;
             return c;
         },
         [](World& w, Script& s) { s.use(0).read(w.back.addr(2048), 256, w.back.lkey(), w.dst.addr(1024), w.dst.rkey()); }},
        {"fetch-add, responder QP without remote atomic",
         [] {
             PairConfig c = plain();
             c.responder_init.access = gv::kRemoteWrite | gv::kRemoteRead;
             return c;
         },
         [](World& w, Script& s) { s.use(0).fetch_add(w.back.addr(2048), w.back.lkey(), w.dst.addr(1024), w.dst.rkey(), 1); }},
        {"fetch-add, misaligned", plain,
         [](World& w, Script& s) { s.use(0).fetch_add(w.back.addr(2048), w.back.lkey(), w.dst.addr(1028), w.dst.rkey(), 1); }},
        {"compare-swap, misaligned", plain,
         [](World& w, Script& s) {
             s.use(0).compare_swap(w.back.addr(2048), w.back.lkey(), w.dst.addr(1025), w.dst.rkey(), 0, 1);
         }},
        {"write, bad lkey", plain,
         [](World& w, Script& s) { s.use(0).write(w.src.addr(), 256, 0x12345601u, w.dst.addr(1024), w.dst.rkey()); }},
        {"write, lkey of another PD", plain,
         [](World& w, Script& s) {
             const auto& m = w.e.region(w.src, 0, kBuf, gv::kLocalWrite, &w.e.other_pd());
             s.use(0).write(w.src.addr(), 256, m.lkey(), w.dst.addr(1024), w.dst.rkey());
         }},
        {"fetch-add, result region without local write", plain,
         [](World& w, Script& s) {
             const auto& m = w.e.region(w.back, 0, kBuf, gv::kRemoteRead);
             s.use(0).fetch_add(w.back.addr(2048), m.lkey(), w.dst.addr(1024), w.dst.rkey(), 5);
         }},
    };
    for (const Bad& b : bads) {
        v.push_back({b.name, b.cfg, [b, recv1](World& w) {
                         bad_request(w, recv1(&w), 1, [&](Script& s) { b.bad(w, s); });
                     }});
    }
    v.push_back({"send, receive too small", plain, [](World& w) {
                     bad_request(
                         w,
                         [&](Script& s) {
                             s.use(1).recv(w.back.addr(0), 64, w.back.lkey());
                             s.recv(w.back.addr(1024), 1024, w.back.lkey());
                         },
                         2, [&](Script& s) { s.use(0).send(w.src.addr(), 65, w.src.lkey()); });
                 }});
    v.push_back({"send, receive with a bad lkey", plain, [](World& w) {
                     bad_request(
                         w, [&](Script& s) { s.use(1).recv(w.back.addr(0), 1024, 0x4444401u); }, 1,
                         [&](Script& s) { s.use(0).send(w.src.addr(), 100, w.src.lkey()); });
                 }});
    v.push_back({"send without receive, rnr_retry 0",
                 [] {
                     PairConfig c = plain();
                     c.requester_rts.rnr_retry = 0;
                     c.responder_rtr.min_rnr_timer = 1;
                     return c;
                 },
                 [](World& w) {
                     bad_request(w, nullptr, 0, [&](Script& s) { s.use(0).send(w.src.addr(), 100, w.src.lkey()); });
                 }});
    v.push_back({"send without receive until 3 RNR retries run out",
                 [] {
                     PairConfig c = plain();
                     c.requester_rts.rnr_retry = 3;
                     c.responder_rtr.min_rnr_timer = 1;  // 0.01 ms
                     return c;
                 },
                 [](World& w) {
                     bad_request(w, nullptr, 0, [&](Script& s) { s.use(0).send(w.src.addr(), 100, w.src.lkey()); },
                                 5 * kShort);
                 }});
    v.push_back({"requester not ready (RESET), then connected",
                 [] {
                     PairConfig c = plain();
                     c.connect = false;
                     return c;
                 },
                 [](World& w) {
                     Script s;
                     s.use(0).write(w.src.addr(), 256, w.src.lkey(), w.dst.addr(0), w.dst.rkey());
                     StepId c = any(s, s.commit());
                     StepId p = any(s, s.poll_send(4));
                     RunResult r = w.run(s);
                     w.commits.push_back(gv::status_name(r[c].status));
                     w.add(r, p, false);
                     w.req.push_back("connect");
                     // The responder first: the held WRITE runs once the requester reaches RTS.
                     w.e.qp(1).connect(w.e.qp(0).endpoint());
                     w.e.qp(0).connect(w.e.qp(1).endpoint());
                     Script s2;
                     s2.use(0).nop();
                     any(s2, s2.commit());
                     StepId ws = any(s2, s2.wait_send(2, kShort));
                     RunResult r2 = w.run(s2);
                     w.add(r2, ws, false);
                 }});
    v.push_back({"responder not ready (RESET)",
                 [] {
                     PairConfig c = plain();
                     c.connect = false;
                     return c;
                 },
                 [](World& w) {
                     gv::RtsAttr rts;
                     rts.timeout = 8;  // 1 ms
                     rts.retry_cnt = 1;
                     w.e.qp(0).connect(w.e.qp(1).endpoint(), {}, {}, rts);
                     write_then_nop(w, 5 * kShort);
                 }});
    v.push_back({"write to a peer in ERROR", plain, [](World& w) {
                     w.e.qp(1).to_error();
                     write_then_nop(w, 10 * kShort);
                 }});
    v.push_back({"requester moved to ERROR by the user, then work posted", plain, [](World& w) {
                     w.e.qp(0).to_error();
                     Script s;
                     s.use(1).recv(w.back.addr(0), 1024, w.back.lkey());
                     s.use(0).write(w.src.addr(), 256, w.src.lkey(), w.dst.addr(0), w.dst.rkey());
                     s.recv(w.back.addr(2048), 64, w.back.lkey());
                     StepId c = any(s, s.commit());
                     StepId ws = any(s, s.wait_send(1, kShort));
                     StepId wr = any(s, s.wait_recv(1, kShort));
                     RunResult r = w.run(s);
                     w.commits.push_back(gv::status_name(r[c].status));
                     w.add(r, ws, false);
                     w.add(r, wr, true);
                 }});
    return v;
}

std::string record(const std::string& instance, const Case& c, const Instance& inst) {
    std::ostringstream o;
    o << "{\"case\":" << json_str(c.name) << ",\"instance\":" << json_str(instance);
    try {
        World w(inst, c.config());
        c.body(w);
        auto list = [](const std::vector<std::string>& v) {
            std::string s = "[";
            for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + json_str(v[i]);
            return s + "]";
        };
        o << ",\"requester\":" << list(w.req) << ",\"responder\":" << list(w.resp) << ",\"commit\":" << list(w.commits)
          << ",\"requester_state\":" << json_str(gv::qp_state_name(w.e.qp(0).state()))
          << ",\"responder_state\":" << json_str(gv::qp_state_name(w.e.qp(1).state()))
          << ",\"memory\":{\"dst\":" << json_str(change_of(w.dst0, w.dst.download()))
          << ",\"back\":" << json_str(change_of(w.back0, w.back.download()))
          << ",\"src\":" << json_str(change_of(w.src0, w.src.download())) << "}";
    } catch (const std::exception& e) {
        o << ",\"failed\":" << json_str(e.what());
    }
    o << "}";
    return o.str();
}

int diff_main(gvcli::Args& args) {
    std::string backend, out, only;
    while (args.next()) {
        if (args.is("--backend")) backend = args.one_of({"soft", "verbs"});
        else if (args.is("--out")) out = args.value();
        else if (args.is("--case")) only = args.value();
        else args.unknown();
    }
    if (backend.empty()) throw gvcli::UsageError("--backend soft|verbs is required");
    Instance inst = backend == "soft" ? soft_cpu_instance() : verbs_instance();
    if (backend == "verbs") {
        const std::string why = inst.unavailable();
        if (!why.empty()) throw gv::NotSupported("the verbs backend: " + why);
    }
    std::ofstream file;
    if (!out.empty()) {
        file.open(out);
        if (!file) throw gv::InvalidUsage("--out " + out + ": cannot write it");
    }
    std::ostream& os = out.empty() ? std::cout : file;
    int failed = 0;
    for (const Case& c : cases()) {
        if (!only.empty() && c.name.find(only) == std::string::npos) continue;
        const std::string line = record(backend, c, inst);
        failed += line.find("\"failed\"") != std::string::npos;
        os << line << "\n" << std::flush;
    }
    if (failed) std::fprintf(stderr, "gv_differential: %d case(s) could not run (\"failed\" in the records)\n", failed);
    return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string usage =
        "usage: gv_differential --backend soft|verbs [--out FILE] [--case SUBSTRING]\n"
        "Runs the differential cases (good and bad operation sequences) on the software device\n"
        "(CPU threads) or on the verbs backend (RDMA_DEVICE, RDMA_GID_INDEX) and writes one JSON\n"
        "object per case: completions, QP states, memory changes. Compare two runs with\n"
        "tests/traffic/differential.py. Exit status: 0 recorded, 1 a case could not run, 2 bad usage.\n";
    return gvcli::run(argc, argv, usage, diff_main);
}
