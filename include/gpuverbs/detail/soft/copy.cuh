// The executing group's cooperative copy. Part of the software device's executor
// (gpuverbs/detail/soft/exec.cuh).
#pragma once

#include <cstring>

#include "gpuverbs/detail/group.cuh"
#include "gpuverbs/detail/soft/state.cuh"

namespace gv::detail::soft {

// ---- cooperative copy ---------------------------------------------------------------

template <typename T, typename G>
GV_HOST_DEVICE void copy_words(const G& g, T* d, const T* s, uint64_t n) {
    const uint64_t step = g.size();
    uint64_t i = g.rank();
    // Four independent loads in flight per thread before the stores.
    for (; i + 3 * step < n; i += 4 * step) {
        T a = s[i], b = s[i + step], c = s[i + 2 * step], e = s[i + 3 * step];
        d[i] = a;
        d[i + step] = b;
        d[i + 2 * step] = c;
        d[i + 3 * step] = e;
    }
    for (; i < n; i += step) d[i] = s[i];
}

#if defined(__CUDACC__)
/// Copies a short range (head or tail of a copy) alone, in the widest aligned stores the
/// mutual alignment `unit` allows, so an aligned 2-, 4- or 8-byte value (a flag) is never
/// written byte by byte: a poller sees it change at once, as with a NIC's DMA.
__device__ __forceinline__ void copy_small(uint8_t* d, const uint8_t* s, uint64_t n, uint32_t unit) {
    while (n) {
        const uintptr_t a = reinterpret_cast<uintptr_t>(d);
        if (unit >= 8 && n >= 8 && !(a & 7)) {
            *reinterpret_cast<uint64_t*>(d) = *reinterpret_cast<const uint64_t*>(s);
            d += 8, s += 8, n -= 8;
        } else if (unit >= 4 && n >= 4 && !(a & 3)) {
            *reinterpret_cast<uint32_t*>(d) = *reinterpret_cast<const uint32_t*>(s);
            d += 4, s += 4, n -= 4;
        } else if (unit >= 2 && n >= 2 && !(a & 1)) {
            *reinterpret_cast<uint16_t*>(d) = *reinterpret_cast<const uint16_t*>(s);
            d += 2, s += 2, n -= 2;
        } else {
            *d++ = *s++;
            --n;
        }
    }
}
#endif

/// The group copies len bytes from src to dst (executor pointers). Returns whether the
/// calling thread stored anything (only those threads need to fence).
template <typename G>
GV_HOST_DEVICE bool group_copy(const G& g, uint64_t dst, uint64_t src, uint64_t len) {
    if (len == 0) return false;
#if GV_DEVICE_CODE
    auto* d = reinterpret_cast<uint8_t*>(dst);
    const auto* s = reinterpret_cast<const uint8_t*>(src);
    const uint64_t x = dst ^ src;
    const uint32_t unit = (x & 15) == 0 ? 16 : (x & 7) == 0 ? 8 : (x & 3) == 0 ? 4 : (x & 1) == 0 ? 2 : 1;
    // Head up to the unit's alignment and tail after the last whole unit: one thread, in
    // the widest aligned stores; the units in between: the whole group.
    uint64_t head = (unit - (dst & (unit - 1))) & (unit - 1);
    if (head > len) head = len;
    const uint64_t words = (len - head) / unit;
    const uint64_t tail = len - head - words * unit;
    if (g.rank() == 0 && head) copy_small(d, s, head, unit);
    uint8_t* bd = d + head;
    const uint8_t* bs = s + head;
    switch (unit) {
        case 16: copy_words(g, reinterpret_cast<uint4*>(bd), reinterpret_cast<const uint4*>(bs), words); break;
        case 8: copy_words(g, reinterpret_cast<uint64_t*>(bd), reinterpret_cast<const uint64_t*>(bs), words); break;
        case 4: copy_words(g, reinterpret_cast<uint32_t*>(bd), reinterpret_cast<const uint32_t*>(bs), words); break;
        case 2: copy_words(g, reinterpret_cast<uint16_t*>(bd), reinterpret_cast<const uint16_t*>(bs), words); break;
        default: copy_words(g, bd, bs, words); break;
    }
    if (tail && g.rank() == 0) copy_small(bd + words * unit, bs + words * unit, tail, unit);
    // Threads store only when their rank is below the number of pieces (all < len).
    return g.rank() < len;
#else
    // A CPU thread executes alone (ThreadGroup); a group of CPU threads (the tests that run
    // the executor's group path on the CPU) copies a byte share each.
    if (g.size() == 1) {
        std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), len);
        return true;
    }
    copy_words(g, reinterpret_cast<uint8_t*>(dst), reinterpret_cast<const uint8_t*>(src), len);
    return g.rank() < len;
#endif
}

}  // namespace gv::detail::soft
