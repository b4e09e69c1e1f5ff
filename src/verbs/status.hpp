// Completion statuses: libibverbs' enum ibv_wc_status mapped to the mlx5 CQE syndromes
// (MLX5_CQE_SYNDROME_* of <infiniband/mlx5dv.h>) that the software device writes and the
// device code reads, and back. Pure functions, no device needed; the table is in docs/verbs.md.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace gv::detail::verbs {

/// The mlx5 syndrome a completion with status `s` is reported with (0 for IBV_WC_SUCCESS).
/// Every status maps to a syndrome: the ones with no mlx5 counterpart (the RD/EEC statuses,
/// FATAL, GENERAL, tag matching, values past the enum) to the nearest class, see
/// wc_status_exact().
uint8_t wc_status_to_syndrome(ibv_wc_status s);

/// True when syndrome_to_wc_status(wc_status_to_syndrome(s)) == s, i.e. the mlx5 CQE carries
/// the status without loss.
bool wc_status_exact(ibv_wc_status s);

/// The status libmlx5 reports for an error CQE with this syndrome (its
/// mlx5_handle_error_cqe rules): IBV_WC_SUCCESS for 0, IBV_WC_GENERAL_ERR for a syndrome
/// mlx5 does not define.
ibv_wc_status syndrome_to_wc_status(uint8_t syndrome);

/// "REMOTE_ACCESS_ERR" for MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, "SUCCESS" for 0,
/// "UNKNOWN_SYNDROME" for others.
const char* syndrome_name(uint8_t syndrome);

/// "IBV_WC_REM_ACCESS_ERR" for IBV_WC_REM_ACCESS_ERR (the enumerator's name, unlike
/// ibv_wc_status_str's prose), "IBV_WC_UNKNOWN" past the enum.
const char* wc_status_name(ibv_wc_status s);

}  // namespace gv::detail::verbs
