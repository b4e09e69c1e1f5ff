#include "mlx5/decide.hpp"

#include <sstream>
#include <vector>

#include "gpuverbs/errors.hpp"

namespace gv {

const char* doorbell_handler_name(DoorbellHandler h) {
    switch (h) {
        case DoorbellHandler::Auto: return "auto";
        case DoorbellHandler::Gpu: return "gpu";
        case DoorbellHandler::CpuProxy: return "cpu-proxy";
    }
    return "?";
}

}  // namespace gv

namespace gv::detail::mlx5be {

const char* const kPeerMappingOverrideFix =
    "load the NVIDIA kernel driver with NVreg_RegistryDwords=\"PeerMappingOverride=1;\" (a line "
    "`options nvidia NVreg_RegistryDwords=\"PeerMappingOverride=1;\"` in /etc/modprobe.d/nvidia.conf, "
    "then reload the nvidia modules or reboot; /proc/driver/nvidia/params shows it under RegistryDwords)";

const char* pcie_relation_name(PcieRelation r) {
    switch (r) {
        case PcieRelation::Unknown: return "unknown";
        case PcieRelation::SameSwitch: return "same PCIe switch";
        case PcieRelation::SameRootComplex: return "same root complex, no common switch";
        case PcieRelation::CrossSocket: return "different root complexes";
    }
    return "?";
}

const char* place_name(Place p) { return p == Place::Gpu ? "GPU memory" : "pinned host memory"; }

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    std::string cur;
    for (char ch : s) {
        if (ch == sep) {
            if (!cur.empty()) out.push_back(cur);
            cur.clear();
        } else {
            cur += ch;
        }
    }
    if (!cur.empty()) out.push_back(cur);
    return out;
}

// A PCI device path component: DDDD:BB:DD.F
bool is_pci_function(const std::string& s) {
    if (s.size() != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return false;
    for (size_t i = 0; i < s.size(); ++i) {
        if (i == 4 || i == 7 || i == 10) continue;
        if (!isxdigit(static_cast<unsigned char>(s[i]))) return false;
    }
    return true;
}

}  // namespace

PcieRelation pcie_relation(const std::string& gpu, const std::string& nic) {
    // /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:05:00.0: the root
    // bus (pci0000:00), the root port, then bridges of switches, then the device itself.
    std::vector<std::string> a = split(gpu, '/'), b = split(nic, '/');
    auto root = [](const std::vector<std::string>& v) -> int {
        for (size_t i = 0; i < v.size(); ++i)
            if (v[i].rfind("pci", 0) == 0 && v[i].size() > 3 && v[i][3] != '_') return int(i);
        return -1;
    };
    int ra = root(a), rb = root(b);
    if (ra < 0 || rb < 0) return PcieRelation::Unknown;
    if (a[size_t(ra)] != b[size_t(rb)]) return PcieRelation::CrossSocket;
    // Count the PCI functions both paths share below the root bus.
    size_t i = size_t(ra) + 1, j = size_t(rb) + 1, common = 0;
    while (i < a.size() && j < b.size() && is_pci_function(a[i]) && a[i] == b[j]) {
        ++common;
        ++i;
        ++j;
    }
    // 0 shared: only the host bridge; 1: the same root port (no switch below it, e.g. a
    // bifurcated slot): traffic still turns at the root complex; 2 or more: a switch's
    // upstream port is common, so the switch routes peer traffic.
    if (common >= 2) return PcieRelation::SameSwitch;
    return PcieRelation::SameRootComplex;
}

