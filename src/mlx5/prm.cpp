#include "mlx5/prm.hpp"

#include <endian.h>

#include "gpuverbs/errors.hpp"

namespace gv::detail::prm {

std::string field_name(const Field& f) {
    std::string s = f.name ? f.name : "?";
    if (f.in && *f.in) s = std::string(f.in) + "/" + s;
    return s;
}

namespace {

void check_field(size_t buf_bytes, const Field& f) {
    if (!well_formed(f))
        throw InvalidUsage("PRM field " + field_name(f) + " (bit " + hex(f.bit) + ", " + std::to_string(f.width) +
                           " bits) is malformed: a field of up to 32 bits must lie inside one 32-bit word, a wider "
                           "one must start on a word and cover whole words");
    if (uint64_t(f.bit) + f.width > uint64_t(buf_bytes) * 8)
        throw InvalidUsage("PRM field " + field_name(f) + " (bits " + hex(f.bit) + ".." + hex(f.bit + f.width - 1) +
                           ") lies outside a buffer of " + std::to_string(buf_bytes) + " bytes");
}

uint32_t load_be(const void* buf, uint32_t word) {
    uint32_t v;
    std::memcpy(&v, static_cast<const uint8_t*>(buf) + size_t(word) * 4, 4);
    return be32toh(v);
}
void store_be(void* buf, uint32_t word, uint32_t v) {
    v = htobe32(v);
    std::memcpy(static_cast<uint8_t*>(buf) + size_t(word) * 4, &v, 4);
}

}  // namespace

void set_field(void* buf, size_t buf_bytes, const Field& f, uint64_t v) {
    check_field(buf_bytes, f);
    if (f.width < 64 && (v >> f.width) != 0)
        throw InvalidUsage("PRM field " + field_name(f) + " is " + std::to_string(f.width) + " bits wide: " +
                           std::to_string(v) + " (" + hex(v) + ") does not fit");
    if (f.width <= 32) {
        // DEVX_SET: the field's bits inside its big-endian word, counted from the top.
        const uint32_t word = f.bit / 32;
        const uint32_t shift = 32 - f.width - (f.bit % 32);
        const uint32_t mask = uint32_t((1ull << f.width) - 1) << shift;
        store_be(buf, word, (load_be(buf, word) & ~mask) | (uint32_t(v) << shift));
        return;
    }
    if (f.width == 64) {  // DEVX_SET64: a big-endian 64-bit value over two words
        store_be(buf, f.bit / 32, uint32_t(v >> 32));
        store_be(buf, f.bit / 32 + 1, uint32_t(v));
        return;
    }
    throw InvalidUsage("PRM field " + field_name(f) + " is " + std::to_string(f.width) +
                       " bits wide: set it with set_bytes (or a field inside it)");
}

uint64_t get_field(const void* buf, size_t buf_bytes, const Field& f) {
    check_field(buf_bytes, f);
    if (f.width <= 32) {
        const uint32_t shift = 32 - f.width - (f.bit % 32);
        return (load_be(buf, f.bit / 32) >> shift) & uint32_t((1ull << f.width) - 1);
    }
    if (f.width == 64) return (uint64_t(load_be(buf, f.bit / 32)) << 32) | load_be(buf, f.bit / 32 + 1);
    throw InvalidUsage("PRM field " + field_name(f) + " is " + std::to_string(f.width) +
                       " bits wide: read it with get_bytes (or a field inside it)");
}

Cmd::Cmd(uint32_t bits, const char* what) : words_((bits + 31) / 32, 0u), what_(what) {}

void Cmd::check(const Field& f) const { check_field(bytes(), f); }

void Cmd::set(const Field& f, uint64_t v) { set_field(words_.data(), bytes(), f, v); }

uint64_t Cmd::get(const Field& f) const { return get_field(words_.data(), bytes(), f); }

void Cmd::set_bytes(const Field& f, const void* src, size_t n) {
    check(f);
    if (f.bit % 8 != 0 || f.width != n * 8)
        throw InvalidUsage("PRM field " + field_name(f) + " (" + std::to_string(f.width) + " bits) cannot take " +
                           std::to_string(n) + " bytes");
    std::memcpy(reinterpret_cast<uint8_t*>(words_.data()) + f.bit / 8, src, n);
}

void Cmd::get_bytes(const Field& f, void* dst, size_t n) const {
    check(f);
    if (f.bit % 8 != 0 || f.width != n * 8)
        throw InvalidUsage("PRM field " + field_name(f) + " (" + std::to_string(f.width) + " bits) is not " +
                           std::to_string(n) + " bytes");
    std::memcpy(dst, reinterpret_cast<const uint8_t*>(words_.data()) + f.bit / 8, n);
}

}  // namespace gv::detail::prm
