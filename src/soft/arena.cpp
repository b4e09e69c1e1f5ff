#include "soft/arena.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <iterator>
#include <cstring>
#include <random>
#include <string>

#include "cuda/cuda_rt.hpp"
#include "gpuverbs/errors.hpp"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 1U
#endif

namespace gv::detail {

namespace {

// Candidate bases: see random_arena_base().
constexpr uint64_t kLow = 17ull << 40, kHigh = 96ull << 40, kAlign = 1ull << 30;

std::string hexs(uint64_t v) {
    char b[32];
    std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
    return b;
}

/// mmap at exactly `base` or fail: MAP_FIXED_NOREPLACE, and the result checked because
/// kernels before 4.17 take the flag as a mere hint.
void* map_at(uint64_t base, size_t size, int fd, int* err) {
    void* want = reinterpret_cast<void*>(base);
    void* p = mmap(want, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
    if (p == MAP_FAILED) {
        *err = errno;
        return nullptr;
    }
    if (p != want) {
        munmap(p, size);
        *err = EEXIST;
        return nullptr;
    }
    return p;
}

int memfd(const char* name) { return memfd_create(name, MFD_CLOEXEC); }

}  // namespace

uint64_t random_arena_base(uint64_t size) {
    static std::mutex mu;
    static std::mt19937_64 rng;
    static pid_t seeded_for = 0;
    std::lock_guard<std::mutex> lock(mu);
    if (seeded_for != getpid()) {  // reseed after fork(): parent and child must not pick alike
        std::random_device rd;
        seeded_for = getpid();
        rng.seed((uint64_t(rd()) << 32) ^ rd() ^ uint64_t(seeded_for));
    }
    uint64_t slots = (kHigh - kLow - size) / kAlign;
    return kLow + (rng() % slots) * kAlign;
}

Arena::Arena(size_t size) : size_(size), pid_(uint32_t(getpid())) {
    std::string name = "gv-arena-" + std::to_string(pid_);
    fd_ = memfd(name.c_str());
    if (fd_ < 0) throw SystemError("memfd_create for the software device's shared arena", errno);
    if (ftruncate(fd_, off_t(size)) != 0) {
        int e = errno;
        ::close(fd_);
        throw SystemError("ftruncate of the shared arena to " + std::to_string(size) + " bytes", e);
    }
    int err = 0;
    for (int attempt = 0; attempt < 16; ++attempt) {
        uint64_t base = random_arena_base(size);
        if (map_at(base, size, fd_, &err)) {
            base_ = uintptr_t(base);
            break;
        }
        if (err != EEXIST) break;
    }
    if (!base_) {
        ::close(fd_);
        throw SystemError("mapping the software device's shared arena (" + std::to_string(size >> 20) +
                              " MiB) at a free 1 GiB-aligned address",
                          err);
    }
    write_header();
}

Arena::Arena(int gpu, size_t size) : gpu_(gpu), pid_(uint32_t(getpid())) {
    size_t g = cuda::vmm_granularity(gpu);
    size_ = (size + g - 1) / g * g;
    cuda::VmmRange v = cuda::vmm_create(
        gpu, size_, [](void* sz) { return random_arena_base(*static_cast<size_t*>(sz)); }, &size_, 16);
    base_ = uintptr_t(v.base);
    fd_ = v.fd;
    vmm_handle_ = v.handle;
    access_.push_back(gpu);
    cuda::memset_device(reinterpret_cast<void*>(base_), 0, kPage);
    write_header();
}

void Arena::write_header() {
    ArenaHeader h{};
    h.base = base_;
    h.size = size_;
    h.pid = pid_;
    h.version = kArenaVersion;
    h.magic = kArenaMagic;
    if (on_gpu()) cuda::copy_to_device(reinterpret_cast<void*>(base_), &h, sizeof h);
    else std::memcpy(reinterpret_cast<void*>(base_), &h, sizeof h);
    bump_ = kPage;  // the header's page
}

void Arena::grant(int gpu) {
    if (!on_gpu() || gpu < 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    for (int g : access_)
        if (g == gpu) return;
    std::vector<int> all = access_;
    all.push_back(gpu);
    cuda::vmm_set_access(base_, size_, all,
                         "making the shared arena of GPU " + std::to_string(gpu_) + " reachable from GPU " +
                             std::to_string(gpu));
    access_ = all;
}

void Arena::zero(size_t off, size_t n) {
    if (on_gpu()) cuda::memset_device(reinterpret_cast<void*>(base_ + off), 0, n);
    else std::memset(reinterpret_cast<void*>(base_ + off), 0, n);
}

Arena::~Arena() {
    if (on_gpu()) {
        cuda::VmmRange v;
        v.base = base_;
        v.size = size_;
        v.fd = fd_;
        v.handle = vmm_handle_;
        cuda::vmm_destroy(v);
        return;
    }
    munmap(reinterpret_cast<void*>(base_), size_);
    ::close(fd_);
}

void* Arena::alloc(size_t bytes) {
    if (uint32_t(getpid()) != pid_)
        throw InvalidUsage("this software device was opened by process " + std::to_string(pid_) +
                           " before fork(): open a new Context in the child");
    size_t n = (bytes + kPage - 1) & ~(kPage - 1);
    if (n == 0) n = kPage;
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {  // first fit
        if (it->second < n) continue;
        size_t off = it->first, len = it->second;
        free_.erase(it);
        if (len > n) free_[off + n] = len - n;
        zero(off, n);  // reused pages: the hole punched on free() may have failed
        return reinterpret_cast<void*>(base_ + off);
    }
    if (n > size_ - bump_)
        throw SystemError("the software device's shared arena (" + std::to_string(size_ >> 20) +
                              " MiB) is full: " + std::to_string(bytes) + " more bytes asked for",
                          ENOMEM);
    void* p = reinterpret_cast<void*>(base_ + bump_);
    if (on_gpu()) zero(bump_, n);  // CPU: never touched, zero pages; GPU memory is not zeroed
    bump_ += n;
    return p;
}

void* Arena::try_alloc(size_t bytes) {
    try {
        return alloc(bytes);
    } catch (const SystemError& e) {
        if (e.error_code() == ENOMEM) return nullptr;
        throw;
    }
}

void Arena::free(void* p, size_t bytes) {
    // A child of fork() destroying objects it inherited must not free (or punch holes into)
    // the parent's live arena: the memfd is shared.
    if (!p || uint32_t(getpid()) != pid_) return;
    size_t n = (bytes + kPage - 1) & ~(kPage - 1);
    if (n == 0) n = kPage;
    size_t off = reinterpret_cast<uintptr_t>(p) - base_;
    // CPU: give the pages back to the system (they read as zero afterwards). GPU: zero them.
    // Importers keep their mapping; a peer still pointing here reads zeros (a QP in RESET,
    // an invalid region), never stale state.
    if (on_gpu()) zero(off, n);
    else fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(off), off_t(n));
    std::lock_guard<std::mutex> lock(mu_);
    auto next = free_.lower_bound(off);
    if (next != free_.end() && off + n == next->first) {
        n += next->second;
        next = free_.erase(next);
    }
    if (next != free_.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second == off) {
            prev->second += n;
            return;
        }
    }
    free_[off] = n;
}

namespace {

/// Runs `map` (which maps and checks the arena, throwing with the reason) once per arena:
/// imports are recorded by base address for the life of the process (see the header). An
/// arena imported before calls `again` instead (a GPU arena asked for by another GPU of this
/// process: grant that GPU access too).
struct Imported {
    uint32_t pid;
    uint64_t size;
    std::vector<int> gpus;  ///< GPU arenas: the GPUs of this process that reach the mapping
};
template <class Map, class Again>
void import_once(const std::string& what, uint32_t pid, uint64_t base, uint64_t size, Map map, Again again) {
    static std::mutex mu;
    static std::map<uint64_t, Imported> imported;  // base -> owner, size, GPUs
    std::lock_guard<std::mutex> lock(mu);
    auto it = imported.find(base);
    if (it != imported.end()) {
        if (it->second.pid == pid && it->second.size == size) {
            again(it->second.gpus);
            return;
        }
        throw InvalidUsage("cannot import the " + what + ": that range already holds the arena of process " +
                           std::to_string(it->second.pid));
    }
    if (base == 0 || (base & (Arena::kPage - 1)) || size < Arena::kPage || base + size < base)
        throw InvalidUsage("cannot import the " + what + ": not a page-aligned range");
    Imported rec{pid, size, {}};
    map(rec.gpus);
    imported[base] = rec;
}

bool header_matches(const ArenaHeader& h, uint32_t pid, uint64_t base, uint64_t size) {
    return h.magic == kArenaMagic && h.base == base && h.size == size && h.pid == pid;
}
/// "" when the header's layout version is this build's, else why the peer is refused.
std::string version_problem(const ArenaHeader& h) {
    if (h.version == kArenaVersion) return "";
    return ": its layout version is " + std::to_string(h.version) + ", this build's " + std::to_string(kArenaVersion) +
           " (the peer runs another gpuverbs version: run the same build on both sides)";
}
const char* const kHeaderDisagrees = ": its header disagrees (not a gpuverbs arena, or the descriptor was reused)";

std::string describe(const char* kind, uint32_t pid, uint32_t fd, uint64_t base, uint64_t size) {
    return std::string(kind) + " of process " + std::to_string(pid) + " (fd " + std::to_string(fd) + ", " +
           hexs(base) + ", " + std::to_string(size >> 20) + " MiB)";
}

}  // namespace

void import_arena(uint32_t pid, uint32_t fd, uint64_t base, uint64_t size) {
    const std::string what = describe("arena", pid, fd, base, size);
    import_once(what, pid, base, size, [&](std::vector<int>&) {
        std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
        int f = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
        if (f < 0)
            throw SystemError("cannot import the " + what + ": open " + path +
                                  " failed (the peer exited, or runs as another user)",
                              errno);
        struct stat st {};
        if (fstat(f, &st) != 0 || uint64_t(st.st_size) < size) {
            ::close(f);
            throw InvalidUsage("cannot import the " + what + ": " + path + " is not that arena (" +
                               std::to_string(st.st_size) + " bytes)");
        }
        int err = 0;
        void* p = map_at(base, size_t(size), f, &err);
        ::close(f);  // the mapping keeps the file
        if (!p)
            throw SystemError("cannot import the " + what + ": the range is " +
                                  (err == EEXIST ? std::string("already in use in this process") : "not mappable"),
                              err);
        const ArenaHeader& h = *static_cast<const ArenaHeader*>(p);
        if (!header_matches(h, pid, base, size)) {
            munmap(p, size_t(size));
            throw InvalidUsage("cannot import the " + what + kHeaderDisagrees);
        }
        const std::string v = version_problem(h);
        if (!v.empty()) {
            munmap(p, size_t(size));
            throw InvalidUsage("cannot import the " + what + v);
        }
    }, [](std::vector<int>&) {});
}

void import_gpu_arena(int gpu, uint32_t pid, uint32_t fd, uint64_t base, uint64_t size) {
    const std::string what = describe("GPU arena", pid, fd, base, size);
    import_once(
        what, pid, base, size,
        [&](std::vector<int>& gpus) {
            cuda::vmm_import(gpu, pid, int(fd), base, size);
            gpus.push_back(gpu);
            ArenaHeader h{};
            cuda::copy_from_device(&h, reinterpret_cast<const void*>(base), sizeof h);
            // A mismatch leaves the range mapped (and so reserved) for the life of the process.
            if (!header_matches(h, pid, base, size)) throw InvalidUsage("cannot import the " + what + kHeaderDisagrees);
            const std::string v = version_problem(h);
            if (!v.empty()) throw InvalidUsage("cannot import the " + what + v);
        },
        [&](std::vector<int>& gpus) {
            for (int g : gpus)
                if (g == gpu) return;
            std::vector<int> all = gpus;
            all.push_back(gpu);
            cuda::vmm_set_access(base, size, all, what + ": granting GPU " + std::to_string(gpu));
            gpus = all;
        });
}

}  // namespace gv::detail
