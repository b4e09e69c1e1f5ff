#include "mlx5/memory.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "cuda/cuda_rt.hpp"
#include "gpuverbs/errors.hpp"

namespace gv::detail::mlx5be {

Block alloc_block(int gpu, Place place, size_t bytes, size_t align, int fill) {
    Block b;
    b.bytes = bytes;
    b.place = place;
    const size_t pg = size_t(sysconf(_SC_PAGESIZE));
    if (align < pg) align = pg;
    if (place == Place::Gpu) {
        GV_REQUIRE(gpu >= 0, "GPU queue memory on a CPU-only context");
        b.gpu = gpu_alloc(gpu, bytes, align, fill);
        b.p = static_cast<uint8_t*>(b.gpu.ptr);
        return b;
    }
    const size_t total = round_up(bytes, align);
    if (gpu >= 0) {
        cuda::set_device(gpu);
        void* d = nullptr;
        void* h = cuda::host_alloc(total, &d);  // page-aligned, zeroed
        if (d != h) {
            cuda::host_free(h);
            throw NotSupported("the mlx5 backend needs unified addressing (pinned host memory at the same address "
                               "on CPU and GPU)");
        }
        b.host_base = h;
        b.pinned = true;
        b.p = static_cast<uint8_t*>(h);
    } else {
        void* h = std::aligned_alloc(align, total);
        if (!h) throw SystemError("aligned_alloc(" + std::to_string(total) + ") of queue memory", ENOMEM);
        b.host_base = h;
        b.p = static_cast<uint8_t*>(h);
    }
    std::memset(b.p, fill, total);
    return b;
}

void free_block(Block& b) noexcept {
    if (b.place == Place::Gpu) {
        gpu_free(b.gpu);
    } else if (b.host_base) {
        if (b.pinned) cuda::host_free(b.host_base);
        else std::free(b.host_base);
    }
    b = Block{};
}

void write_block(const Block& b, size_t off, const void* src, size_t n) {
    if (b.place == Place::Gpu) cuda::copy_to_device(b.p + off, src, n);
    else std::memcpy(b.p + off, src, n);
}

void read_block(const Block& b, size_t off, void* dst, size_t n) {
    if (b.place == Place::Gpu) cuda::copy_from_device(dst, b.p + off, n);
    else std::memcpy(dst, b.p + off, n);
}

void fill_block(const Block& b, size_t off, int v, size_t n) {
    if (b.place == Place::Gpu) cuda::memset_device(b.p + off, v, n);
    else std::memset(b.p + off, v, n);
}

}  // namespace gv::detail::mlx5be
