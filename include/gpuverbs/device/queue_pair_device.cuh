// Device handle of a reliable-connection queue pair and the data-path operations on it:
// post WRITE / WRITE_IMM / READ / NOP / atomics / RECV, commit (doorbell), poll and wait.
//
// Every function is __host__ __device__: a CPU thread posts the very same WQEs a CUDA
// thread does. Posting here is thread scope in the "strong" form: the library reserves
// the WQE's position with an atomic, so any number of threads may post to one QP at once.
//
// The pieces, in dependency order: queue_pair_handle.cuh (QpHandle, flags, scopes),
// qp_ring.cuh (reservation and publication), qp_post.cuh (WQE builders), qp_weak.cuh
// (caller-chosen positions), qp_doorbell.cuh (commit, commit_weak, drive), qp_recv.cuh
// (receives), qp_wait.cuh (completions, QP state), qp_flush.cuh (the consistency step before
// consuming what a NIC wrote into GPU memory).
#pragma once

#include "gpuverbs/device/qp_flush.cuh"
