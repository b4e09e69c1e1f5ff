// The software RDMA device of one GPU (or of the CPU) in this process: its shared arena, the
// allocation of queues and device state, the memory-region table, QP numbers and links.
// Used by soft_backend.cpp (CQs, the backend's operations) and soft_qp.cpp (QPs).
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/backend.hpp"
#include "cuda/cuda_rt.hpp"
#include "gpuverbs/detail/soft/exec.cuh"
#include "soft/arena.hpp"
#include "soft/locator.hpp"
#include "soft/peer_gpu.hpp"

namespace gv::detail::softdev {

using detail::hex;

inline uint32_t next_pow2(uint64_t v) {
    uint32_t p = 1;
    while (p < v) p <<= 1;
    return p;
}
inline uint32_t log2u(uint32_t v) {
    uint32_t l = 0;
    while ((1u << l) < v) ++l;
    return l;
}

/// One allocation in queue memory or device-state memory.
struct Mem {
    void* host = nullptr;  ///< CPU pointer (null for GPU memory)
    void* exec = nullptr;  ///< pointer kernels and executors use
    size_t bytes = 0;
    bool device = false;
    bool pinned = false;
    bool arena = false;  ///< from the device's shared arena
    template <typename T = uint8_t>
    T* at(size_t off) const {
        return reinterpret_cast<T*>(static_cast<uint8_t*>(exec) + off);
    }
};

class SoftDevice {
public:
    /// arena_bytes: size of the shared arena (0: the default, see ContextOptions).
    SoftDevice(int gpu, size_t arena_bytes) : gpu_(gpu), pid_(uint32_t(getpid())) {
        name_ = gpu < 0 ? "soft-cpu" : "soft-gpu" + std::to_string(gpu);
        if (gpu >= 0) cuda::device_uuid(gpu, uuid_.data());
        cuda::DeviceGuard guard(gpu);
        // Now, not at the first CPU commit, which might stall behind a running kernel that
        // waits for that commit's work (cuda::load_executor says why).
        if (gpu >= 0) cuda::load_executor(gpu);
        // CPU threads' doorbells on this device's QPs (src/soft/board.hpp).
        if (gpu >= 0) board_ = cuda::board_open(gpu);
        // The device keeps its state in one shared arena, so that peer processes can map it
        // at the same address and follow its pointers (docs/cross-process.md). A GPU
        // device without one (no VMM support, GV_GPU_ARENA_MB=0) still works in-process.
        if (gpu < 0) {
            arena_ = std::make_unique<Arena>(arena_bytes ? arena_bytes : Arena::kDefaultSize);
        } else {
            size_t bytes = arena_bytes;
            if (!bytes) {
                size_t mb = 1024;
                if (const char* e = std::getenv("GV_GPU_ARENA_MB")) mb = std::strtoull(e, nullptr, 10);
                bytes = mb << 20;
            }
            if (bytes == 0) {
                arena_error_ = "GV_GPU_ARENA_MB=0 turned the shared GPU arena off";
            } else {
                try {
                    arena_ = std::make_unique<Arena>(gpu, bytes);
                } catch (const Error& e) {
                    arena_error_ = std::string("the shared GPU arena could not be created: ") + e.what();
                }
            }
        }
        mr_mem_ = alloc(sizeof(soft::MrEntry) * kMrCap, on_gpu());
        mr_shadow_.resize(kMrCap);
        mr_tag_.assign(kMrCap, 0);
        for (uint32_t i = kMrCap - 1; i >= 1; --i) mr_free_.push_back(i);
        std::random_device rd;
        next_qpn_ = 0x100 + (rd() & 0xff00);
    }
    ~SoftDevice() {
        cuda::board_close(board_);
        release(mr_mem_);
    }
    /// The board that batches CPU threads' doorbells into executor kernels; null on a CPU
    /// device or when turned off (GV_DOORBELL_BOARD_SLOTS=0).
    cuda::Board* board() const { return board_; }

