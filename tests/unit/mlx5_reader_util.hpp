// Shared by the mlx5 reader's tests (mlx5_reader_test.cpp, mlx5_reader_malformed_test.cpp,
// mlx5_reader_cqe_test.cpp): their seeds and iteration count, and the oracle that lays out a
// WQE's bytes with rdma-core's helpers and mlx5dv.h's structs, then places them on a ring.
#pragma once

#include <endian.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gpuverbs/mlx5/wqe_reader.cuh"
#include "unit/mlx5_test_util.hpp"

namespace mlx5test {

inline constexpr uint64_t kSeed = 0x6776'6d6c'7835'0002ull;
inline constexpr int kIters = 4000;

// ---- WQEs as rdma-core builds them -------------------------------------------------------

struct DataSeg {
    uint64_t addr;
    uint32_t byte_count;
    uint32_t lkey;
};

/// One WQE's contents, from which the oracle lays out the bytes.
struct WqeSpec {
    uint8_t opcode = MLX5_OPCODE_NOP;
    uint8_t fm_ce_se = 0;
    uint32_t qpn = 0;
    uint32_t imm_be = 0;
    uint64_t raddr = 0;
    uint32_t rkey = 0;
    uint64_t swap_add = 0, compare = 0;
    std::vector<DataSeg> data;      // data segments (atomics: the one local segment)
    std::vector<uint8_t> payload;   // inline payload, when `inline_data`
    bool inline_data = false;
};

/// The WQE's bytes, linear, built with rdma-core's helpers and mlx5dv.h's structs.
inline std::vector<uint8_t> oracle_bytes(const WqeSpec& s, uint64_t pos) {
    std::vector<uint8_t> w(16 * 64, 0);
    uint32_t k = 1;
    if (gv::mlx5::has_raddr(s.opcode)) {
        auto* r = reinterpret_cast<mlx5_wqe_raddr_seg*>(&w[16 * k++]);
        r->raddr = htobe64(s.raddr);
        r->rkey = htobe32(s.rkey);
        r->reserved = 0;
    }
    if (gv::mlx5::is_atomic(s.opcode)) {
        auto* a = reinterpret_cast<mlx5_wqe_atomic_seg*>(&w[16 * k++]);
        a->swap_add = htobe64(s.swap_add);
        a->compare = htobe64(s.compare);
    }
    if (s.inline_data) {
        auto* h = reinterpret_cast<mlx5_wqe_inl_data_seg*>(&w[16 * k]);
        h->byte_count = htobe32(uint32_t(s.payload.size()) | MLX5_INLINE_SEG);
        std::copy(s.payload.begin(), s.payload.end(), w.begin() + 16 * k + sizeof(*h));
        k += (sizeof(*h) + s.payload.size() + 15) / 16;
    } else {
        for (const DataSeg& d : s.data)
            mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(&w[16 * k++]), d.byte_count, d.lkey,
                                uintptr_t(d.addr));
    }
    mlx5dv_set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(w.data()), uint16_t(pos), s.opcode, 0, s.qpn,
                        s.fm_ce_se, uint8_t(k), 0, s.imm_be);
    w.resize(16 * k);
    return w;
}

/// Copies a WQE's 16-byte units to their ring positions (past the ring's end: its start).
inline void place(Ring& ring, uint64_t pos, const std::vector<uint8_t>& w) {
    for (size_t k = 0; k < w.size() / 16; ++k)
        std::memcpy(ring.base + (pos * 64 + k * 16) % ring.bytes(), &w[16 * k], 16);
}

}  // namespace mlx5test
