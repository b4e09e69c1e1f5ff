// The decisions of the ConnectX backend as plain functions over probed facts (no device
// calls here; tests/mlx5/decide_test.cpp covers every combination): where queues live, who
// rings the doorbell, whether kernels need a flush READ before they consume what the NIC
// wrote, and whether kernels can drive a ConnectX at all (Backend::Auto).
#pragma once

#include <string>

#include "gpuverbs/context.hpp"
#include "gpuverbs/types.hpp"

namespace gv::detail::mlx5be {

/// How a GPU and a NIC are connected over PCIe (from their sysfs paths).
enum class PcieRelation {
    Unknown,          ///< a path could not be read (a VM, a stand-in NIC)
    SameSwitch,       ///< below one PCIe switch: peer traffic stays off the CPU
    SameRootComplex,  ///< only the CPU's root complex joins them (host bridge)
    CrossSocket,      ///< different root complexes (another socket or PCI domain)
};
const char* pcie_relation_name(PcieRelation r);
/// From two sysfs device paths (/sys/devices/pci0000:00/0000:00:01.0/0000:02:00.0/...):
/// the deepest common PCI device on both paths decides. Pure.
PcieRelation pcie_relation(const std::string& gpu_sysfs, const std::string& nic_sysfs);

/// What the decisions depend on: the build, the GPU, the NIC, the driver. Probed by the
/// backend at open (mlx5_probe.cpp), or set by a test.
struct Capabilities {
    bool cuda_built = false;
    int gpu = -1;                ///< the context's GPU (-1: CPU threads post)
    bool devx = false;           ///< mlx5dv_open_device with DevX works
    std::string devx_error;      ///< why not (the call and errno)
    bool dmabuf = false;         ///< CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED of the GPU
    bool peermem = false;        ///< nvidia-peermem is loaded
    bool uar_mappable = false;   ///< a UAR page registered with cudaHostRegister(IoMemory)
    std::string uar_map_error;   ///< why not (the failed call and its error)
    /// The NVIDIA driver's registry has PeerMappingOverride=1 (-1: unknown, e.g. no
    /// /proc/driver/nvidia/params).
    int peer_mapping_override = -1;
    PcieRelation pcie = PcieRelation::Unknown;
    /// CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING of the GPU (0 none, 100 owner,
    /// 200 all devices; -1 unknown).
    int gdr_writes_ordering = -1;
};

/// Where a QP's or CQ's rings live.
enum class Place {
    Gpu,   ///< GPU memory registered as DevX umems (dma-buf, else nvidia-peermem)
    Host,  ///< pinned host memory of queues libibverbs / libmlx5 created, mapped for kernels
};
const char* place_name(Place p);

struct QueueChoice {
    Place place = Place::Host;
    bool dmabuf = false;  ///< Gpu: register through dma-buf (else nvidia-peermem)
    std::string reason;
};
/// MemoryKind::Device: GPU memory, which needs DevX and dma-buf or nvidia-peermem
/// (NotSupported naming what is missing and its fix); Host: host memory; Default: GPU memory
/// when possible and the GPU and NIC share a PCIe switch (or their relation is unknown), else
/// host memory, saying why. A CPU-only context (gpu < 0) has host memory only.
QueueChoice choose_queues(MemoryKind requested, const Capabilities& c);

struct HandlerChoice {
    DoorbellHandler handler = DoorbellHandler::Gpu;
    std::string reason;
    /// Auto fell back to CpuProxy: the sentence to print once (the failed call, its error and
    /// the driver setting that enables the GPU handler). Empty otherwise.
    std::string fallback;
};
/// Gpu needs kernels to map the UAR (else NotSupported with the reason and the fix); Auto
/// takes Gpu when they can, else CpuProxy with `fallback` set; CpuProxy is always possible.
/// On a CPU-only context the posting CPU threads ring the UAR themselves (Gpu).
HandlerChoice choose_handler(DoorbellHandler requested, const Capabilities& c);

/// The driver setting that lets a GPU map a NIC's doorbell page.
extern const char* const kPeerMappingOverrideFix;

struct FlushChoice {
    bool needed = false;
    std::string reason;
};
/// Whether gv::dev::flush_gpu_writes posts a flush READ: Always / Never as asked; Auto when
/// the GPU's GPUDirect RDMA write ordering is below OWNER (100) or unknown, on a GPU context.
FlushChoice choose_read_flush(ReadFlush requested, const Capabilities& c);

/// Why kernels cannot drive this ConnectX's queues ("" when they can): Backend::Auto's
/// mlx5_gpu_queues fact. Needs a CUDA build, a GPU, DevX and GPU memory the NIC can reach
/// (dma-buf or nvidia-peermem); a UAR the GPU cannot map is not a reason (the CPU proxy
/// rings then).
std::string gpu_queues_why_not(const Capabilities& c);

/// From the text of /proc/driver/nvidia/params: 1 when its RegistryDwords line holds
/// PeerMappingOverride=1, 0 when it does not, -1 when there is no RegistryDwords line. Pure.
int peer_mapping_override_from_params(const std::string& params);

}  // namespace gv::detail::mlx5be
