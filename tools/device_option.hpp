// --device NAME, as gv_demo and the client-server sample read it: which backend and device a
// context opens. Host code only; tools/ and samples/ include it (samples through their include
// path).
//   soft            the software RDMA device (the default)
//   mlx5, mlx5_N    a ConnectX through the mlx5 backend (mlx5: the first one)
//   verbs           the first RDMA device, through the verbs backend
//   any other name  that RDMA device (rxe0, siw0, ...), through the verbs backend
#pragma once

#include <string>

#include "cli.hpp"
#include "gpuverbs/context.hpp"

namespace gvcli {

/// What --device accepts, for usage errors.
inline constexpr const char* kDeviceChoices = "soft, mlx5, mlx5_N, verbs or a device name";

/// Reads --device's value: UsageError for an empty name.
inline std::string device_value(Args& args) {
    std::string d = args.value();
    if (d.empty()) throw UsageError(std::string("--device: expected ") + kDeviceChoices);
    return d;
}

/// True when NAME goes through the verbs backend.
inline bool is_verbs_device(const std::string& name) {
    return name != "soft" && name != "mlx5" && name.rfind("mlx5_", 0) != 0;
}

/// The context options of --device NAME on GPU gpu (-1: CPU threads); gid_index: the verbs
/// backend's GID index (-1: its default).
inline gv::ContextOptions device_context(const std::string& name, int gpu, int gid_index = -1) {
    gv::ContextOptions o;
    o.gpu = gpu;
    if (name == "soft") {
        o.backend = gv::Backend::Soft;
    } else if (!is_verbs_device(name)) {
        o.backend = gv::Backend::Mlx5;
        o.device = name == "mlx5" ? "" : name;
    } else {
        o.backend = gv::Backend::Verbs;
        o.device = name == "verbs" ? "" : name;
        o.verbs.gid_index = gid_index;
    }
    return o;
}

}  // namespace gvcli
