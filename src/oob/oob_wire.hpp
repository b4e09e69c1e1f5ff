// Little-endian reads and the backends' wire codes, shared by the records (oob_records.cpp)
// and the channel (oob_socket.cpp, oob_exchange.cpp).
#pragma once

#include <cstdint>

#include "gpuverbs/types.hpp"

namespace gv::oob::wire {

inline uint16_t get16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }
inline uint32_t get32(const uint8_t* p) { return uint32_t(get16(p)) | uint32_t(get16(p + 2)) << 16; }
inline uint64_t get64(const uint8_t* p) { return uint64_t(get32(p)) | uint64_t(get32(p + 4)) << 32; }

/// A backend's code on the wire: its enum value (types.hpp fixes them); 0 (Auto) is no
/// concrete backend and never valid in a record.
inline uint8_t backend_code(Backend b) { return uint8_t(b); }

/// The backend a wire code names; false for 0 and unknown codes.
inline bool backend_from_code(uint8_t c, Backend* b) {
    if (c < uint8_t(Backend::Soft) || c > uint8_t(Backend::Verbs)) return false;
    *b = Backend(c);
    return true;
}

}  // namespace gv::oob::wire
