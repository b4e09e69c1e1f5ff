// Same-address shared arena of a CPU-domain software device (docs/cross-process-plan.md).
//
// Everything a CPU-domain SoftDevice allocates (QpState, CqState, MR table, rings, doorbell
// records, counters) and every gv::SharedBuffer comes from one memfd mapped MAP_SHARED at a
// random 1 GiB-aligned address. A peer process maps the same file at the same address, so
// every pointer stored inside the state is valid in both processes unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace gv::detail {

/// First bytes of every arena: lets an importer check it mapped what the locator promised.
struct ArenaHeader {
    uint64_t magic;  ///< kArenaMagic
    uint64_t base;   ///< the address the owner mapped it at
    uint64_t size;
    uint32_t pid;    ///< owner process
    uint32_t version;
};
inline constexpr uint64_t kArenaMagic = 0x414e455241564721ull;  // "!GVARENA"

class Arena {
public:
    static constexpr size_t kDefaultSize = size_t(1) << 30;  ///< sparse: pages appear on touch
    static constexpr size_t kPage = 4096;

    /// Creates the memfd and maps it; throws SystemError when no address range was free.
    explicit Arena(size_t size = kDefaultSize);
    ~Arena();
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;

    /// Zeroed, 4 KiB-aligned memory of at least `bytes`; throws when the arena is full.
    void* alloc(size_t bytes);
    void free(void* p, size_t bytes);
    bool contains(const void* p, size_t bytes) const {
        auto a = reinterpret_cast<uintptr_t>(p);
        return a >= base_ && bytes <= size_ && a - base_ <= size_ - bytes;
    }

    int fd() const { return fd_; }
    uint64_t base() const { return base_; }
    uint64_t size() const { return size_; }
    uint32_t pid() const { return pid_; }

private:
    int fd_ = -1;
    uintptr_t base_ = 0;
    size_t size_ = 0;
    uint32_t pid_ = 0;
    std::mutex mu_;
    size_t bump_ = 0;                    ///< first never-used byte (offset)
    std::map<size_t, size_t> free_;     ///< offset -> bytes, coalesced
};

/// Maps the arena of process `pid` (its descriptor `fd`) at `base` in this process, once per
/// arena; imports stay mapped for the process lifetime, so no pointer a QP holds into a peer
/// that died or went away ever dangles. Throws gv::Error subclasses with the reason when the
/// file cannot be opened, the range is taken, or the header disagrees.
void import_arena(uint32_t pid, uint32_t fd, uint64_t base, uint64_t size);

}  // namespace gv::detail
