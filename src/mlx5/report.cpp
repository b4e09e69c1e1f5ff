#include "mlx5/report.hpp"

#include <dlfcn.h>
#include <glob.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/utsname.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/backend.hpp"
#include "cuda/cuda_rt.hpp"
#include "mlx5/devx_nic.hpp"
#include "verbs/verbs.hpp"

namespace gv::detail::mlx5be {

namespace {

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}
bool exists(const std::string& p) {
    struct stat st{};
    return stat(p.c_str(), &st) == 0;
}
const char* port_state_name(ibv_port_state s) {
    switch (s) {
        case IBV_PORT_NOP: return "NOP";
        case IBV_PORT_DOWN: return "DOWN";
        case IBV_PORT_INIT: return "INIT";
        case IBV_PORT_ARMED: return "ARMED";
        case IBV_PORT_ACTIVE: return "ACTIVE";
        case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    }
    return "?";
}

const char* kDmabufFix =
    "the NVIDIA open kernel modules (the proprietary ones report no dma-buf support), driver >= 515, Linux >= 5.12; "
    "for DevX umems over dma-buf also rdma-core >= 43 and a kernel whose mlx5_ib takes dma-buf umems (Linux >= 6.2)";
const char* kPeermemFix = "`modprobe nvidia-peermem` (the module ships with the NVIDIA driver)";
const char* kDevxFix =
    "the mlx5_ib kernel driver with DevX (Linux >= 5.1, ConnectX-5 or later firmware) and rdma-core's libmlx5; in a "
    "container, /dev/infiniband/uverbs* passed in and DevX allowed for the user";

Environment gather_env() {
    Environment e;
    utsname u{};
    if (uname(&u) == 0) e.kernel = u.release;
    Dl_info di{};
    if (dladdr(reinterpret_cast<void*>(&ibv_get_device_list), &di) && di.dli_fname) {
        char real[PATH_MAX];
        std::string p = realpath(di.dli_fname, real) ? real : di.dli_fname;
        e.rdma_core = rdma_core_from_lib(p);
    }
    glob_t g{};
    if (glob("/dev/infiniband/uverbs*", 0, nullptr, &g) == 0) e.uverbs = g.gl_pathc > 0;
    globfree(&g);
    e.mlx5_ib = exists("/sys/module/mlx5_ib");
    e.peermem = verbs::peermem_loaded();
    std::string v = read_file("/proc/driver/nvidia/version");
    if (!v.empty()) {
        e.nvidia_driver = v.substr(0, v.find('\n'));
        e.nvidia_open_modules = v.find("Open Kernel Module") != std::string::npos ? 1 : 0;
    }
    e.peer_mapping_override = peer_mapping_override_from_params(read_file("/proc/driver/nvidia/params"));
    e.cuda_built = cuda::built();
    e.gpu_count = gpu_count(&e.no_gpu);
    if (e.gpu_count > 0) e.no_gpu.clear();
    return e;
}

DeviceRow gather_device(const std::string& name, bool mlx5) {
    DeviceRow d;
    d.name = name;
    d.mlx5 = mlx5;
    d.sysfs = nic_sysfs(name);
    try {
        verbs::Device dev(name);
        d.fw = dev.caps().fw_ver;
        d.vendor_id = dev.caps().vendor_id;
        d.vendor_part_id = dev.caps().vendor_part_id;
        for (uint8_t p = 1; p <= dev.caps().phys_port_cnt; ++p) {
            PortRow r;
            r.port = p;
            try {
                verbs::PortInfo pi = dev.port(p);
                r.state = port_state_name(pi.state);
                r.link_layer = verbs::link_layer_name(pi.link_layer);
                r.active_mtu = pi.active_mtu;
                r.lid = pi.lid;
                for (const verbs::GidEntry& g : dev.gid_table(p))
                    r.gids.push_back({g.index, verbs::gid_to_string(g.gid), verbs::gid_type_name(g.type)});
                try {
                    verbs::GidEntry c = dev.choose_gid(p, -1);
                    r.chosen_gid = std::to_string(c.index) + " (" + verbs::gid_to_string(c.gid) + ", " +
                                   verbs::gid_type_name(c.type) + ")";
                } catch (const Error& e) {
                    r.chosen_gid = "";
                    r.error = e.what();
                }
            } catch (const Error& e) {
                r.error = e.what();
            }
            d.ports.push_back(r);
        }
    } catch (const Error& e) {
        d.open_error = e.what();
    }
    if (mlx5) {
        try {
            verbs::Device dev(name, verbs::Device::Open::Mlx5Devx);
            d.devx = true;
        } catch (const Error& e) {
            d.devx_error = e.what();
        }
    }
    return d;
}

PairRow gather_pair(const DeviceRow& d, int gpu, const Environment& env) {
    PairRow p;
    p.nic = d.name;
    p.gpu = gpu;
    std::unique_ptr<verbs::Device> dev;
    try {
        dev = std::make_unique<verbs::Device>(d.name, d.devx ? verbs::Device::Open::Mlx5Devx : verbs::Device::Open::Verbs);
        p.caps = probe_capabilities(dev->get(), d.name, d.devx, gpu);
    } catch (const Error& e) {
        p.caps.cuda_built = env.cuda_built;
        p.caps.gpu = gpu;
        p.caps.uar_map_error = std::string("the device could not be opened: ") + e.what();
    }
    p.caps.devx = d.devx;
    p.caps.devx_error = d.devx_error;
    const Capabilities& c = p.caps;
    QueueChoice q = choose_queues(MemoryKind::Default, c);
    p.queues = std::string(place_name(q.place)) + ": " + q.reason;
    HandlerChoice h = choose_handler(DoorbellHandler::Auto, c);
    p.handler = doorbell_handler_name(h.handler);
    p.handler_reason = h.fallback.empty() ? h.reason : h.fallback;
    FlushChoice f = choose_read_flush(ReadFlush::Auto, c);
    p.read_flush = f.needed;
    p.read_flush_reason = f.reason;
    p.why_not = gpu_queues_why_not(c);
    p.gpu_queues = p.why_not.empty();

    if (!c.cuda_built)
        p.missing.push_back({"CUDA in this build of gpuverbs", "it was configured without nvcc",
                             "rebuild with nvcc in PATH or at /usr/local/cuda/bin/nvcc (GV_ENABLE_CUDA=ON)"});
    else if (gpu < 0)
        p.missing.push_back({"a GPU", env.no_gpu.empty() ? std::string("none visible") : env.no_gpu,
                             "a CUDA GPU with the NVIDIA driver loaded"});
    if (!c.devx)
        p.missing.push_back({"DevX (queues in GPU memory are created with DevX commands)", c.devx_error, kDevxFix});
    if (gpu >= 0) {
        if (!c.dmabuf)
            p.missing.push_back({std::string("dma-buf registration of GPU memory") +
                                     (c.peermem ? " (nvidia-peermem serves instead)" : ""),
                                 "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0 on GPU " + std::to_string(gpu) +
                                     (env.nvidia_open_modules == 0 ? " (the proprietary NVIDIA kernel modules are loaded)" : ""),
                                 kDmabufFix});
        if (!c.peermem)
            p.missing.push_back({std::string("nvidia-peermem") + (c.dmabuf ? " (optional: dma-buf serves)" : ""),
                                 "the module is not loaded (no /sys/module/nvidia_peermem)", kPeermemFix});
        if (!c.uar_mappable)
            p.missing.push_back({"the GPU doorbell (the NIC's UAR page mapped into the GPU; the CPU proxy rings meanwhile)",
                                 c.uar_map_error, kPeerMappingOverrideFix});
        if (c.pcie == PcieRelation::SameRootComplex || c.pcie == PcieRelation::CrossSocket)
            p.missing.push_back({"a PCIe switch shared by the GPU and the NIC (queues go to host memory)",
                                 std::string("they are joined by ") + pcie_relation_name(c.pcie),
                                 "put them below one PCIe switch, or ask for MemoryKind::Device knowingly"});
    }
    return p;
}

}  // namespace