    static std::shared_ptr<SoftDevice> get(int gpu, size_t arena_bytes) {
        std::lock_guard<std::mutex> lock(registry_mutex());
        auto& all = registry();
        auto sp = all[gpu].lock();
        // A child of fork() gets a device of its own: the inherited one's arena is the
        // parent's (shared) memory.
        if (!sp || sp->pid() != uint32_t(getpid())) {
            sp = std::make_shared<SoftDevice>(gpu, arena_bytes);
            all[gpu] = sp;
        } else if (arena_bytes > sp->arena_size()) {
            throw InvalidUsage("ContextOptions::shared_arena_bytes = " + std::to_string(arena_bytes) +
                               ": software device " + sp->name() + " already exists in this process with a " +
                               (sp->arena_size() ? std::to_string(sp->arena_size() >> 20) + " MiB"
                                                 : std::string("no")) +
                               " shared arena (it lives as long as any Context on it); ask for the size "
                               "with the first Context");
        }
        return sp;
    }
    /// This process's live device of GPU `gpu` (-1: the CPU device), or null.
    static std::shared_ptr<SoftDevice> existing(int gpu) {
        std::lock_guard<std::mutex> lock(registry_mutex());
        auto& all = registry();
        auto it = all.find(gpu);
        if (it == all.end()) return nullptr;
        auto sp = it->second.lock();
        return sp && sp->pid() == uint32_t(getpid()) ? sp : nullptr;
    }
    /// Every live device of this process.
    static std::vector<std::shared_ptr<SoftDevice>> all_devices() {
        std::lock_guard<std::mutex> lock(registry_mutex());
        std::vector<std::shared_ptr<SoftDevice>> v;
        for (auto& [g, w] : registry())
            if (auto sp = w.lock(); sp && sp->pid() == uint32_t(getpid())) v.push_back(sp);
        return v;
    }
    size_t arena_size() const { return arena_ ? arena_->size() : 0; }
    const soft::GpuUuid& uuid() const { return uuid_; }
    /// The device whose shared arena holds [p, p+n) in this process, or null.
    static std::shared_ptr<SoftDevice> owning_arena(const void* p, size_t n) {
        for (auto& d : all_devices())
            if (d->in_arena(p, n)) return d;
        return nullptr;
    }

    /// Two devices of this process on two GPUs that connect QPs (plan_peer said CrossGpu, so
    /// peer access works both ways): each GPU's threads may then execute the other device's
    /// QPs and touch its state, rings, CQs, MR table and registered memory. Enables peer access
    /// both ways (cudaMalloc'd memory: private queues of a full arena, registered buffers) and
    /// grants each arena to the other GPU (VMM memory: cudaDeviceEnablePeerAccess does not
    /// cover it). Once per pair.
    void link_gpu(SoftDevice& other) {
        if (other.gpu_ == gpu_ || gpu_ < 0 || other.gpu_ < 0) return;
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (std::find(linked_.begin(), linked_.end(), other.gpu_) != linked_.end()) return;
        }
        cuda::enable_peer_access(gpu_, other.gpu_);
        cuda::enable_peer_access(other.gpu_, gpu_);
        if (arena_) arena_->grant(other.gpu_);
        if (other.arena_) other.arena_->grant(gpu_);
        std::scoped_lock lock(mu_, other.mu_);
        if (std::find(linked_.begin(), linked_.end(), other.gpu_) == linked_.end()) linked_.push_back(other.gpu_);
        if (std::find(other.linked_.begin(), other.linked_.end(), gpu_) == other.linked_.end())
            other.linked_.push_back(gpu_);
    }
    /// Lets this device's GPU reach GPU `owner`'s memory (peer access; the caller checked it is
    /// possible): registering that memory here, or a QP of another process whose arena lives
    /// there. For an arena of this process's device on `owner`, grants it too.
    void reach_gpu(int owner) {
        if (owner == gpu_ || gpu_ < 0) return;
        cuda::enable_peer_access(gpu_, owner);
        if (auto d = existing(owner); d && d->arena_) d->arena_->grant(gpu_);
    }

    bool on_gpu() const { return gpu_ >= 0; }
    uint32_t pid() const { return pid_; }
    /// True when [p, p+n) lies in this device's shared arena.
    bool in_arena(const void* p, size_t n) const { return arena_ && arena_->contains(p, n); }
    void* shared_alloc(size_t bytes) {
        if (!arena_) throw NotSupported("SharedBuffer on " + name_ + ": " + arena_error_);
        return arena_->alloc(bytes);
    }
    /// Why this device has no shared arena ("" when it has one).
    const std::string& arena_error() const { return arena_error_; }
    void shared_free(void* p, size_t bytes) noexcept {  // from ~SharedBuffer: see release()
        try {
            if (arena_) arena_->free(p, bytes);
        } catch (...) {
        }
    }
    /// Where a QP of this device lives, for peers in other processes.
    /// reachable: the QP's state, queues and CQs all lie in the arena.
    soft::Locator locator(const soft::QpContext* qp, bool reachable) const {
        soft::Locator l;
        l.pid = pid_;
        l.gpu_uuid = uuid_;
        if (arena_ && reachable) {
            l.arena_fd = uint32_t(arena_->fd());
            l.arena_base = arena_->base();
            l.arena_size = arena_->size();
            l.qp_context = reinterpret_cast<uint64_t>(qp);
        }
        return l;
    }
    int gpu() const { return gpu_; }
    const std::string& name() const { return name_; }

