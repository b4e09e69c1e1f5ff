// Two processes, what both kinds of server and client share: the parameters a client sends
// (gv_bench_wire.hpp's Params), the server's reasons to refuse them, and how it adopts them.
// Host code only: the GPU-initiated mode (gv_bench_two_process.cuh) and the CPU one
// (gv_bench_cpu_two_process.hpp, also in a build without CUDA) use it.
// Part of tools/gv_bench.cu (one translation unit for the four tools; these helpers stay in its
// anonymous namespace).
#pragma once

namespace {

using gvbench::Ctl;

gvbench::Params params_of(const Opts& o) {
    gvbench::Params p;
    p.lat = o.lat;
    p.op = uint8_t(op_index(o.op));
    p.host_mem = o.host_mem;
    p.gpu_init = o.gpu_init;
    p.inline_size = uint16_t(std::max(o.inline_size, 0));
    p.iters = o.iters;
    p.qps = o.qps;
    p.threads = o.threads;
    p.reps = o.reps;
    p.duration_us = uint32_t(std::llround(o.duration * 1e6));
    p.sizes = o.sizes;
    p.boot_id = gvbench::boot_id();
    return p;
}

std::string test_name(bool lat, const std::string& op) { return op + (lat ? "_lat" : "_bw"); }

std::string size_list(const std::vector<uint32_t>& v) {
    std::string s;
    for (uint32_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
    return s;
}

// Why this server cannot run what the client asks ("" when it can): another test than this
// binary's (or than --op / --lat here), another kind of initiator than this server's (GPU
// kernels, or CPU threads on a verbs device or in a build without CUDA), an option given here
// with another value than the client's, another host where the device reaches only this one
// (the software device), or what two-process mode does not do.
std::string refusal(const Opts& s, const gvbench::Params& c) {
    const std::string theirs = test_name(c.lat, kOps[c.op]), ours = test_name(s.lat, s.op);
    if (theirs != ours)
        return "the client runs " + theirs + ", this server " + ours + ": start the server as gv_" + theirs +
               " --server";
    if (c.gpu_init && !s.gpu_init)
        return "the client's kernels post (GPU-initiated), this server's CPU threads (--device " + s.device +
               (verbs_device(s) ? "" : " in a build without CUDA") +
               "): start both sides with the same --device";
    if (!c.gpu_init && s.gpu_init)
        return "the client posts from CPU threads (a verbs --device such as rxe0, or a build without CUDA), this "
               "server from GPU kernels: start both sides with the same --device and the same build";
    if (!verbs_device(s)) {
        const std::string here = gvbench::boot_id();
        if (here.empty() || c.boot_id != here)
            return "the client runs on another host (boot id '" + c.boot_id + "', here '" + here +
                   "'): the software device connects processes of one host only";
    }
    if (s.gpu_init && c.host_mem) return "--mem host: two-process buffers are GPU memory (gv::SharedBuffer)";
    struct Check {
        const char* key;
        const char* opt;
        std::string here, there;
    };
    const Check checks[] = {
        {"size", "--size/--all", size_list(s.sizes), size_list(c.sizes)},
        {"iters", "--iters", std::to_string(s.iters), std::to_string(c.iters)},
        {"qps", "--qps", std::to_string(s.qps), std::to_string(c.qps)},
        {"threads", "--threads", std::to_string(s.threads), std::to_string(c.threads)},
        {"reps", "--reps", std::to_string(s.reps), std::to_string(c.reps)},
        {"duration", "--duration", std::to_string(std::llround(s.duration * 1e6)),
         std::to_string(c.duration_us)},
        {"inline", "--inline-size", std::to_string(std::max(s.inline_size, 0)), std::to_string(c.inline_size)},
    };
    for (const Check& k : checks)
        if (s.given.count(k.key) && k.here != k.there)
            return std::string(k.opt) + " is " + k.here + " here, " + k.there + " on the client" +
                   (std::string(k.key) == "duration" ? " (in us)" : "");
    return "";
}

// The server runs what the client asked for.
void adopt(Opts& o, const gvbench::Params& c) {
    o.lat = c.lat;
    o.op = kOps[c.op];
    o.host_mem = c.host_mem;
    o.gpu_init = c.gpu_init;
    o.inline_size = c.inline_size;
    o.iters = c.iters;
    o.qps = c.qps;
    o.threads = c.threads;
    o.reps = c.reps;
    o.duration = c.duration_us / 1e6;
    o.sizes = c.sizes;
}

// Longest a new client may take to send its parameters (it sends them right after connecting).
constexpr int kHandshakeMs = 10000;

// A server's wait for its one client: listens on address:--port, says so on stdout (with the
// port, which --port 0 leaves to the kernel), and takes the first client whose parameters it
// can run (`c`). Until then a bad client (one that closes, stays silent, sends garbage, or
// asks for what this server cannot run) is told why, rejected, and the wait goes on, up to
// --timeout in all.
oob::Channel serve_one_client(const Opts& o, const std::string& prog, const std::string& address,
                              gvbench::Params& c) {
    oob::Listener lis = oob::Channel::listen(o.port, address);
    std::printf("# %s: serving one client, then exiting; waiting up to %d s for a client on %s:%u\n", prog.c_str(),
                o.timeout_ms / 1000, lis.address().c_str(), unsigned(lis.port()));
    std::fflush(stdout);
    auto handshake = [&](oob::Channel& ch, int budget_ms) {
        c = gvbench::Params::parse(ch.recv_message(budget_ms));
        const std::string why = refusal(o, c);
        if (why.empty()) return;
        gvbench::Peer{ch, "client", budget_ms}.fail("refused: " + why);
        throw RemoteError("refused: " + why);
    };
    auto rejected = [&](const std::string& peer, const std::string& why) {
        std::fprintf(stderr, "%s: rejected the client at %s: %s; still listening\n", prog.c_str(), peer.c_str(),
                     why.c_str());
        std::fflush(stderr);
    };
    oob::Channel ch = lis.accept_client(o.timeout_ms, std::min(o.timeout_ms, kHandshakeMs), handshake, rejected);
    lis.close();
    return ch;
}

}  // namespace
