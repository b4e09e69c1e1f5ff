// The ConnectX backend's decisions as plain functions over capability facts
// (src/mlx5/decide.hpp): queue memory, doorbell handler and its fallback, the read flush,
// whether Backend::Auto may take mlx5, the PCIe relation, the driver's registry.
#include <gtest/gtest.h>

#include "gpuverbs/errors.hpp"
#include "mlx5/decide.hpp"

using namespace gv::detail::mlx5be;
using gv::DoorbellHandler;
using gv::MemoryKind;
using gv::ReadFlush;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A GPU context on a machine where everything works; each test takes pieces away.
Capabilities all_good() {
    Capabilities c;
    c.cuda_built = true;
    c.gpu = 0;
    c.devx = true;
    c.dmabuf = true;
    c.peermem = true;
    c.uar_mappable = true;
    c.peer_mapping_override = 1;
    c.pcie = PcieRelation::SameSwitch;
    c.gdr_writes_ordering = 0;
    return c;
}

}  // namespace

TEST(Mlx5Decide, QueuesInGpuMemoryWhenEverythingWorks) {
    QueueChoice q = choose_queues(MemoryKind::Default, all_good());
    EXPECT_EQ(q.place, Place::Gpu);
    EXPECT_TRUE(q.dmabuf);
    EXPECT_TRUE(has(q.reason, "dma-buf")) << q.reason;
    // dma-buf first, nvidia-peermem second.
    Capabilities c = all_good();
    c.dmabuf = false;
    q = choose_queues(MemoryKind::Default, c);
    EXPECT_EQ(q.place, Place::Gpu);
    EXPECT_FALSE(q.dmabuf);
    EXPECT_TRUE(has(q.reason, "nvidia-peermem")) << q.reason;
}

TEST(Mlx5Decide, QueuesOverEveryRegistrationAndTopologyCombination) {
    for (bool dmabuf : {false, true})
        for (bool peermem : {false, true})
            for (bool devx : {false, true})
                for (PcieRelation pcie : {PcieRelation::Unknown, PcieRelation::SameSwitch,
                                          PcieRelation::SameRootComplex, PcieRelation::CrossSocket}) {
                    Capabilities c = all_good();
                    c.dmabuf = dmabuf;
                    c.peermem = peermem;
                    c.devx = devx;
                    c.devx_error = devx ? "" : "mlx5dv_open_device(DEVX) failed: EPERM";
                    c.pcie = pcie;
                    const bool reachable = devx && (dmabuf || peermem);
                    const bool near = pcie == PcieRelation::Unknown || pcie == PcieRelation::SameSwitch;
                    QueueChoice q = choose_queues(MemoryKind::Default, c);
                    EXPECT_EQ(q.place, reachable && near ? Place::Gpu : Place::Host)
                        << dmabuf << peermem << devx << pcie_relation_name(pcie) << ": " << q.reason;
                    if (!devx) EXPECT_TRUE(has(q.reason, "EPERM")) << q.reason;
                    if (reachable && !near) EXPECT_TRUE(has(q.reason, "share no PCIe switch")) << q.reason;
                    // Device: GPU memory whenever reachable, whatever the topology; else an error
                    // naming each missing piece and its fix.
                    if (reachable) {
                        EXPECT_EQ(choose_queues(MemoryKind::Device, c).place, Place::Gpu);
                        EXPECT_EQ(choose_queues(MemoryKind::Device, c).dmabuf, dmabuf);
                    } else {
                        try {
                            choose_queues(MemoryKind::Device, c);
                            ADD_FAILURE() << "Device accepted without a way to reach GPU memory";
                        } catch (const gv::NotSupported& e) {
                            if (!dmabuf && !peermem) EXPECT_TRUE(has(e.what(), "modprobe nvidia-peermem")) << e.what();
                            if (!devx) EXPECT_TRUE(has(e.what(), "DevX")) << e.what();
                            EXPECT_TRUE(has(e.what(), "MemoryKind::Host")) << e.what();
                        }
                    }
                    // Host: always host.
                    EXPECT_EQ(choose_queues(MemoryKind::Host, c).place, Place::Host);
                }
}

