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
#include "gpuverbs/errors.hpp"
#include "gpuverbs/memory_region.hpp"

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

/// The context options of the verbs backend on device NAME ("verbs": the first RDMA device) on
/// GPU gpu (-1: CPU threads); gid_index: its GID index (-1: the backend's default). Any name, a
/// ConnectX's included: a program without GPU initiators drives every device this way.
inline gv::ContextOptions verbs_context(const std::string& name, int gpu, int gid_index = -1) {
    gv::ContextOptions o;
    o.gpu = gpu;
    o.backend = gv::Backend::Verbs;
    o.device = name == "verbs" ? "" : name;
    o.verbs.gid_index = gid_index;
    return o;
}

/// The context options of --device NAME on GPU gpu (-1: CPU threads); gid_index: the verbs
/// backend's GID index (-1: its default).
inline gv::ContextOptions device_context(const std::string& name, int gpu, int gid_index = -1) {
    if (is_verbs_device(name)) return verbs_context(name, gpu, gid_index);
    gv::ContextOptions o;
    o.gpu = gpu;
    if (name == "soft") {
        o.backend = gv::Backend::Soft;
    } else {
        o.backend = gv::Backend::Mlx5;
        o.device = name == "mlx5" ? "" : name;
    }
    return o;
}

/// A MemoryRegion of [addr, addr + length) in pd. Where ctx is a GPU context on an RDMA device
/// and the registration fails (GPU memory needs GPUDirect RDMA: dma-buf or nvidia-peermem,
/// which Soft-RoCE and most hosts without a ConnectX lack), the error ends with the way out:
/// cpu_option, CPU threads on host memory.
inline gv::MemoryRegion register_memory(const gv::ProtectionDomain& pd, const gv::Context& ctx, void* addr,
                                        size_t length, uint32_t access, const char* cpu_option) {
    try {
        return gv::MemoryRegion(pd, addr, length, access);
    } catch (const gv::Error& e) {
        if (ctx.gpu() < 0 || ctx.backend() == gv::Backend::Soft) throw;
        throw gv::Error(std::string(e.what()) + "\n(the buffers are GPU memory, which " + ctx.name() +
                        " reaches only through GPUDirect RDMA; " + cpu_option +
                        " runs from CPU threads on host memory)");
    }
}

}  // namespace gvcli
