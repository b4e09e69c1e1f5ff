// gpuverbs_info: what this machine offers GPU-initiated RDMA, and what is missing.
//
// Lists the RDMA devices (ports, link layers, GIDs with their types and indexes), the GPUs,
// and for every ConnectX with every GPU whether kernels can drive its queues: dma-buf
// registration, nvidia-peermem, DevX, the doorbell page mapped into the GPU
// (PeerMappingOverride), the PCIe relation, and the doorbell handler DoorbellHandler::Auto
// would pick. Each missing piece comes with the exact reason and the fix. Exit status 0 when
// it could look (also on a machine with no RDMA device or no GPU), 1 when looking failed, 2
// for a bad command line.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli.hpp"
#include "gpuverbs/gpuverbs.hpp"
#include "mlx5/report.hpp"

namespace be = gv::detail::mlx5be;

namespace {

const char* kUsage =
    "usage: gpuverbs_info [--device NAME] [--gpu N] [--json]\n"
    "\n"
    "What this machine offers GPU-initiated RDMA with gpuverbs: RDMA devices (ports, link\n"
    "layers, GIDs), GPUs, and for every ConnectX with every GPU whether kernels can drive its\n"
    "queues (dma-buf, nvidia-peermem, DevX, the doorbell mapped into the GPU, PCIe), which\n"
    "doorbell handler Auto would pick, and each missing piece with its reason and fix.\n"
    "\n"
    "  --device NAME   only this RDMA device (e.g. mlx5_0)\n"
    "  --gpu N         only GPU N\n"
    "  --json          one JSON object on stdout instead of text\n"
    "  -h, --help      this text\n"
    "\n"
    "Exit status: 0 it could look (also with no RDMA device or no GPU: it says so), 1 looking\n"
    "failed, 2 a bad command line.\n"
    "Note: the mlx5 (ConnectX) backend of this version has not run on ConnectX hardware yet;\n"
    "gv_selftest is its first run on a machine that has one.\n";

void print_missing(const std::vector<be::Missing>& v, const char* indent) {
    for (const be::Missing& m : v) {
        std::printf("%s- missing: %s\n", indent, m.what.c_str());
        if (!m.why.empty()) std::printf("%s    why: %s\n", indent, m.why.c_str());
        if (!m.fix.empty()) std::printf("%s    fix: %s\n", indent, m.fix.c_str());
    }
}

const char* yes(bool v) { return v ? "yes" : "no"; }

std::string ordering_name(int v) {
    switch (v) {
        case 0: return "none (0): a flush READ before consuming NIC writes";
        case 100: return "owner (100): its own kernels see NIC writes in order";
        case 200: return "all devices (200)";
        case -1: return "unknown";
    }
    return std::to_string(v);
}

void print_text(const be::Report& r) {
    const be::Environment& e = r.env;
    std::printf("gpuverbs_info (gpuverbs %u.%u): GPU-initiated RDMA on this machine\n\n", gv::kVersionMajor,
                gv::kVersionMinor);
    std::printf("System\n");
    std::printf("  kernel %s; rdma-core %s; /dev/infiniband/uverbs*: %s; mlx5_ib loaded: %s\n", e.kernel.c_str(),
                e.rdma_core.empty() ? "(version unknown)" : e.rdma_core.c_str(), e.uverbs ? "present" : "none",
                yes(e.mlx5_ib));
    std::printf("  NVIDIA driver: %s%s\n", e.nvidia_driver.empty() ? "not loaded (no /proc/driver/nvidia/version)" : e.nvidia_driver.c_str(),
                e.nvidia_open_modules == 1 ? " [open kernel modules]" : e.nvidia_open_modules == 0 ? " [proprietary kernel modules]" : "");
    std::printf("  nvidia-peermem loaded: %s; PeerMappingOverride: %s\n", yes(e.peermem),
                e.peer_mapping_override == 1   ? "set (NVreg_RegistryDwords)"
                : e.peer_mapping_override == 0 ? "not set"
                                               : "unknown (no /proc/driver/nvidia/params)");
    if (!e.cuda_built) std::printf("  CUDA: this build of gpuverbs has none (kernels cannot drive queues)\n");
    else if (e.gpu_count == 0) std::printf("  CUDA: built; no GPU: %s\n", e.no_gpu.c_str());
    else std::printf("  CUDA: built; %d GPU(s)\n", e.gpu_count);

    std::printf("\nRDMA devices\n");
    if (r.devices.empty()) std::printf("  none: libibverbs lists no RDMA device\n");
    for (const be::DeviceRow& d : r.devices) {
        if (d.mlx5)
            std::printf("  %s  ConnectX (mlx5)  fw %s  part %u  DevX: %s\n", d.name.c_str(), d.fw.c_str(), d.vendor_part_id,
                        d.devx ? "yes" : ("no (" + d.devx_error + ")").c_str());
        else
            std::printf("  %s  not a ConnectX: the mlx5 backend does not apply (the verbs backend, a CPU proxy, serves it)\n",
                        d.name.c_str());
        if (!d.sysfs.empty()) std::printf("    PCI: %s\n", d.sysfs.c_str());
        if (!d.open_error.empty()) std::printf("    cannot open: %s\n", d.open_error.c_str());
        for (const be::PortRow& p : d.ports) {
            std::printf("    port %u  %s  %s  active MTU %u%s\n", p.port, p.state.c_str(), p.link_layer.c_str(),
                        p.active_mtu, p.link_layer == "InfiniBand" ? (" LID " + std::to_string(p.lid)).c_str() : "");
            if (p.gids.empty()) std::printf("      no GID (a RoCE port needs an IP address on its netdev)\n");
            for (const be::GidRow& g : p.gids)
                std::printf("      GID %-3u %-40s %s\n", g.index, g.gid.c_str(), g.type.c_str());
            if (!p.chosen_gid.empty()) std::printf("      default source GID: index %s\n", p.chosen_gid.c_str());
            if (!p.error.empty()) std::printf("      %s\n", p.error.c_str());
        }
    }

    std::printf("\nGPUs\n");
    if (r.gpus.empty()) std::printf("  none: %s\n", e.no_gpu.empty() ? "no GPU visible" : e.no_gpu.c_str());
    for (size_t i = 0; i < r.gpus.size(); ++i) {
        const be::GpuFacts& g = r.gpus[i];
        std::printf("  GPU %zu  %s  %s\n", i, g.name.c_str(), g.pci_bus_id.c_str());
        std::printf("    dma-buf registration: %s; GPUDirect RDMA: %s; GPUDirect RDMA write ordering: %s\n",
                    g.dmabuf < 0 ? "unknown" : yes(g.dmabuf == 1), g.gdr_supported < 0 ? "unknown" : yes(g.gdr_supported == 1),
                    ordering_name(g.gdr_writes_ordering).c_str());
        if (i < r.gpu_notes.size()) std::printf("    %s\n", r.gpu_notes[i].c_str());
        if (i < r.gpu_side.size()) {
            if (r.gpu_side[i].empty()) std::printf("    ready for a ConnectX on its side (NIC access to its memory, GPU doorbell)\n");
            else std::printf("    for a ConnectX, on this GPU's side:\n");
            print_missing(r.gpu_side[i], "      ");
        }
    }

    std::printf("\nConnectX with GPU\n");
    if (r.pairs.empty())
        std::printf("  nothing to pair: %s\n", r.devices.empty() ? "no RDMA device" : "no ConnectX among the RDMA devices");
    for (const be::PairRow& p : r.pairs) {
        const be::Capabilities& c = p.caps;
        if (p.gpu >= 0) std::printf("  %s + GPU %d\n", p.nic.c_str(), p.gpu);
        else std::printf("  %s (no GPU: CPU threads post)\n", p.nic.c_str());
        if (p.gpu >= 0) {
            std::printf("    dma-buf: %s; nvidia-peermem: %s; DevX: %s; PCIe: %s\n", yes(c.dmabuf), yes(c.peermem),
                        yes(c.devx), be::pcie_relation_name(c.pcie));
            std::printf("    doorbell page (UAR) maps into the GPU: %s\n",
                        c.uar_mappable ? "yes" : ("no: " + c.uar_map_error).c_str());
        }
        std::printf("    queues by default: %s\n", p.queues.c_str());
        std::printf("    DoorbellHandler::Auto picks: %s (%s)\n", p.handler.c_str(), p.handler_reason.c_str());
        std::printf("    read flush: %s (%s)\n", yes(p.read_flush), p.read_flush_reason.c_str());
        std::printf("    kernels can drive its queues: %s\n", p.gpu_queues ? "yes" : ("no: " + p.why_not).c_str());
        print_missing(p.missing, "    ");
    }
    if (!r.general.empty()) {
        std::printf("\nMissing\n");
        print_missing(r.general, "  ");
    }
    std::printf("\n%s\n", r.auto_choice.c_str());
    std::printf("Not verified on hardware: the mlx5 backend of this version has not run on a ConnectX yet; on a\n"
                "machine with one, run gv_selftest (loopback WRITE, READ, SEND, atomics, put-with-signal from a kernel).\n");
}

}  // namespace

int main(int argc, char** argv) {
    std::string device;
    int gpu = -2;
    bool json = false;
    return gvcli::run(argc, argv, kUsage, [&](gvcli::Args& args) -> int {
        while (args.next()) {
            if (args.is("--device")) {
                device = args.value();
                if (device.empty()) throw gvcli::UsageError("--device needs a device name (e.g. mlx5_0)");
            } else if (args.is("--gpu")) {
                gpu = int(args.integer(0, 1023));
            } else if (args.is("--json")) {
                json = true;
            } else {
                args.unknown();
            }
        }
        be::Report r = be::gather_report(device, gpu);
        if (json) std::fputs(be::report_json(r).c_str(), stdout);
        else print_text(r);
        return 0;
    });
}