TEST(Mlx5Decide, CpuOnlyContextHasHostQueuesAndRingsDirectly) {
    Capabilities c = all_good();
    c.gpu = -1;
    EXPECT_EQ(choose_queues(MemoryKind::Default, c).place, Place::Host);
    EXPECT_THROW(choose_queues(MemoryKind::Device, c), gv::InvalidUsage);
    HandlerChoice h = choose_handler(DoorbellHandler::Auto, c);
    EXPECT_EQ(h.handler, DoorbellHandler::Gpu);
    EXPECT_TRUE(h.fallback.empty());
    EXPECT_EQ(choose_handler(DoorbellHandler::CpuProxy, c).handler, DoorbellHandler::CpuProxy);
    EXPECT_FALSE(choose_read_flush(ReadFlush::Auto, c).needed);
}

TEST(Mlx5Decide, HandlerGpuWhenTheUarMaps) {
    Capabilities c = all_good();
    for (DoorbellHandler r : {DoorbellHandler::Auto, DoorbellHandler::Gpu}) {
        HandlerChoice h = choose_handler(r, c);
        EXPECT_EQ(h.handler, DoorbellHandler::Gpu);
        EXPECT_TRUE(h.fallback.empty());
    }
    EXPECT_EQ(choose_handler(DoorbellHandler::CpuProxy, c).handler, DoorbellHandler::CpuProxy);
}

TEST(Mlx5Decide, AutoFallsBackToTheCpuProxySayingWhyAndTheFix) {
    Capabilities c = all_good();
    c.uar_mappable = false;
    c.uar_map_error = "cudaHostRegister(UAR page 0x7f0000001000, 4096 bytes, Portable|Mapped|IoMemory) failed: "
                      "cudaErrorNotSupported";
    c.peer_mapping_override = 0;
    HandlerChoice h = choose_handler(DoorbellHandler::Auto, c);
    EXPECT_EQ(h.handler, DoorbellHandler::CpuProxy);
    EXPECT_TRUE(has(h.fallback, "cudaErrorNotSupported")) << h.fallback;
    EXPECT_TRUE(has(h.fallback, "IoMemory")) << h.fallback;
    EXPECT_TRUE(has(h.fallback, "NVreg_RegistryDwords=\"PeerMappingOverride=1;\"")) << h.fallback;
    // With the setting already there, the message says so.
    c.peer_mapping_override = 1;
    EXPECT_TRUE(has(choose_handler(DoorbellHandler::Auto, c).fallback, "already set"));
    // Gpu asked for: an error with the same reason and fix.
    try {
        choose_handler(DoorbellHandler::Gpu, c);
        FAIL() << "Gpu accepted without a mappable UAR";
    } catch (const gv::NotSupported& e) {
        EXPECT_TRUE(has(e.what(), "cudaErrorNotSupported")) << e.what();
        EXPECT_TRUE(has(e.what(), "PeerMappingOverride=1")) << e.what();
        EXPECT_TRUE(has(e.what(), "CpuProxy")) << e.what();
    }
    // The handler does not depend on where the queues are.
    for (bool dmabuf : {false, true})
        for (bool peermem : {false, true}) {
            c.dmabuf = dmabuf;
            c.peermem = peermem;
            EXPECT_EQ(choose_handler(DoorbellHandler::Auto, c).handler, DoorbellHandler::CpuProxy);
            EXPECT_EQ(choose_handler(DoorbellHandler::CpuProxy, c).handler, DoorbellHandler::CpuProxy);
        }
}

