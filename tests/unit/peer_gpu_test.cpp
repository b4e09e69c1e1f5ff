// The software device's decisions about peers on two GPUs of one host (src/soft/peer_gpu.hpp),
// as pure functions over the facts the backend gathers: every path, and every refusal with
// what it tells the user, on a machine with no GPU at all.
#include <gtest/gtest.h>

#include <string>

#include "soft/locator.hpp"
#include "soft/peer_gpu.hpp"

using namespace gv::detail::soft;

namespace {

GpuUuid uuid(uint8_t seed) {
    GpuUuid u{};
    for (size_t i = 0; i < u.size(); ++i) u[i] = uint8_t(seed + i);
    return u;
}

/// Facts for a QP on GPU 0 whose peer is on GPU 1 of the same host, peer access both ways.
PeerFacts two_gpus(bool same_process) {
    PeerFacts f;
    f.local_gpu = 0;
    f.local_uuid = uuid(0x10);
    f.same_process = same_process;
    f.peer_uuid_known = true;
    f.peer_uuid = uuid(0x20);
    f.peer_gpu = 1;
    f.visible_gpus = 2;
    f.can_access_peer = 1;
    f.peer_can_access = same_process ? 1 : -1;
    return f;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(PeerGpu, UuidTextIsNvidiaSmiSpelling) {
    EXPECT_EQ(uuid_text(GpuUuid{}), "CPU threads");
    EXPECT_EQ(uuid_text(uuid(0)), "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f");
}

TEST(PeerGpu, OneGpuAndCpuDevicesKeepTheirPaths) {
    PeerFacts f;  // two CPU devices
    f.peer_uuid_known = true;
    f.same_process = true;
    EXPECT_EQ(plan_peer(f).path, PeerPath::SameDevice);
    f.same_process = false;
    EXPECT_EQ(plan_peer(f).path, PeerPath::OtherProcess);
    // One GPU: the same identity on both sides.
    f.local_gpu = 0;
    f.local_uuid = f.peer_uuid = uuid(7);
    EXPECT_EQ(plan_peer(f).path, PeerPath::OtherProcess);
    f.same_process = true;
    EXPECT_EQ(plan_peer(f).path, PeerPath::SameDevice);
    // A locator of an older gpuverbs (no identity): taken to be on this QP's GPU.
    f.peer_uuid_known = false;
    f.peer_uuid = GpuUuid{};
    EXPECT_EQ(plan_peer(f).path, PeerPath::SameDevice);
}

TEST(PeerGpu, TwoGpusWithPeerAccessConnect) {
    EXPECT_EQ(plan_peer(two_gpus(true)).path, PeerPath::CrossGpu);
    EXPECT_EQ(plan_peer(two_gpus(false)).path, PeerPath::CrossGpu);
    // Across processes only this GPU's direction is needed (each process executes its own QPs).
    PeerFacts f = two_gpus(false);
    f.peer_can_access = 0;
    EXPECT_EQ(plan_peer(f).path, PeerPath::CrossGpu);
}

TEST(PeerGpu, CpuAndGpuDevicesAreRefused) {
    PeerFacts f = two_gpus(true);
    f.peer_uuid = GpuUuid{};
    const PeerPlan p = plan_peer(f);
    ASSERT_EQ(p.path, PeerPath::Refused);
    EXPECT_TRUE(has(p.why, "executes on GPU 0, the peer's on CPU threads")) << p.why;
    EXPECT_TRUE(has(p.why, "ContextOptions::gpu = -1")) << p.why;
}

TEST(PeerGpu, NoPeerAccessIsRefusedWithTheReason) {
    PeerFacts f = two_gpus(false);
    f.can_access_peer = 0;
    PeerPlan p = plan_peer(f);
    ASSERT_EQ(p.path, PeerPath::Refused);
    EXPECT_TRUE(has(p.why, "GPU 0 cannot reach the memory of GPU 1")) << p.why;
    EXPECT_TRUE(has(p.why, "cudaDeviceCanAccessPeer(0, 1) = 0")) << p.why;
    EXPECT_TRUE(has(p.why, "nvidia-smi topo -p2p")) << p.why;
    // One process: the other direction counts too.
    f = two_gpus(true);
    f.peer_can_access = 0;
    p = plan_peer(f);
    ASSERT_EQ(p.path, PeerPath::Refused);
    EXPECT_TRUE(has(p.why, "GPU 1 cannot reach the memory of GPU 0")) << p.why;
}

TEST(PeerGpu, HiddenPeerGpuIsRefusedNamingCudaVisibleDevices) {
    PeerFacts f = two_gpus(false);
    f.local_gpu = 0;
    f.peer_gpu = -1;
    f.visible_gpus = 1;
    f.visible_devices_set = true;
    f.visible_devices = "1";
    PeerPlan p = plan_peer(f);
    ASSERT_EQ(p.path, PeerPath::Refused);
    EXPECT_TRUE(has(p.why, uuid_text(uuid(0x20)))) << p.why;
    EXPECT_TRUE(has(p.why, "1 GPU visible")) << p.why;
    EXPECT_TRUE(has(p.why, "CUDA_VISIBLE_DEVICES=1")) << p.why;
    EXPECT_TRUE(has(p.why, "make both GPUs visible")) << p.why;
    // Not hidden by the environment: a GPU of another host.
    f.visible_devices_set = false;
    p = plan_peer(f);
    ASSERT_EQ(p.path, PeerPath::Refused);
    EXPECT_TRUE(has(p.why, "processes of one host only")) << p.why;
}

TEST(PeerGpu, ContradictoryFactsAreRefused) {
    PeerFacts f = two_gpus(true);
    f.peer_gpu = 0;  // two identities for one ordinal
    EXPECT_EQ(plan_peer(f).path, PeerPath::Refused);
}

TEST(PeerGpu, GpuNotVisibleMessage) {
    EXPECT_EQ(gpu_not_visible(1, 1, true, "0"),
              "GPU 1 asked for, but 1 GPU is visible (GPU 0); CUDA_VISIBLE_DEVICES=0 hides the others");
    EXPECT_EQ(gpu_not_visible(3, 2, false, ""), "GPU 3 asked for, but 2 GPUs are visible (GPU 0 .. 1)");
    EXPECT_EQ(gpu_not_visible(0, 0, false, ""), "GPU 0 asked for, but no GPU is visible");
}

TEST(PeerGpu, PeerMemoryRegistration) {
    EXPECT_EQ(check_peer_memory(0, 0, 0), "");
    EXPECT_EQ(check_peer_memory(0, 1, 1), "");
    const std::string why = check_peer_memory(0, 1, 0);
    EXPECT_TRUE(has(why, "memory of GPU 1 registered on the software device of GPU 0")) << why;
    EXPECT_TRUE(has(why, "register it on a context of GPU 1")) << why;
}

TEST(PeerGpu, LocatorCarriesTheGpuIdentity) {
    Locator l;
    l.pid = 1234;
    l.gpu_uuid = uuid(0x30);
    const gv::EndpointExtra x = encode(l);
    ASSERT_EQ(x.size, kLocatorBytes);
    EXPECT_EQ(check_extra(x), "");
    const Locator back = decode(x);
    EXPECT_TRUE(back.uuid_known);
    EXPECT_EQ(back.gpu_uuid, l.gpu_uuid);
    EXPECT_EQ(back.pid, 1234u);
    // A locator of the version before GPU identities (32 bytes) still decodes, without one.
    gv::EndpointExtra old = x;
    old.size = kLegacyLocatorBytes;
    EXPECT_EQ(check_extra(old), "");
    const Locator o = decode(old);
    EXPECT_FALSE(o.uuid_known);
    EXPECT_FALSE(is_gpu(o.gpu_uuid));
    // Any other size is refused.
    gv::EndpointExtra bad = x;
    bad.size = 40;
    EXPECT_NE(check_extra(bad), "");
}
