// Queue memory of the ConnectX backend (and of the stand-in NIC the tests use): GPU memory, or
// host memory (pinned and mapped for kernels on a GPU context, plain on a CPU-only one), with
// the copies and fills the host side needs. One pointer per block serves CPU threads and
// kernels alike: GPU memory is kernels' only; pinned host memory is mapped at the same address
// (unified addressing, checked).
#pragma once

#include <cstddef>
#include <cstdint>

#include "mlx5/decide.hpp"
#include "mlx5/gpu_access.hpp"

namespace gv::detail::mlx5be {

struct Block {
    uint8_t* p = nullptr;  ///< the memory: kernels' pointer; CPU threads' too when host memory
    size_t bytes = 0;
    Place place = Place::Host;
    GpuBlock gpu;
    void* host_base = nullptr;  ///< what frees host memory
    bool pinned = false;        ///< host memory from cudaHostAlloc
    template <typename T = uint8_t>
    T* at(size_t off) const {
        return reinterpret_cast<T*>(p + off);
    }
};

/// `bytes` of `place` memory for `gpu` (-1: CPU-only context, host memory only), `align`-aligned
/// (a power of two, at least the page size for memory a NIC registers), filled with `fill`.
Block alloc_block(int gpu, Place place, size_t bytes, size_t align, int fill);
void free_block(Block& b) noexcept;
void write_block(const Block& b, size_t off, const void* src, size_t n);
void read_block(const Block& b, size_t off, void* dst, size_t n);
void fill_block(const Block& b, size_t off, int v, size_t n);

inline uint32_t next_pow2(uint64_t v) {
    uint32_t p = 1;
    while (p < v) p <<= 1;
    return p;
}
inline uint32_t log2u(uint64_t v) {
    uint32_t l = 0;
    while ((uint64_t(1) << l) < v) ++l;
    return l;
}
inline size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

}  // namespace gv::detail::mlx5be
