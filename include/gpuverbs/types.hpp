// The vocabulary shared by the host API, the device API and every backend: one name per
// concept. Plain enums only (no device code), so host-only code can include it.
#pragma once

#include <cstdint>

namespace gv {

/// Which engine executes work requests. The values are also the backends' codes in the
/// out-of-band records (oob.hpp): never renumber them.
enum class Backend : uint8_t {
    Auto = 0,   ///< chosen when the context opens (see Context and choose_backend)
    Soft = 1,   ///< the software RDMA device (any machine)
    Mlx5 = 2,   ///< a ConnectX NIC whose queues kernels drive directly
    Verbs = 3,  ///< any libibverbs device, through a CPU proxy thread
};

/// "auto", "soft", "mlx5", "verbs".
const char* backend_name(Backend b);

/// Access rights of a memory region or of a QP as responder; the bit values of enum
/// ibv_access_flags. Local read is implied.
enum Access : uint32_t {
    kLocalWrite = 1u << 0,
    kRemoteWrite = 1u << 1,
    kRemoteRead = 1u << 2,
    kRemoteAtomic = 1u << 3,
    kAllAccess = kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic,
};

/// QP states, numbered as enum ibv_qp_state (the software device stores these values).
enum class QpState : uint32_t { Reset = 0, Init = 1, Rtr = 2, Rts = 3, Sqd = 4, Sqe = 5, Error = 6 };

/// "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERROR".
const char* qp_state_name(QpState s);

/// Where a queue (WQE ring, CQE ring, doorbell records) lives.
enum class MemoryKind {
    Default,  ///< GPU memory when the context executes on a GPU, else host memory
    Host,     ///< pinned host memory (CPU threads can post and poll; GPUs reach it mapped)
    Device,   ///< GPU memory (fastest for kernels; CPU threads cannot touch it)
};

}  // namespace gv
