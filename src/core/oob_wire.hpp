// Little-endian reads and the backends' wire codes, shared by the records (oob_records.cpp)
// and the channel (oob.cpp).
#pragma once

#include <cstdint>

#include "gpuverbs/context.hpp"

namespace gv::oob::wire {

inline uint16_t get16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }
inline uint32_t get32(const uint8_t* p) { return uint32_t(get16(p)) | uint32_t(get16(p + 2)) << 16; }
inline uint64_t get64(const uint8_t* p) { return uint64_t(get32(p)) | uint64_t(get32(p + 4)) << 32; }

/// Backends on the wire have their own codes, independent of the enum's order (0: none).
inline uint8_t backend_code(Backend b) {
    switch (b) {
        case Backend::Soft: return 1;
        case Backend::Mlx5: return 2;
        case Backend::Verbs: return 3;
        case Backend::Auto: break;
    }
    return 0;
}

}  // namespace gv::oob::wire