    /// Zeroed memory: GPU memory, or host memory (pinned and mapped on a GPU device, so
    /// kernels reach it at the same address).
    Mem alloc(size_t bytes, bool device) {
        Mem m;
        m.bytes = bytes;
        m.device = device;
        cuda::DeviceGuard guard(gpu_);
        if (device) {
            if (arena_) m.exec = arena_->try_alloc(bytes);  // zeroed
            m.arena = m.exec != nullptr;
            // A full arena: private memory, usable in this process only (the QP's endpoint
            // then says it cannot be reached from another process).
            if (!m.exec) m.exec = cuda::dev_alloc(bytes);
        } else if (on_gpu()) {
            void* d = nullptr;
            m.host = cuda::host_alloc(bytes, &d);
            m.pinned = true;
            if (d != m.host) {
                cuda::host_free(m.host);
                throw NotSupported("the software device needs unified addressing (pinned host memory "
                                   "at the same address on CPU and GPU)");
            }
            m.exec = d;
        } else {
            m.host = arena_->alloc(bytes);  // zeroed
            m.arena = true;
            m.exec = m.host;
        }
        return m;
    }
    /// Never throws: it runs in destructors, also after the CUDA context failed (a sticky
    /// error, e.g. an MPS fatal exception when a peer process was killed mid-kernel); the
    /// memory is then left to the context's teardown.
    void release(Mem& m) noexcept {
        try {
            cuda::DeviceGuard guard(m.device || m.pinned ? gpu_ : -1);
            if (m.arena) arena_->free(m.device ? m.exec : m.host, m.bytes);
            else if (m.device) cuda::dev_free(m.exec);
            else if (m.pinned) cuda::host_free(m.host);
            else std::free(m.host);
        } catch (...) {
        }
        m = Mem{};
    }
    void write(const Mem& m, size_t off, const void* src, size_t n) {
        if (m.device) {
            cuda::DeviceGuard guard(gpu_);
            cuda::copy_to_device(m.at(off), src, n);
        } else {
            std::memcpy(m.at(off), src, n);
        }
    }
    void read(const Mem& m, size_t off, void* dst, size_t n) const {
        if (m.device) {
            cuda::DeviceGuard guard(gpu_);
            cuda::copy_from_device(dst, m.at(off), n);
        } else {
            std::memcpy(dst, m.at(off), n);
        }
    }
    template <typename T>
    T read_val(const Mem& m, size_t off) const {
        T v;
        read(m, off, &v, sizeof v);
        return v;
    }
    template <typename T>
    void write_val(const Mem& m, size_t off, T v) {
        write(m, off, &v, sizeof v);
    }

    soft::MrTable mr_table() const { return {mr_mem_.at<soft::MrEntry>(0), kMrCap, pid_}; }

    uint32_t mr_add(const soft::MrEntry& proto) {
        std::lock_guard<std::mutex> lock(mu_);
        if (mr_free_.empty())
            throw InvalidUsage("software device " + name_ + ": all " + std::to_string(kMrCap - 1) +
                               " memory-region slots are in use; deregister regions first");
        uint32_t idx = mr_free_.back();
        mr_free_.pop_back();
        // The tag changes on every reuse of a slot, so a stale key never matches; it is
        // never 0, so no key equals MLX5_INVALID_LKEY (0x100).
        uint8_t tag = uint8_t(mr_tag_[idx] % 255 + 1);
        mr_tag_[idx] = tag;
        soft::MrEntry e = proto;
        e.key = (idx << 8) | tag;
        e.valid = 1;
        mr_shadow_[idx] = e;
        write(mr_mem_, idx * sizeof e, &e, sizeof e);
        return e.key;
    }
    void mr_remove(uint32_t key) {
        std::lock_guard<std::mutex> lock(mu_);
        uint32_t idx = key >> 8;
        if (idx == 0 || idx >= kMrCap || mr_shadow_[idx].key != key || !mr_shadow_[idx].valid) return;
        mr_shadow_[idx].valid = 0;
        try {  // called from ~MemoryRegion: must not throw (see release())
            write_val<uint32_t>(mr_mem_, idx * sizeof(soft::MrEntry) + offsetof(soft::MrEntry, valid), 0);
        } catch (...) {
            return;  // the slot stays used: its entry could not be invalidated
        }
        mr_free_.insert(mr_free_.begin(), idx);  // reuse oldest slots last
    }

