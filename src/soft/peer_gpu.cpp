#include "soft/peer_gpu.hpp"

#include <cstdio>

namespace gv::detail::soft {

std::string uuid_text(const GpuUuid& u) {
    if (!is_gpu(u)) return "CPU threads";
    std::string s = "GPU-";
    char b[3];
    for (size_t i = 0; i < u.size(); ++i) {
        if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
        std::snprintf(b, sizeof b, "%02x", unsigned(u[i]));
        s += b;
    }
    return s;
}

namespace {

PeerPlan refuse(std::string why) {
    PeerPlan p;
    p.path = PeerPath::Refused;
    p.why = std::move(why);
    return p;
}
PeerPlan take(PeerPath path) {
    PeerPlan p;
    p.path = path;
    return p;
}

std::string no_access(int from, int to, int answer) {
    const std::string call = "cudaDeviceCanAccessPeer(" + std::to_string(from) + ", " + std::to_string(to) + ")";
    return "GPU " + std::to_string(from) + " cannot reach the memory of GPU " + std::to_string(to) + " (" + call +
           (answer < 0 ? " could not be asked" : " = 0: no NVLink or PCIe peer-to-peer path between them") +
           "); the software device moves bytes with the GPUs' own loads and stores, so QPs on two GPUs need "
           "peer access between them (`nvidia-smi topo -p2p rw` shows which pairs have it): connect QPs of "
           "one GPU instead";
}

}  // namespace

PeerPlan plan_peer(const PeerFacts& f) {
    const bool here_gpu = f.local_gpu >= 0;
    // A locator without a GPU identity (an older gpuverbs) is taken to be of this QP's kind and
    // GPU, as that version assumed.
    const bool there_gpu = f.peer_uuid_known ? is_gpu(f.peer_uuid) : here_gpu;
    if (here_gpu != there_gpu)
        return refuse(std::string("this QP's software device executes on ") +
                      (here_gpu ? "GPU " + std::to_string(f.local_gpu) : std::string("CPU threads")) +
                      ", the peer's on " + (there_gpu ? uuid_text(f.peer_uuid) : std::string("CPU threads")) +
                      ": each device executes work where its state lives, so both QPs must be of CPU contexts "
                      "(ContextOptions::gpu = -1) or both of GPU contexts");
    if (!here_gpu) return take(f.same_process ? PeerPath::SameDevice : PeerPath::OtherProcess);
    if (!f.peer_uuid_known || f.peer_uuid == f.local_uuid)
        return take(f.same_process ? PeerPath::SameDevice : PeerPath::OtherProcess);

    // Two GPUs.
    if (f.peer_gpu < 0) {
        std::string why = "the peer QP's device is on " + uuid_text(f.peer_uuid) + ", which this process does not see (" +
                          std::to_string(f.visible_gpus) + " GPU" + (f.visible_gpus == 1 ? "" : "s") + " visible";
        if (f.visible_devices_set)
            why += ", CUDA_VISIBLE_DEVICES=" + f.visible_devices +
                   "): the process needs the peer's GPU visible too to map its memory; make both GPUs visible to "
                   "both processes (unset CUDA_VISIBLE_DEVICES, or list both) and choose each process's GPU with "
                   "ContextOptions::gpu (the tools' --gpu)";
        else
            why += "): no visible GPU has that identity (is the peer on another host? the software device "
                   "connects processes of one host only)";
        return refuse(why);
    }
    if (f.peer_gpu == f.local_gpu)  // two identities for one ordinal: the facts contradict each other
        return refuse("the peer's GPU " + uuid_text(f.peer_uuid) + " and this QP's " + uuid_text(f.local_uuid) +
                      " are both GPU " + std::to_string(f.local_gpu) + " here");
    if (f.can_access_peer != 1) return refuse(no_access(f.local_gpu, f.peer_gpu, f.can_access_peer));
    // One process: either GPU's threads may execute either QP (the committing group, a receive
    // that retries a waiting sender), so both directions are needed.
    if (f.same_process && f.peer_can_access != 1) return refuse(no_access(f.peer_gpu, f.local_gpu, f.peer_can_access));
    return take(PeerPath::CrossGpu);
}

std::string gpu_not_visible(int gpu, int visible, bool visible_devices_set, const std::string& visible_devices) {
    std::string s = "GPU " + std::to_string(gpu) + " asked for, but ";
    if (visible == 0) s += "no GPU is visible";
    else s += std::to_string(visible) + " GPU" + (visible == 1 ? " is" : "s are") + " visible (GPU 0" +
              (visible > 1 ? " .. " + std::to_string(visible - 1) : std::string()) + ")";
    if (visible_devices_set) s += "; CUDA_VISIBLE_DEVICES=" + visible_devices + " hides the others";
    return s;
}

std::string check_peer_memory(int device, int owner, int can_access_peer) {
    if (device == owner || can_access_peer == 1) return "";
    return "memory of GPU " + std::to_string(owner) + " registered on the software device of GPU " +
           std::to_string(device) + ", which cannot reach it (cudaDeviceCanAccessPeer(" + std::to_string(device) +
           ", " + std::to_string(owner) + ") = " + std::to_string(can_access_peer < 0 ? 0 : can_access_peer) +
           "): register it on a context of GPU " + std::to_string(owner) + ", or use memory of GPU " +
           std::to_string(device);
}

}  // namespace gv::detail::soft