const char* likely_cause(uint8_t s) {
    switch (s) {
        case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR:
            return "a length the NIC refused: a SEND larger than the receive buffer, or a message over the port's limit";
        case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR:
            return "the NIC could not parse the WQE (opcode, ds count, inline size, QP number in the ctrl segment) or "
                   "the QP was not in RTS: a WQE format or doorbell bug";
        case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR:
            return "the lkey does not cover the local buffer (not registered, another protection domain, or GPU memory "
                   "registered without dma-buf/nvidia-peermem working)";
        case MLX5_CQE_SYNDROME_WR_FLUSH_ERR:
            return "the QP was already in ERROR: an earlier work request failed (see the first error)";
        case MLX5_CQE_SYNDROME_MW_BIND_ERR: return "a memory-window bind failed (not used by gpuverbs)";
        case MLX5_CQE_SYNDROME_BAD_RESP_ERR: return "the peer answered with an unexpected response (a transport bug)";
        case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR:
            return "the local buffer of a READ or atomic result lacks local-write access";
        case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR:
            return "the peer refused the request: a SEND larger than its receive, an atomic on an address not 8-byte "
                   "aligned, or an operation its QP does not enable";
        case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR:
            return "the rkey or the remote address range does not match a region the peer registered with that access, "
                   "or the peer QP lacks remote write/read/atomic access";
        case MLX5_CQE_SYNDROME_REMOTE_OP_ERR:
            return "the peer could not carry the request out (its receive WQE's buffer is not registered)";
        case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR:
            return "no acknowledgement came back: a wrong destination (GID, LID, QP number, PSN) in the address path, "
                   "a port that is down, or on RoCE no route or neighbour for the peer's GID (gpuverbs_info shows the "
                   "ports and GIDs)";
        case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR: return "the peer had no receive posted, for every retry";
        case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR: return "the peer aborted the operation";
    }
    return "an unknown syndrome: see the vendor syndrome in the PRM";
}