    uint32_t alloc_qpn() {
        std::lock_guard<std::mutex> lock(mu_);
        uint32_t q;
        do {
            q = next_qpn_++ & 0xffffff;
        } while (q < 2 || qps_.count(q));
        return q;
    }
    struct QpEntry {
        soft::QpContext* exec;
        Mem* state_mem;
        uint32_t remote_qpn;              // whom it points to (0 none)
        const SoftDevice* remote_dev;     // on which device of this process (null none)
    };
    void qp_add(uint32_t qpn, soft::QpContext* exec, Mem* state_mem) {
        std::lock_guard<std::mutex> lock(mu_);
        qps_[qpn] = {exec, state_mem, 0, nullptr};
    }
    soft::QpContext* qp_find(uint32_t qpn) {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = qps_.find(qpn);
        return it == qps_.end() ? nullptr : it->second.exec;
    }
    /// Records that QP qpn points at QP remote_qpn of device `remote` of this process (null,
    /// 0: at nothing of this process), so that destroying that QP unlinks it.
    void qp_link(uint32_t qpn, uint32_t remote_qpn, const SoftDevice* remote) {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = qps_.find(qpn);
        if (it == qps_.end()) return;
        it->second.remote_qpn = remote_qpn;
        it->second.remote_dev = remote_qpn ? remote : nullptr;
    }
    /// Forgets a QP and unlinks every QP of this process that points at it (of this device,
    /// or of the device of another GPU), so no executor follows a pointer to freed state:
    /// their work then fails with TRANSPORT_RETRY_EXC_ERR.
    void qp_remove(uint32_t qpn) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            qps_.erase(qpn);
        }
        std::vector<std::shared_ptr<SoftDevice>> devs;
        try {
            devs = all_devices();
        } catch (...) {
        }
        bool self_seen = false;
        for (auto& d : devs) {
            self_seen |= d.get() == this;
            d->unlink(this, qpn);
        }
        if (!self_seen) unlink(this, qpn);  // while this device itself is being destroyed
    }

    uint32_t alloc_pd() {
        std::lock_guard<std::mutex> lock(mu_);
        return next_pd_++;
    }
    uint32_t alloc_cqn() {
        std::lock_guard<std::mutex> lock(mu_);
        return next_cqn_++;
    }

    static constexpr uint32_t kMrCap = 4096;

private:
    static std::mutex& registry_mutex() {
        static std::mutex mu;
        return mu;
    }
    static std::map<int, std::weak_ptr<SoftDevice>>& registry() {
        static std::map<int, std::weak_ptr<SoftDevice>> all;
        return all;
    }
    /// Clears `remote` of every QP of this device that points at QP qpn of device `dev`.
    void unlink(const SoftDevice* dev, uint32_t qpn) noexcept {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto& [other, e] : qps_) {
            if (e.remote_qpn != qpn || e.remote_dev != dev) continue;
            e.remote_qpn = 0;
            e.remote_dev = nullptr;
            soft::QpContext* none = nullptr;
            try {  // called from ~QueuePair: must not throw (see release())
                write(*e.state_mem, offsetof(soft::QpContext, remote), &none, sizeof none);
            } catch (...) {
            }
        }
    }

    int gpu_;
    soft::GpuUuid uuid_{};   ///< the GPU's identity (zero: CPU threads)
    std::vector<int> linked_;  ///< GPUs of this process whose device this one connected to
    uint32_t pid_;
    std::string name_;
    std::mutex mu_;
    std::unique_ptr<Arena> arena_;  // declared before every Mem it backs
    std::string arena_error_;
    Mem mr_mem_;
    cuda::Board* board_ = nullptr;
    std::vector<soft::MrEntry> mr_shadow_;
    std::vector<uint8_t> mr_tag_;
    std::vector<uint32_t> mr_free_;
    std::map<uint32_t, QpEntry> qps_;
    uint32_t next_qpn_ = 0x100;
    uint32_t next_pd_ = 1;
    uint32_t next_cqn_ = 1;
};

/// Whether a queue with memory kind k lives in GPU memory on device d.
inline bool queue_on_device(const SoftDevice& d, MemoryKind k) {
    if (k == MemoryKind::Default) return d.on_gpu();
    if (k == MemoryKind::Device && !d.on_gpu())
        throw InvalidUsage("MemoryKind::Device needs a context that executes on a GPU "
                           "(ContextOptions::gpu >= 0); this one is " + d.name());
    return k == MemoryKind::Device;
}

}  // namespace gv::detail::softdev
