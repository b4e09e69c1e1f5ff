// Host-side decisions that depend on which backend: choosing one for Backend::Auto, and
// checking an endpoint's backend-specific part.
#include "core/backend.hpp"
#include "soft/locator.hpp"

namespace gv::detail {

namespace {
std::string list(const BackendFacts& f) {
    if (f.devices.empty()) return "none";
    std::string s;
    for (size_t i = 0; i < f.devices.size(); ++i)
        s += (i ? ", " : "") + f.devices[i] + (f.is_mlx5[i] ? " (mlx5)" : "");
    return s;
}
}  // namespace

BackendChoice choose_backend(const BackendFacts& f, const std::string& wanted) {
    GV_REQUIRE(f.devices.size() == f.is_mlx5.size(), "BackendFacts: one is_mlx5 entry per device expected");
    int pick = -1;  // the device considered: the wanted one, else the first ConnectX, else the first
    for (size_t i = 0; i < f.devices.size(); ++i) {
        if (!wanted.empty()) {
            if (f.devices[i] == wanted) pick = int(i);
        } else if (pick < 0 || (f.is_mlx5[i] && !f.is_mlx5[size_t(pick)])) {
            pick = int(i);
        }
    }
    if (!wanted.empty() && pick < 0)
        throw InvalidUsage("Backend::Auto with ContextOptions::device '" + wanted +
                           "': no RDMA device of that name (RDMA devices present: " + list(f) + ")");
    BackendChoice c;
    if (pick < 0) {
        c.reason = "no RDMA device present: the software RDMA device";
        return c;
    }
    const std::string& name = f.devices[size_t(pick)];
    const bool mlx5 = f.is_mlx5[size_t(pick)];
    if (mlx5 && f.mlx5_gpu_queues) {
        c.backend = Backend::Mlx5;
        c.device = name;
        c.reason = name + " is a ConnectX whose queues kernels can drive: mlx5";
        return c;
    }
    const std::string not_mlx5 =
        mlx5 ? name + " is a ConnectX, but kernels cannot drive its queues here (" +
                   (f.mlx5_why_not.empty() ? std::string("unknown reason") : f.mlx5_why_not) + ")"
             : name + " is not a ConnectX";
    if (f.verbs_backend) {
        c.backend = Backend::Verbs;
        c.device = name;
        c.reason = not_mlx5 + ": verbs, through a CPU proxy thread";
        return c;
    }
    c.reason = not_mlx5 + ", and this build has no verbs backend: the software RDMA device";
    return c;
}

BackendFacts probe_backend_facts() {
    BackendFacts f;
    list_rdma_devices(&f.devices, &f.is_mlx5);
    // The ConnectX choose_backend() would consider without a device named: the first one.
    f.mlx5_gpu_queues = false;
    for (size_t i = 0; i < f.devices.size(); ++i) {
        if (!f.is_mlx5[i]) continue;
        try {
            f.mlx5_why_not = mlx5_gpu_queues_why_not(f.devices[i]);
        } catch (const Error& e) {
            f.mlx5_why_not = e.what();
        }
        f.mlx5_gpu_queues = f.mlx5_why_not.empty();
        break;
    }
    f.verbs_backend = true;
    return f;
}

std::string check_endpoint_extra(Backend backend, const EndpointExtra& extra) {
    if (extra.size > EndpointExtra::kMaxBytes)
        return "backend-specific part of " + std::to_string(extra.size) + " bytes, more than " +
               std::to_string(EndpointExtra::kMaxBytes);
    switch (backend) {
        case Backend::Soft: return soft::check_extra(extra);
        case Backend::Mlx5:
        case Backend::Verbs:
            if (extra.size)
                return std::string("a ") + backend_name(backend) + " endpoint carries " +
                       std::to_string(extra.size) + " backend-specific bytes (expected none)";
            return {};
        case Backend::Auto: break;
    }
    return "backend auto is not a concrete backend (soft, mlx5 or verbs)";
}

}  // namespace gv::detail