TEST(Mlx5Decide, ReadFlush) {
    Capabilities c = all_good();
    c.gdr_writes_ordering = 0;  // NONE
    EXPECT_TRUE(choose_read_flush(ReadFlush::Auto, c).needed);
    c.gdr_writes_ordering = -1;  // unknown: flush
    EXPECT_TRUE(choose_read_flush(ReadFlush::Auto, c).needed);
    c.gdr_writes_ordering = 100;  // OWNER: the owning GPU's kernels see the writes in order
    FlushChoice f = choose_read_flush(ReadFlush::Auto, c);
    EXPECT_FALSE(f.needed);
    EXPECT_TRUE(has(f.reason, "100")) << f.reason;
    c.gdr_writes_ordering = 200;
    EXPECT_FALSE(choose_read_flush(ReadFlush::Auto, c).needed);
    EXPECT_TRUE(choose_read_flush(ReadFlush::Always, c).needed);
    c.gdr_writes_ordering = 0;
    EXPECT_FALSE(choose_read_flush(ReadFlush::Never, c).needed);
}

TEST(Mlx5Decide, GpuQueuesForBackendAuto) {
    EXPECT_EQ(gpu_queues_why_not(all_good()), "");
    Capabilities c = all_good();
    c.uar_mappable = false;  // the CPU proxy rings then: not a reason
    EXPECT_EQ(gpu_queues_why_not(c), "");
    c = all_good();
    c.dmabuf = c.peermem = false;
    EXPECT_TRUE(has(gpu_queues_why_not(c), "nvidia-peermem")) << gpu_queues_why_not(c);
    c = all_good();
    c.devx = false;
    c.devx_error = "EOPNOTSUPP";
    EXPECT_TRUE(has(gpu_queues_why_not(c), "EOPNOTSUPP"));
    c = all_good();
    c.gpu = -1;
    EXPECT_TRUE(has(gpu_queues_why_not(c), "no GPU"));
    c.cuda_built = false;
    EXPECT_TRUE(has(gpu_queues_why_not(c), "no CUDA"));
}

TEST(Mlx5Decide, PcieRelation) {
    const std::string sw = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0";
    // GPU and NIC below the same switch (two downstream ports of it).
    EXPECT_EQ(pcie_relation(sw + "/0000:05:00.0", "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:06:00.0"),
              PcieRelation::SameSwitch);
    EXPECT_EQ(pcie_relation(sw + "/0000:05:00.0", sw + "/0000:05:00.1"), PcieRelation::SameSwitch);
    // Different root ports of one root complex.
    EXPECT_EQ(pcie_relation("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
                            "/sys/devices/pci0000:00/0000:00:03.0/0000:03:00.0"),
              PcieRelation::SameRootComplex);
    // One root port without a switch (only the port is common).
    EXPECT_EQ(pcie_relation("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
                            "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.1"),
              PcieRelation::SameRootComplex);
    // Another root bus (another socket or PCI domain).
    EXPECT_EQ(pcie_relation("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
                            "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0"),
              PcieRelation::CrossSocket);
    EXPECT_EQ(pcie_relation("", "/sys/devices/pci0000:00/0000:00:01.0"), PcieRelation::Unknown);
    EXPECT_EQ(pcie_relation("/sys/devices/virtual/net/lo", "/sys/devices/pci0000:00/0000:00:01.0"),
              PcieRelation::Unknown);
}

TEST(Mlx5Decide, PeerMappingOverrideFromTheDriverParams) {
    EXPECT_EQ(peer_mapping_override_from_params("ResmanDebugLevel: 4294967295\nRegistryDwords: \"\"\n"), 0);
    EXPECT_EQ(peer_mapping_override_from_params("RegistryDwords: \"PeerMappingOverride=1;\"\n"), 1);
    EXPECT_EQ(peer_mapping_override_from_params("Foo: 1\nRegistryDwords: \"RMForceStaticBar1=1;PeerMappingOverride=1\"\n"), 1);
    EXPECT_EQ(peer_mapping_override_from_params("RegistryDwords: \"PeerMappingOverride=0;\"\n"), 0);
    EXPECT_EQ(peer_mapping_override_from_params("EnableMSI: 1\n"), -1);
    EXPECT_EQ(peer_mapping_override_from_params(""), -1);
}
