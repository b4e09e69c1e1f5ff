// Peers on two GPUs of one host (docs/two-gpus.md): the decisions the software device makes
// before it connects a QP to a peer QP, or registers memory of another GPU, written as pure
// functions over facts the caller gathers (CUDA's answers, the peer's locator, the
// environment), so that every refusal and its message is tested on machines with one GPU or
// none (tests/unit/peer_gpu_test.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace gv::detail::soft {

/// A GPU's identity (cudaDeviceProp::uuid): the same in every process, whatever
/// CUDA_VISIBLE_DEVICES renumbers. All zero: no GPU (a device executing on CPU threads).
using GpuUuid = std::array<uint8_t, 16>;
inline bool is_gpu(const GpuUuid& u) {
    for (uint8_t b : u)
        if (b) return true;
    return false;
}
/// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (nvidia-smi's spelling), or "CPU threads".
std::string uuid_text(const GpuUuid& u);

/// What is known when a QP connects to a peer QP (to_rtr): about this QP's device, the peer's
/// locator, and what CUDA answers in this process. Only the fields a decision reads need to be
/// filled: no CUDA call is made for two CPU devices.
struct PeerFacts {
    int local_gpu = -1;       ///< this device's GPU in this process (-1: CPU threads)
    GpuUuid local_uuid{};     ///< its identity (zero for CPU threads)
    bool same_process = false;  ///< the peer QP belongs to this process
    /// The peer's locator names its device's GPU (0 for CPU threads). False for a locator of an
    /// older gpuverbs (32 bytes, no GPU identity): the peer is then taken to be on this QP's GPU,
    /// as that version assumed.
    bool peer_uuid_known = false;
    GpuUuid peer_uuid{};
    /// The ordinal of the peer's GPU in this process (device_of_uuid); -1: no visible GPU has
    /// that identity.
    int peer_gpu = -1;
    int visible_gpus = 0;        ///< cudaGetDeviceCount in this process
    int can_access_peer = -1;    ///< cudaDeviceCanAccessPeer(local_gpu, peer_gpu); -1: not asked
    int peer_can_access = -1;    ///< cudaDeviceCanAccessPeer(peer_gpu, local_gpu); -1: not asked
    std::string visible_devices;  ///< $CUDA_VISIBLE_DEVICES; "" when unset
    bool visible_devices_set = false;
};

enum class PeerPath {
    SameDevice,    ///< this process's device: the peer is found by QP number (as before)
    OtherProcess,  ///< another process on the same GPU (or both on CPU threads): its arena is imported
    CrossGpu,      ///< another GPU of this host, in this process or another: peer access, system scope
    Refused,       ///< `why` says why and what to do
};

struct PeerPlan {
    PeerPath path = PeerPath::Refused;
    /// For Refused: the whole sentence after "cannot connect ... to ...: ".
    std::string why;
};

/// How (and whether) a QP of this process's device connects to a peer QP. The caller asks CUDA
/// (peer_gpu, visible_gpus, can_access_*) only when both devices are on GPUs with different
/// identities; everything else is decided from the identities alone.
///   - both on CPU threads, or one GPU: the existing paths (SameDevice, OtherProcess);
///   - a CPU device and a GPU device: refused (the software device of one cannot execute the
///     other's queues: connect two CPU contexts, or two GPU contexts);
///   - two GPUs: the peer's GPU must be visible here (not hidden by CUDA_VISIBLE_DEVICES), and
///     peer access must be possible (both ways in one process, where either GPU's threads may
///     execute either QP; this GPU to the peer's across processes, where each process executes
///     its own QPs).
PeerPlan plan_peer(const PeerFacts& f);

/// The message for a context asked for GPU `gpu` when `visible` GPUs are visible (gpu >=
/// visible): says how many there are and, when CUDA_VISIBLE_DEVICES is set, that it hides the
/// others.
std::string gpu_not_visible(int gpu, int visible, bool visible_devices_set, const std::string& visible_devices);

/// Whether memory of GPU `owner` may be registered on the software device of GPU `device`
/// (one process): "" when it may (the same GPU; another GPU with can_access_peer = 1, which
/// the registration then enables), else the refusal with what to do instead.
std::string check_peer_memory(int device, int owner, int can_access_peer);

}  // namespace gv::detail::soft
