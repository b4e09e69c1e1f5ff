// What gpuverbs_info reports (and gv_selftest quotes when it cannot run): the RDMA devices
// with their ports, GIDs and link layers; the GPUs; for every ConnectX and GPU pair whether
// kernels can drive its queues (dma-buf, nvidia-peermem, DevX, the UAR mapping, the PCIe
// relation), what Auto would pick, and each missing piece with its reason and fix.
#pragma once

#include <string>
#include <vector>

#include "mlx5/decide.hpp"
#include "mlx5/gpu_access.hpp"

namespace gv::detail::mlx5be {

struct GidRow {
    uint32_t index = 0;
    std::string gid;   ///< "fe80::...", "::ffff:10.0.0.1"
    std::string type;  ///< "IB", "RoCE v1", "RoCE v2"
};

struct PortRow {
    uint32_t port = 0;
    std::string state;       ///< "ACTIVE", "DOWN", ...
    std::string link_layer;  ///< "InfiniBand", "Ethernet"
    uint32_t active_mtu = 0;
    uint32_t lid = 0;
    std::vector<GidRow> gids;
    std::string chosen_gid;  ///< what gpuverbs would use by default ("" when none)
    std::string error;
};

struct DeviceRow {
    std::string name;
    bool mlx5 = false;
    std::string sysfs;
    std::string fw;
    uint32_t vendor_id = 0, vendor_part_id = 0;
    std::vector<PortRow> ports;
    bool devx = false;       ///< mlx5 only: DevX opens
    std::string devx_error;
    std::string open_error;  ///< the device could not be opened at all
};

/// A piece that is missing, why, and how to get it.
struct Missing {
    std::string what;
    std::string why;
    std::string fix;
};

/// One ConnectX with one GPU (or with the CPU: gpu = -1).
struct PairRow {
    std::string nic;
    int gpu = -1;
    Capabilities caps;
    std::string queues;   ///< where Default puts the rings, and why
    std::string handler;  ///< what DoorbellHandler::Auto picks
    std::string handler_reason;
    bool read_flush = false;
    std::string read_flush_reason;
    bool gpu_queues = false;  ///< Backend::Auto's mlx5_gpu_queues
    std::string why_not;
    std::vector<Missing> missing;
};

struct Environment {
    std::string kernel;            ///< uname -r
    std::string rdma_core;         ///< from libibverbs' file name ("44"), "" unknown
    bool uverbs = false;           ///< /dev/infiniband/uverbs* exists
    bool mlx5_ib = false;          ///< the mlx5_ib module is loaded
    bool peermem = false;          ///< nvidia-peermem is loaded
    std::string nvidia_driver;     ///< first line of /proc/driver/nvidia/version, "" none
    int nvidia_open_modules = -1;  ///< 1 open, 0 proprietary, -1 unknown
    int peer_mapping_override = -1;
    bool cuda_built = false;
    int gpu_count = 0;
    std::string no_gpu;            ///< why there is no GPU ("" when there is one)
};

struct Report {
    Environment env;
    std::vector<DeviceRow> devices;
    std::vector<GpuFacts> gpus;  ///< index = GPU number
    /// Per GPU, what a ConnectX would need on the GPU's side, whether or not one is present
    /// (dma-buf or nvidia-peermem, PeerMappingOverride for the GPU doorbell), and notes (the
    /// read flush).
    std::vector<std::vector<Missing>> gpu_side;
    std::vector<std::string> gpu_notes;
    std::vector<PairRow> pairs;  ///< every ConnectX with every GPU (or with the CPU when none)
    std::string auto_choice;     ///< "Backend::Auto would choose ... because ..."
    std::vector<Missing> general;  ///< missing pieces not tied to a pair (no device, no uverbs)
};

/// Gathers everything (opens each device; maps a throwaway UAR into each GPU). `device`
/// restricts the devices and `gpu` the GPUs considered (-2: all).
Report gather_report(const std::string& device = "", int gpu = -2);

/// The report as one JSON object.
std::string report_json(const Report& r);

/// The likely cause of an error completion with this mlx5 syndrome on a ConnectX, in words a
/// user can act on (gv_selftest prints it with the syndrome's name).
const char* likely_cause(uint8_t syndrome);

/// "rdma-core 44" from a libibverbs path such as /usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0
/// ("" when the name does not say). Pure.
std::string rdma_core_from_lib(const std::string& path);

}  // namespace gv::detail::mlx5be
