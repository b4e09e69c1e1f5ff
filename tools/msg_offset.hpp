// Where the benchmarks and the demo place their messages. Host and device code: the CUDA
// tools, the benchmarks' CPU-only build (gv_bench.cu compiled as C++) and the demo share it, so
// that source and target, GPU and CPU initiators compute one offset.
#pragma once

#include <cstdint>

#include "gpuverbs/config.hpp"

namespace gvbench {

/// Where message i of size bytes sits in a slice, on both sides (its source and its target):
/// the slice's slice / size slots in turn, each at a multiple of size, as perftest places its
/// messages, so that a message of 8 bytes is 8-byte aligned, one of 4 KiB 4 KiB-aligned. (The
/// offsets were (i * size) % (slice - size + 1) before 2026-12-07: for even sizes the modulus is
/// odd, so after the first pass through the slice every message sat at an odd offset, and the
/// executor copied it in bytes and half-words.) slice >= size (the callers skip larger sizes).
GV_HOST_DEVICE uint64_t msg_off(uint64_t i, uint32_t size, uint64_t slice) { return (i % (slice / size)) * size; }

}  // namespace gvbench
