// Same-address shared arena of a software device (docs/cross-process.md).
//
// Everything a SoftDevice allocates (QpState, CqState, MR table, rings, doorbell records,
// counters) and every gv::SharedBuffer comes from one arena mapped at a random address:
//  - CPU devices: a memfd mapped MAP_SHARED (sparse: pages appear on touch);
//  - GPU devices: GPU memory from CUDA's virtual memory management API, reserved at a fixed
//    address and exported as a POSIX descriptor.
// A peer process maps the same memory at the same address, so every pointer stored inside
// the state is valid in both processes unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace gv::detail {

/// First bytes of every arena: lets an importer check it mapped what the locator promised.
struct ArenaHeader {
    uint64_t magic;  ///< kArenaMagic
    uint64_t base;   ///< the address the owner mapped it at
    uint64_t size;
    uint32_t pid;    ///< owner process
    /// kArenaVersion: the layout of what the arena holds (QpContext, CqState, MrEntry); a peer
    /// of another layout is refused at import.
    uint32_t version;
};
// 2: QpContext::xgpu, CqState::xgpu (two GPUs); 3: QpContext::sq_ready, CqState::ci (the executor
// reads the posters' and pollers' counters, not the doorbell records).
inline constexpr uint32_t kArenaVersion = 3;
inline constexpr uint64_t kArenaMagic = 0x414e455241564721ull;  // "!GVARENA"

class Arena {
public:
    static constexpr size_t kDefaultSize = size_t(1) << 30;  ///< CPU: sparse, pages appear on touch
    static constexpr size_t kPage = 4096;

    /// CPU arena: creates the memfd and maps it; throws SystemError when no address range was free.
    explicit Arena(size_t size = kDefaultSize);
    /// GPU arena of `size` bytes (rounded up to the allocation granularity) on GPU `gpu`.
    Arena(int gpu, size_t size);
    ~Arena();
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;

    /// Zeroed, 4 KiB-aligned memory of at least `bytes`; throws when the arena is full.
    void* alloc(size_t bytes);
    /// As alloc(), but nullptr when the arena is full.
    void* try_alloc(size_t bytes);
    void free(void* p, size_t bytes);
    bool contains(const void* p, size_t bytes) const {
        auto a = reinterpret_cast<uintptr_t>(p);
        return a >= base_ && bytes <= size_ && a - base_ <= size_ - bytes;
    }

    bool on_gpu() const { return gpu_ >= 0; }
    int gpu() const { return gpu_; }
    /// GPU arenas: lets the threads of GPU `gpu` of this process reach the arena too
    /// (cuMemSetAccess for every GPU granted so far; the caller checked peer access). Once per
    /// GPU; the arena's own GPU has access from the start.
    void grant(int gpu);
    int fd() const { return fd_; }
    uint64_t base() const { return base_; }
    uint64_t size() const { return size_; }
    uint32_t pid() const { return pid_; }

private:
    void write_header();
    void zero(size_t off, size_t n);

    int gpu_ = -1;
    uint64_t vmm_handle_ = 0;  ///< GPU arenas: the CUDA allocation
    int fd_ = -1;
    uintptr_t base_ = 0;
    size_t size_ = 0;
    uint32_t pid_ = 0;
    std::mutex mu_;
    std::vector<int> access_;            ///< GPU arenas: the GPUs that may reach it
    size_t bump_ = 0;                    ///< first never-used byte (offset)
    std::map<size_t, size_t> free_;     ///< offset -> bytes, coalesced
};

/// Maps the arena of process `pid` (its descriptor `fd`) at `base` in this process, once per
/// arena; imports stay mapped for the process lifetime, so no pointer a QP holds into a peer
/// that died or went away ever dangles. Throws gv::Error subclasses with the reason when the
/// file cannot be opened, the range is taken, or the header disagrees.
void import_arena(uint32_t pid, uint32_t fd, uint64_t base, uint64_t size);
/// The same for the GPU arena of process `pid`, mapped for GPU `gpu` (descriptor duplicated
/// with pidfd_getfd). The arena may live on another GPU than `gpu` (two GPUs of one host,
/// docs/two-gpus.md): GPU `gpu` then reaches it over NVLink / PCIe peer-to-peer (the caller
/// checked peer access). An arena already imported for another GPU of this process is granted
/// to `gpu` as well.
void import_gpu_arena(int gpu, uint32_t pid, uint32_t fd, uint64_t base, uint64_t size);

/// A random arena base for `size` bytes: 1 GiB-aligned in [17 TiB, 96 TiB), above
/// AddressSanitizer's shadow and below where the kernel places ordinary mappings (80 896
/// slots: two processes' arenas collide about once in 80 000 pairs, and a collision is a
/// clear error). 1 GiB, because CUDA's cuMemAddressReserve rounds a requested address up to
/// its own alignment (32 MiB for a 1 GiB range on the H200) instead of taking a 2 MiB one.
uint64_t random_arena_base(uint64_t size);

}  // namespace gv::detail
