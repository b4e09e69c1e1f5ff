// Out-of-band TCP channel across network namespaces joined by a veth pair.
#include "oob_util.hpp"

using namespace gv;
using namespace gv::oob;
using gvtest::spawn;

// =============================================================================================
// Network namespaces: server and client in two namespaces joined by a veth pair.
// =============================================================================================

namespace {

bool run_quiet(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

struct NetnsPair {
    std::string ns[2], veth[2];
    bool created[2] = {false, false};
    ~NetnsPair() {
        for (int i = 0; i < 2; ++i)
            if (created[i]) run_quiet("ip netns del " + ns[i]);  // takes the veth end with it
        run_quiet("ip link del " + veth[0]);                     // in case it never moved
    }
};

int enter_netns(const std::string& name) {
    int fd = ::open(("/var/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int r = setns(fd, CLONE_NEWNET);
    ::close(fd);
    return r;
}

}  // namespace

TEST(OobNetns, ExchangeAcrossAVethPair) {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
    if (!run_quiet("ip -V")) GTEST_SKIP() << "the ip tool (iproute2) is not installed";
    NetnsPair n;
    const std::string id = std::to_string(getpid());
    n.ns[0] = "gvoob" + id + "s", n.ns[1] = "gvoob" + id + "c";
    n.veth[0] = "gv" + id + "s", n.veth[1] = "gv" + id + "c";  // <= 15 characters
    if (!run_quiet("ip netns add " + n.ns[0]))
        GTEST_SKIP() << "cannot create network namespaces here (ip netns add failed)";
    n.created[0] = true;
    ASSERT_TRUE(run_quiet("ip netns add " + n.ns[1]));
    n.created[1] = true;
    if (!run_quiet("ip link add " + n.veth[0] + " type veth peer name " + n.veth[1]))
        GTEST_SKIP() << "cannot create a veth pair here (ip link add ... type veth failed)";
    const char* addr[2] = {"10.200.0.1/24", "10.200.0.2/24"};
    for (int i = 0; i < 2; ++i) {
        ASSERT_TRUE(run_quiet("ip link set " + n.veth[i] + " netns " + n.ns[i]));
        ASSERT_TRUE(run_quiet("ip -n " + n.ns[i] + " addr add " + addr[i] + " dev " + n.veth[i]));
        ASSERT_TRUE(run_quiet("ip -n " + n.ns[i] + " link set " + n.veth[i] + " up"));
        ASSERT_TRUE(run_quiet("ip -n " + n.ns[i] + " link set lo up"));
    }
    const auto qa = make_qps(41, 64, Backend::Soft), qb = make_qps(42, 64, Backend::Soft);
    const auto ba = make_buffers(43, 4), bb = make_buffers(44, 4);
    pid_t server = spawn([&] {
        if (enter_netns(n.ns[0]) != 0) return 20;
        Listener l = Channel::listen(kDefaultPort, "10.200.0.1");
        Channel c = l.accept(8000);
        if (c.peer().rfind("10.200.0.2:", 0) != 0) return 21;
        Exchanged got = c.exchange(Backend::Soft, qa, ba, 8000);
        return same(got.qps, qb) && same(got.buffers, bb) ? 0 : 22;
    });
    pid_t client = spawn([&] {
        if (enter_netns(n.ns[1]) != 0) return 30;
        // The server is not in this namespace's loopback.
        try {
            Channel::connect("127.0.0.1", kDefaultPort, 100);
            return 31;
        } catch (const TimeoutError&) {
        }
        Channel c = Channel::connect("10.200.0.1", kDefaultPort, 8000);  // retries until it listens
        Exchanged got = c.exchange(Backend::Soft, qb, bb, 8000);
        return same(got.qps, qa) && same(got.buffers, ba) ? 0 : 32;
    });
    ASSERT_GT(server, 0);
    ASSERT_GT(client, 0);
    expect_exit_ok(wait_child(server), "server in its namespace");
    expect_exit_ok(wait_child(client), "client in its namespace");
}