QueueChoice choose_queues(MemoryKind requested, const Capabilities& c) {
    QueueChoice q;
    if (c.gpu < 0) {
        if (requested == MemoryKind::Device)
            throw InvalidUsage("MemoryKind::Device on a ConnectX context without a GPU (ContextOptions::gpu "
                               "= -1): queues of a CPU-only context are host memory");
        q.place = Place::Host;
        q.reason = "a CPU-only context: host memory";
        return q;
    }
    if (requested == MemoryKind::Host) {
        q.place = Place::Host;
        q.reason = "MemoryKind::Host asked for";
        return q;
    }
    std::vector<std::string> missing;
    if (!c.cuda_built) missing.push_back("this build of gpuverbs has no CUDA");
    if (!c.devx)
        missing.push_back("DevX is not available (" + (c.devx_error.empty() ? std::string("no reason given") : c.devx_error) +
                          "); GPU-memory queues are created with DevX commands");
    if (!c.dmabuf && !c.peermem)
        missing.push_back(
            "the NIC cannot reach GPU memory: dma-buf is not supported by the GPU "
            "(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 0: needs the NVIDIA open kernel modules, driver >= 515, "
            "Linux >= 5.12, rdma-core >= 34) and nvidia-peermem is not loaded (fix: `modprobe nvidia-peermem`)");
    if (requested == MemoryKind::Device) {
        if (!missing.empty()) {
            std::string s = "MemoryKind::Device (QP and CQ rings in GPU memory) is not possible here: ";
            for (size_t i = 0; i < missing.size(); ++i) s += (i ? "; " : "") + missing[i];
            throw NotSupported(s + ". Use MemoryKind::Host (pinned host memory) instead");
        }
        q.place = Place::Gpu;
        q.dmabuf = c.dmabuf;
        q.reason = std::string("MemoryKind::Device asked for: GPU memory through ") +
                   (c.dmabuf ? "dma-buf" : "nvidia-peermem");
        if (c.pcie == PcieRelation::SameRootComplex || c.pcie == PcieRelation::CrossSocket)
            q.reason += std::string(" (the GPU and the NIC share no PCIe switch (") + pcie_relation_name(c.pcie) +
                        "): the NIC's reads of the rings cross the CPU and may be slow)";
        return q;
    }
    // Default.
    if (!missing.empty()) {
        q.place = Place::Host;
        q.reason = "pinned host memory, since GPU memory is not possible: ";
        for (size_t i = 0; i < missing.size(); ++i) q.reason += (i ? "; " : "") + missing[i];
        return q;
    }
    if (c.pcie == PcieRelation::SameRootComplex || c.pcie == PcieRelation::CrossSocket) {
        q.place = Place::Host;
        q.reason = std::string("pinned host memory: the GPU and the NIC share no PCIe switch (") +
                   pcie_relation_name(c.pcie) +
                   "), so the NIC's reads of rings in GPU memory would cross the CPU's root complex (slow, "
                   "or refused by some chipsets); MemoryKind::Device forces GPU memory";
        return q;
    }
    q.place = Place::Gpu;
    q.dmabuf = c.dmabuf;
    q.reason = std::string("GPU memory through ") + (c.dmabuf ? "dma-buf" : "nvidia-peermem") + " (PCIe: " +
               pcie_relation_name(c.pcie) + ")";
    return q;
}