std::string rdma_core_from_lib(const std::string& path) {
    // libibverbs.so.1.<abi>.<rdma-core major>.<minor>
    const std::string key = "libibverbs.so.1.";
    size_t i = path.rfind(key);
    if (i == std::string::npos) return "";
    std::string rest = path.substr(i + key.size());  // "14.44.0"
    size_t a = rest.find('.');
    if (a == std::string::npos) return "";
    size_t b = rest.find('.', a + 1);
    std::string major = rest.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
    if (major.empty() || major.find_first_not_of("0123456789") != std::string::npos) return "";
    return major;
}

Report gather_report(const std::string& device, int gpu) {
    Report r;
    r.env = gather_env();
    std::vector<std::string> names;
    std::vector<bool> mlx5;
    list_rdma_devices(&names, &mlx5);
    for (size_t i = 0; i < names.size(); ++i)
        if (device.empty() || names[i] == device) r.devices.push_back(gather_device(names[i], mlx5[i]));
    for (int g = 0; g < r.env.gpu_count; ++g) {
        if (gpu != -2 && gpu != g) continue;
        r.gpus.push_back(probe_gpu(g));
        // The GPU's side of GPU-initiated RDMA, whether a ConnectX is here or not.
        const GpuFacts& f = r.gpus.back();
        std::vector<Missing> m;
        if (f.dmabuf != 1 && !r.env.peermem)
            m.push_back({"a way for a NIC to reach this GPU's memory",
                         "dma-buf is not supported (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = " + std::to_string(f.dmabuf) +
                             ") and nvidia-peermem is not loaded",
                         std::string(kDmabufFix) + "; or " + kPeermemFix});
        if (r.env.peer_mapping_override != 1)
            m.push_back({"the GPU doorbell (a NIC's doorbell page mapped into this GPU; without it a CPU proxy thread rings)",
                         r.env.peer_mapping_override == 0 ? "the NVIDIA driver's RegistryDwords lack PeerMappingOverride=1"
                                                          : "unknown: /proc/driver/nvidia/params cannot be read",
                         kPeerMappingOverrideFix});
        r.gpu_side.push_back(m);
        Capabilities c;
        c.gpu = g;
        c.gdr_writes_ordering = f.gdr_writes_ordering;
        FlushChoice fl = choose_read_flush(ReadFlush::Auto, c);
        r.gpu_notes.push_back(std::string("read flush: ") + (fl.needed ? "needed" : "not needed") + " (" + fl.reason + ")");
    }
    for (const DeviceRow& d : r.devices) {
        if (!d.mlx5) continue;
        if (r.gpus.empty()) r.pairs.push_back(gather_pair(d, -1, r.env));
        for (int g = 0; g < r.env.gpu_count; ++g)
            if (gpu == -2 || gpu == g) r.pairs.push_back(gather_pair(d, g, r.env));
    }
    if (names.empty())
        r.general.push_back({"an RDMA device", "libibverbs lists none",
                             "for a ConnectX: its kernel drivers (`modprobe mlx5_core mlx5_ib`) and rdma-core's "
                             "providers (ibverbs-providers); meanwhile gpuverbs runs its software device (Backend::Soft)"});
    if (!device.empty() && r.devices.empty())
        r.general.push_back({"RDMA device '" + device + "'", "libibverbs does not list it",
                             names.empty() ? "see above" : "choose one of the devices libibverbs lists (run without --device)"});
    if (!r.env.uverbs)
        r.general.push_back({"/dev/infiniband/uverbs*", "the userspace verbs device nodes do not exist",
                             "`modprobe ib_uverbs` (and, in a container, pass /dev/infiniband in)"});
    try {
        BackendChoice c = choose_backend(probe_backend_facts(), device);
        r.auto_choice = std::string("Backend::Auto would choose ") + backend_name(c.backend) +
                        (c.device.empty() ? "" : " on " + c.device) + ": " + c.reason;
    } catch (const Error& e) {
        r.auto_choice = std::string("Backend::Auto would fail: ") + e.what();
    }
    return r;
}

