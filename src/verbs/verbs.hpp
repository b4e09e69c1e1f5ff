// The verbs control layer (internal, namespace gv::detail::verbs): what the verbs and mlx5
// backends share to reach a libibverbs device. docs/verbs.md describes it.
//   Device   list_devices(), open by name, caps, ports, GID tables and the GID choice
//   Pd, Mr   protection domain; memory regions on host memory and GPU memory
//   Cq       completion queue with bounded polling
//   RcQp     RC queue pair: capabilities checked, RESET -> INIT -> RTR -> RTS
//   status   ibv_wc_status <-> mlx5 CQE syndrome
#pragma once

#include "verbs/addressing.hpp"
#include "verbs/cq.hpp"
#include "verbs/device.hpp"
#include "verbs/memory.hpp"
#include "verbs/qp.hpp"
#include "verbs/status.hpp"