HandlerChoice choose_handler(DoorbellHandler requested, const Capabilities& c) {
    HandlerChoice h;
    if (c.gpu < 0) {
        if (requested == DoorbellHandler::CpuProxy) {
            h.handler = DoorbellHandler::CpuProxy;
            h.reason = "cpu-proxy asked for";
        } else {
            h.handler = DoorbellHandler::Gpu;
            h.reason = "a CPU-only context: the posting CPU threads ring the UAR themselves";
        }
        return h;
    }
    const std::string why_not =
        c.uar_map_error.empty() ? std::string("the UAR page could not be mapped into the GPU") : c.uar_map_error;
    switch (requested) {
        case DoorbellHandler::CpuProxy:
            h.handler = DoorbellHandler::CpuProxy;
            h.reason = "cpu-proxy asked for";
            return h;
        case DoorbellHandler::Gpu:
            if (!c.uar_mappable)
                throw NotSupported("DoorbellHandler::Gpu: kernels cannot ring this NIC's doorbell: " + why_not +
                                   ". To enable it, " + kPeerMappingOverrideFix +
                                   "; or use DoorbellHandler::CpuProxy (or Auto)");
            h.handler = DoorbellHandler::Gpu;
            h.reason = "gpu asked for: kernels ring the UAR mapped into the GPU";
            return h;
        case DoorbellHandler::Auto:
            if (c.uar_mappable) {
                h.handler = DoorbellHandler::Gpu;
                h.reason = "auto: the UAR maps into the GPU, kernels ring it";
                return h;
            }
            h.handler = DoorbellHandler::CpuProxy;
            h.reason = "auto: the UAR cannot be mapped into the GPU, a CPU thread rings it";
            h.fallback = "kernels cannot ring the doorbell: " + why_not +
                         "; doorbells go through a CPU proxy thread (each costs a few microseconds more). "
                         "To let kernels ring it, " + kPeerMappingOverrideFix;
            if (c.peer_mapping_override == 1)
                h.fallback += " (PeerMappingOverride=1 is already set: the platform or the IOMMU refuses the mapping)";
            return h;
    }
    return h;
}

FlushChoice choose_read_flush(ReadFlush requested, const Capabilities& c) {
    FlushChoice f;
    switch (requested) {
        case ReadFlush::Always:
            f.needed = true;
            f.reason = "ReadFlush::Always asked for";
            return f;
        case ReadFlush::Never:
            f.reason = "ReadFlush::Never asked for";
            return f;
        case ReadFlush::Auto: break;
    }
    if (c.gpu < 0) {
        f.reason = "a CPU-only context: the NIC writes host memory, which the CPU sees in order";
        return f;
    }
    if (c.gdr_writes_ordering >= 100) {
        f.reason = "the GPU orders GPUDirect RDMA writes for its own kernels (GPU_DIRECT_RDMA_WRITES_ORDERING = " +
                   std::to_string(c.gdr_writes_ordering) + ")";
        return f;
    }
    f.needed = true;
    f.reason = c.gdr_writes_ordering < 0
                   ? "the GPU's GPUDirect RDMA write ordering is unknown: a flush READ before consuming"
                   : "the GPU does not order GPUDirect RDMA writes (GPU_DIRECT_RDMA_WRITES_ORDERING = " +
                         std::to_string(c.gdr_writes_ordering) + "): a flush READ before consuming";
    return f;
}

std::string gpu_queues_why_not(const Capabilities& c) {
    std::vector<std::string> why;
    if (!c.cuda_built) why.push_back("this build of gpuverbs has no CUDA");
    else if (c.gpu < 0) why.push_back("no GPU");
    if (!c.devx) why.push_back("no DevX (" + (c.devx_error.empty() ? std::string("unknown reason") : c.devx_error) + ")");
    if (c.gpu >= 0 && !c.dmabuf && !c.peermem)
        why.push_back("GPU memory cannot be registered with the NIC (no dma-buf support, nvidia-peermem not loaded)");
    std::string s;
    for (size_t i = 0; i < why.size(); ++i) s += (i ? "; " : "") + why[i];
    return s;
}

int peer_mapping_override_from_params(const std::string& params) {
    std::istringstream in(params);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("RegistryDwords", 0) != 0) continue;
        // RegistryDwords: "PeerMappingOverride=1;RMForceStaticBar1=1;"
        for (const std::string& kv : split(line.substr(line.find(':') == std::string::npos ? line.size()
                                                                                          : line.find(':') + 1),
                                           ';')) {
            std::string t;
            for (char ch : kv)
                if (ch != '"' && ch != ' ' && ch != '\t') t += ch;
            if (t.rfind("PeerMappingOverride=", 0) == 0) {
                std::string v = t.substr(20);
                return (v == "1" || v == "0x1" || v == "0x00000001") ? 1 : 0;
            }
        }
        return 0;
    }
    return -1;
}

}  // namespace gv::detail::mlx5be