// ---- JSON --------------------------------------------------------------------------------
namespace {
std::string q(const std::string& s) {
    std::string o = "\"";
    for (unsigned char ch : s) {
        switch (ch) {
            case '"': o += "\\\""; break;
            case '\\': o += "\\\\"; break;
            case '\n': o += "\\n"; break;
            case '\t': o += "\\t"; break;
            default:
                if (ch < 0x20) {
                    char b[8];
                    std::snprintf(b, sizeof b, "\\u%04x", ch);
                    o += b;
                } else {
                    o += char(ch);
                }
        }
    }
    return o + "\"";
}
std::string b(bool v) { return v ? "true" : "false"; }
std::string missing_json(const std::vector<Missing>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i)
        s += std::string(i ? "," : "") + "{\"what\":" + q(v[i].what) + ",\"why\":" + q(v[i].why) + ",\"fix\":" + q(v[i].fix) + "}";
    return s + "]";
}
}  // namespace

std::string report_json(const Report& r) {
    std::ostringstream o;
    const Environment& e = r.env;
    o << "{\"tool\":\"gpuverbs_info\",\"mlx5_backend_ran_on_hardware\":false,";
    o << "\"system\":{\"kernel\":" << q(e.kernel) << ",\"rdma_core\":" << q(e.rdma_core) << ",\"uverbs\":" << b(e.uverbs)
      << ",\"mlx5_ib_loaded\":" << b(e.mlx5_ib) << ",\"nvidia_peermem_loaded\":" << b(e.peermem)
      << ",\"nvidia_driver\":" << q(e.nvidia_driver) << ",\"nvidia_open_kernel_modules\":"
      << (e.nvidia_open_modules < 0 ? "null" : b(e.nvidia_open_modules == 1))
      << ",\"peer_mapping_override\":" << (e.peer_mapping_override < 0 ? "null" : b(e.peer_mapping_override == 1))
      << ",\"cuda_built\":" << b(e.cuda_built) << ",\"gpu_count\":" << e.gpu_count << ",\"no_gpu\":" << q(e.no_gpu) << "},";
    o << "\"rdma_devices\":[";
    for (size_t i = 0; i < r.devices.size(); ++i) {
        const DeviceRow& d = r.devices[i];
        o << (i ? "," : "") << "{\"name\":" << q(d.name) << ",\"connectx\":" << b(d.mlx5) << ",\"sysfs\":" << q(d.sysfs)
          << ",\"fw\":" << q(d.fw) << ",\"vendor_id\":" << d.vendor_id << ",\"vendor_part_id\":" << d.vendor_part_id
          << ",\"devx\":" << b(d.devx) << ",\"devx_error\":" << q(d.devx_error) << ",\"open_error\":" << q(d.open_error)
          << ",\"ports\":[";
        for (size_t j = 0; j < d.ports.size(); ++j) {
            const PortRow& p = d.ports[j];
            o << (j ? "," : "") << "{\"port\":" << p.port << ",\"state\":" << q(p.state) << ",\"link_layer\":" << q(p.link_layer)
              << ",\"active_mtu\":" << p.active_mtu << ",\"lid\":" << p.lid << ",\"default_gid\":" << q(p.chosen_gid)
              << ",\"error\":" << q(p.error) << ",\"gids\":[";
            for (size_t k = 0; k < p.gids.size(); ++k)
                o << (k ? "," : "") << "{\"index\":" << p.gids[k].index << ",\"gid\":" << q(p.gids[k].gid)
                  << ",\"type\":" << q(p.gids[k].type) << "}";
            o << "]}";
        }
        o << "]}";
    }
    o << "],\"gpus\":[";
    for (size_t i = 0; i < r.gpus.size(); ++i) {
        const GpuFacts& g = r.gpus[i];
        o << (i ? "," : "") << "{\"index\":" << i << ",\"name\":" << q(g.name) << ",\"pci_bus_id\":" << q(g.pci_bus_id)
          << ",\"dmabuf_supported\":" << (g.dmabuf < 0 ? "null" : b(g.dmabuf == 1))
          << ",\"gpudirect_rdma_supported\":" << (g.gdr_supported < 0 ? "null" : b(g.gdr_supported == 1))
          << ",\"gpudirect_rdma_writes_ordering\":" << g.gdr_writes_ordering << ",\"driver_version\":" << g.driver_version
          << ",\"for_a_connectx_missing\":" << missing_json(i < r.gpu_side.size() ? r.gpu_side[i] : std::vector<Missing>{})
          << ",\"note\":" << q(i < r.gpu_notes.size() ? r.gpu_notes[i] : std::string()) << "}";
    }
    o << "],\"connectx_gpu_pairs\":[";
    for (size_t i = 0; i < r.pairs.size(); ++i) {
        const PairRow& p = r.pairs[i];
        const Capabilities& c = p.caps;
        o << (i ? "," : "") << "{\"nic\":" << q(p.nic) << ",\"gpu\":" << p.gpu << ",\"devx\":" << b(c.devx)
          << ",\"dmabuf\":" << b(c.dmabuf) << ",\"nvidia_peermem\":" << b(c.peermem) << ",\"uar_mappable\":" << b(c.uar_mappable)
          << ",\"uar_map_error\":" << q(c.uar_map_error) << ",\"pcie\":" << q(pcie_relation_name(c.pcie))
          << ",\"queues\":" << q(p.queues) << ",\"auto_doorbell_handler\":" << q(p.handler)
          << ",\"auto_doorbell_reason\":" << q(p.handler_reason) << ",\"read_flush\":" << b(p.read_flush)
          << ",\"read_flush_reason\":" << q(p.read_flush_reason) << ",\"kernels_can_drive_queues\":" << b(p.gpu_queues)
          << ",\"why_not\":" << q(p.why_not) << ",\"missing\":" << missing_json(p.missing) << "}";
    }
    o << "],\"missing\":" << missing_json(r.general) << ",\"auto\":" << q(r.auto_choice) << "}\n";
    return o.str();
}

}  // namespace gv::detail::mlx5be
