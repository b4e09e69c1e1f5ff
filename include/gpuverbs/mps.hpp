// CUDA MPS (Multi-Process Service): the helper that makes sure its control daemon runs before
// a process starts using the GPU.
//
// Two processes whose kernels talk to each other on one GPU (the software device across
// processes, the client-server sample) need MPS: without it the GPU time-slices between the
// processes' contexts, so a kernel waiting for its peer's kernel waits for a time slice.
// Measured on an H200, a flag ping-pong between kernels of two processes takes 1.5 us per
// round trip with MPS and 4.5 ms without.
//
// A process becomes an MPS client when it first initializes CUDA while the control daemon
// runs; a process that initialized CUDA before the daemon started stays a plain CUDA process
// until it exits. So call ensure() before the process's first CUDA call (before creating a
// gv::Context on a GPU, before Context::gpu_count(), before any cudaXxx call).
//
// Nothing here calls CUDA; it builds and works without CUDA too. The daemon is reached through
// its control pipe, $CUDA_MPS_PIPE_DIRECTORY/control (default /tmp/nvidia-mps/control), and
// the `nvidia-cuda-mps-control` program found in PATH (run in a child process, bounded in
// time, its output captured).
#pragma once

#include <string>

namespace gv::mps {

/// The directory of the daemon's control pipe: $CUDA_MPS_PIPE_DIRECTORY, or /tmp/nvidia-mps.
std::string pipe_directory();

/// True when the MPS control daemon is up: its control pipe exists and a client connects to
/// it (`echo get_server_list | nvidia-cuda-mps-control` succeeds within 3 s; without that
/// program in PATH, a connect() to the control socket). A stale pipe left by a daemon that
/// died reads as not running. Costs a stat(), plus one short child process when the pipe
/// exists.
bool running();

/// Makes sure MPS runs, before this process's first CUDA call (see above). Returns "" when
/// the daemon runs, or was started by this call (`nvidia-cuda-mps-control -d`, then up to 5 s
/// for it to answer). Otherwise returns one line that says why not and what to do, e.g. that
/// the daemon is not running and start_if_missing was false, that `nvidia-cuda-mps-control`
/// is not in PATH, or that it could not be started (with its own message, e.g. a permission
/// error: start it as the GPU's owner or root). Also non-empty when this call started the
/// daemon but the process had already loaded the CUDA driver (it is then not an MPS client).
/// Never throws for MPS trouble; the caller decides whether to go on without MPS.
std::string ensure(bool start_if_missing = true);

/// Stops the control daemon (`echo quit | nvidia-cuda-mps-control`) and waits up to 5 s until
/// running() is false. For tests and tools that started it with ensure(); it stops MPS for
/// every process of the machine using that pipe directory. Does nothing when the daemon is
/// not running; never throws.
void stop();

}  // namespace gv::mps
