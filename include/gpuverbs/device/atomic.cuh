// Scoped atomics and fences usable from CUDA kernels and CPU threads alike.
//
// Every flag that one agent writes and another polls (WQE publication, doorbell
// records, CQE owner bytes, executor locks) goes through these helpers, never through
// plain or `volatile` accesses: on an H200 a kernel was seen never to observe another
// kernel's plain store to a host-mapped flag.
//
// `sys` selects system scope (memory that a CPU thread, another process or a NIC also
// reads); otherwise device (GPU) scope. On the CPU the scope is irrelevant.
//
// On the GPU they take global memory only (device memory or mapped host memory, never shared
// memory): the 64-bit adds and maxes are PTX `.global` atoms (atom::g64_*, below).
#pragma once

#include "gpuverbs/config.hpp"

#include <ctime>
#include <type_traits>

#if defined(__CUDACC__)
#include <cuda/atomic>
#endif

namespace gv::atom {

#if defined(__CUDACC__)
template <typename T>
using sys_ref = cuda::atomic_ref<T, cuda::thread_scope_system>;
template <typename T>
using gpu_ref = cuda::atomic_ref<T, cuda::thread_scope_device>;
#endif

#if defined(__CUDACC__)
/// Read-modify-writes on memory other agents observe (`sys`): the operation itself runs at
/// device scope, between system-scope fences. CUDA does not make atomics on mapped pinned
/// host memory atomic with respect to the CPU on PCIe hosts (hostNativeAtomicSupported = 0
/// on the H200's), and compute-sanitizer rejects system-scope atomics there; what stays
/// true is atomicity among the GPU's threads, and the fences keep the ordering the CPU (or
/// a NIC) observes. So a counter is never updated atomically by CPU and GPU at once.
template <typename F>
__device__ __forceinline__ auto sys_rmw(bool, F&& op) {
    cuda::atomic_thread_fence(cuda::memory_order_seq_cst, cuda::thread_scope_system);
    auto r = op();
    cuda::atomic_thread_fence(cuda::memory_order_seq_cst, cuda::thread_scope_system);
    return r;
}
#endif

/// Whether T takes the global-space 64-bit forms below (an unsigned 64-bit integer).
template <typename T>
inline constexpr bool kGlobal64 = std::is_integral_v<T> && std::is_unsigned_v<T> && sizeof(T) == 8;

#if defined(__CUDACC__)
// 64-bit add and max on global memory (device memory or mapped host memory: every word these
// helpers are used on; never shared memory), through PTX's .global state space. The generic
// form (what cuda::atomic_ref emits) makes ptxas test each 64-bit add or max for a shared-memory
// address and branch around a CAS loop: 202 such tests in the benchmark's bandwidth kernel; each
// ends a basic block, and the instructions the compiler places after it wait for values that
// were meant to stay in flight (the direct path's lock RMW waited behind the position's RMW).
#define GV_ATOM_G64(name, sem, scope, op)                                                       \
    __device__ __forceinline__ unsigned long long name(void* p, unsigned long long v) {        \
        unsigned long long r;                                                                   \
        asm volatile("atom." sem "." scope ".global." op ".u64 %0, [%1], %2;"                   \
                     : "=l"(r)                                                                  \
                     : "l"(__cvta_generic_to_global(p)), "l"(v)                                 \
                     : "memory");                                                               \
        return r;                                                                               \
    }
GV_ATOM_G64(g64_add_relaxed, "relaxed", "gpu", "add")
GV_ATOM_G64(g64_add_acquire, "acquire", "gpu", "add")
GV_ATOM_G64(g64_add_acquire_sys, "acquire", "sys", "add")
GV_ATOM_G64(g64_add_acq_rel, "acq_rel", "gpu", "add")
GV_ATOM_G64(g64_add_relaxed_sys, "relaxed", "sys", "add")
GV_ATOM_G64(g64_add_acq_rel_sys, "acq_rel", "sys", "add")
GV_ATOM_G64(g64_max_relaxed, "relaxed", "gpu", "max")
GV_ATOM_G64(g64_max_release, "release", "gpu", "max")
GV_ATOM_G64(g64_max_acq_rel, "acq_rel", "gpu", "max")
#undef GV_ATOM_G64
#endif

template <typename T>
GV_HOST_DEVICE T load_acquire(const T* p, bool sys = false) {
#if GV_DEVICE_CODE
    if (sys) return sys_ref<T>(*const_cast<T*>(p)).load(cuda::memory_order_acquire);
    return gpu_ref<T>(*const_cast<T*>(p)).load(cuda::memory_order_acquire);
#else
    (void)sys;
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

template <typename T>
GV_HOST_DEVICE T load_relaxed(const T* p, bool sys = false) {
#if GV_DEVICE_CODE
    if (sys) return sys_ref<T>(*const_cast<T*>(p)).load(cuda::memory_order_relaxed);
    return gpu_ref<T>(*const_cast<T*>(p)).load(cuda::memory_order_relaxed);
#else
    (void)sys;
    return __atomic_load_n(p, __ATOMIC_RELAXED);
#endif
}

template <typename T>
GV_HOST_DEVICE void store_release(T* p, T v, bool sys = false) {
#if GV_DEVICE_CODE
    if (sys) sys_ref<T>(*p).store(v, cuda::memory_order_release);
    else gpu_ref<T>(*p).store(v, cuda::memory_order_release);
#else
    (void)sys;
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}

template <typename T>
GV_HOST_DEVICE void store_relaxed(T* p, T v, bool sys = false) {
#if GV_DEVICE_CODE
    if (sys) sys_ref<T>(*p).store(v, cuda::memory_order_relaxed);
    else gpu_ref<T>(*p).store(v, cuda::memory_order_relaxed);
#else
    (void)sys;
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
#endif
}

template <typename T>
GV_HOST_DEVICE T fetch_add(T* p, T v, bool sys = false) {
#if GV_DEVICE_CODE
    if constexpr (kGlobal64<T>) {
        if (sys) return T(sys_rmw(sys, [&] { return g64_add_acq_rel(p, v); }));
        return T(g64_add_acq_rel(p, v));
    } else {
        if (sys) return sys_rmw(sys, [&] { return gpu_ref<T>(*p).fetch_add(v, cuda::memory_order_acq_rel); });
        return gpu_ref<T>(*p).fetch_add(v, cuda::memory_order_acq_rel);
    }
#else
    (void)sys;
    return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL);
#endif
}

template <typename T>
GV_HOST_DEVICE T fetch_add_relaxed(T* p, T v, bool sys = false) {
#if GV_DEVICE_CODE
    (void)sys;  // device-scope RMW, see sys_rmw
    if constexpr (kGlobal64<T>) return T(g64_add_relaxed(p, v));
    else return gpu_ref<T>(*p).fetch_add(v, cuda::memory_order_relaxed);
#else
    (void)sys;
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
#endif
}

/// fetch_add with acquire ordering only: the accesses after it wait for it, the ones before it
/// do not (a relaxed RMW or load issued just before stays in flight beside it, where an
/// acquire-release RMW first waits for them). `sys`: a system-scope RMW of its own, for GPU
/// memory that another GPU's threads update too (kScopePeer); not for host memory (sys_rmw).
template <typename T>
GV_HOST_DEVICE T fetch_add_acquire(T* p, T v, bool sys = false) {
#if GV_DEVICE_CODE
    if constexpr (kGlobal64<T>) {
        return T(sys ? g64_add_acquire_sys(p, v) : g64_add_acquire(p, v));
    } else {
        if (sys) return sys_ref<T>(*p).fetch_add(v, cuda::memory_order_acquire);
        return gpu_ref<T>(*p).fetch_add(v, cuda::memory_order_acquire);
    }
#else
    (void)sys;
    return __atomic_fetch_add(p, v, __ATOMIC_ACQUIRE);
#endif
}

template <typename T>
GV_HOST_DEVICE T fetch_max(T* p, T v, bool sys = false) {
#if GV_DEVICE_CODE
    if constexpr (kGlobal64<T>) {
        if (sys) return T(sys_rmw(sys, [&] { return g64_max_acq_rel(p, v); }));
        return T(g64_max_acq_rel(p, v));
    } else {
        if (sys) return sys_rmw(sys, [&] { return gpu_ref<T>(*p).fetch_max(v, cuda::memory_order_acq_rel); });
        return gpu_ref<T>(*p).fetch_max(v, cuda::memory_order_acq_rel);
    }
#else
    (void)sys;
    T cur = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (cur < v && !__atomic_compare_exchange_n(p, &cur, v, true, __ATOMIC_ACQ_REL,
                                                   __ATOMIC_RELAXED)) {
    }
    return cur;
#endif
}

/// fetch_max with release ordering only, its result unused: what precedes it is visible to
/// whoever acquires the value, and nothing after it waits for it (a GPU thread goes on while
/// the RMW is in flight, where an acquire-release one holds its later loads back).
template <typename T>
GV_HOST_DEVICE void max_release(T* p, T v, bool sys = false) {
#if GV_DEVICE_CODE
    if constexpr (kGlobal64<T>) {
        if (sys) sys_rmw(sys, [&] { return g64_max_relaxed(p, v); });
        else g64_max_release(p, v);
    } else {
        if (sys) sys_rmw(sys, [&] { return gpu_ref<T>(*p).fetch_max(v, cuda::memory_order_relaxed); });
        else gpu_ref<T>(*p).fetch_max(v, cuda::memory_order_release);
    }
#else
    (void)sys;
    T cur = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (cur < v && !__atomic_compare_exchange_n(p, &cur, v, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
    }
#endif
}

/// Compare-and-swap with acquire-release ordering; returns true when it swapped and
/// leaves the value seen in `expected` otherwise.
template <typename T>
GV_HOST_DEVICE bool cas(T* p, T& expected, T desired, bool sys = false) {
#if GV_DEVICE_CODE
    if (sys)
        return sys_rmw(sys, [&] {
            return gpu_ref<T>(*p).compare_exchange_strong(expected, desired, cuda::memory_order_acq_rel);
        });
    return gpu_ref<T>(*p).compare_exchange_strong(expected, desired, cuda::memory_order_acq_rel);
#else
    (void)sys;
    return __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE);
#endif
}

/// Compare-and-swap without ordering (for counters whose data is ordered by other means).
template <typename T>
GV_HOST_DEVICE bool cas_relaxed(T* p, T& expected, T desired, bool sys = false) {
#if GV_DEVICE_CODE
    (void)sys;  // device-scope RMW, see sys_rmw
    return gpu_ref<T>(*p).compare_exchange_strong(expected, desired, cuda::memory_order_relaxed);
#else
    (void)sys;
    return __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
#endif
}

template <typename T>
GV_HOST_DEVICE T exchange(T* p, T v, bool sys = false) {
#if GV_DEVICE_CODE
    if (sys) return sys_rmw(sys, [&] { return gpu_ref<T>(*p).exchange(v, cuda::memory_order_acq_rel); });
    return gpu_ref<T>(*p).exchange(v, cuda::memory_order_acq_rel);
#else
    (void)sys;
    return __atomic_exchange_n(p, v, __ATOMIC_ACQ_REL);
#endif
}

/// PTX's one-way fences (`fence.release` / `fence.acquire`) exist from PTX ISA 8.6 on, for sm_90
/// and later; the guard asks for CUDA 12.8 or later, whose PTX has them. Elsewhere a release fence
/// is libcu++'s, the two-way `fence.acq_rel`.
#if GV_DEVICE_CODE && __CUDA_ARCH__ >= 900 && \
    (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 8))
#define GV_ONE_WAY_FENCES 1
#else
#define GV_ONE_WAY_FENCES 0
#endif

/// Release fence: earlier loads and stores of this thread are ordered before its later stores
/// (cumulatively: with the writes it observed, through a barrier for instance), for whoever
/// acquires one of those later stores.
///
/// On sm_90 it is PTX's `fence.release`: MEMBAR.ALL.GPU, ERRBAR, CGAERRBAR in SASS (device scope,
/// `cuobjdump -sass`, 2026-12-04). libcu++ emits the two-way `fence.acq_rel` for a release fence,
/// which adds an L1 invalidation (CCTL.IVALL): that half is an acquire, which no caller of this
/// function needs (every load that must see another thread's store follows a load_acquire, a
/// fence_acquire or a fence_seq_cst of its own), and it made every later load of the thread miss
/// L1 (the executor fences once per WQE and per copier: 4 KiB WRITEs over 264 QPs x 512 threads
/// 182.5 -> 194.1 GB/s on the H200, docs/performance.md, session 18).
GV_HOST_DEVICE void fence_release(bool sys = false) {
#if GV_DEVICE_CODE
#if GV_ONE_WAY_FENCES
    if (sys) asm volatile("fence.release.sys;" ::: "memory");
    else asm volatile("fence.release.gpu;" ::: "memory");
#else
    if (sys) cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_system);
    else cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_device);
#endif
#else
    (void)sys;
    __atomic_thread_fence(__ATOMIC_RELEASE);
#endif
}

GV_HOST_DEVICE void fence_acquire(bool sys = false) {
#if GV_DEVICE_CODE
#if GV_ONE_WAY_FENCES
    // `fence.acquire`: CCTL.IVALL once this thread's earlier loads and RMWs have come back, in
    // SASS (sm_90). libcu++'s acquire fence is the two-way `fence.acq_rel`: MEMBAR.ALL.GPU, ERRBAR,
    // CGAERRBAR, CCTL.IVALL, which also waits for this thread's earlier stores.
    if (sys) asm volatile("fence.acquire.sys;" ::: "memory");
    else asm volatile("fence.acquire.gpu;" ::: "memory");
#else
    if (sys) cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_system);
    else cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_device);
#endif
#else
    (void)sys;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
#endif
}

/// Sequentially consistent fence (store->load ordering, as a lock hand-off needs).
GV_HOST_DEVICE void fence_seq_cst(bool sys = false) {
#if GV_DEVICE_CODE
    if (sys) cuda::atomic_thread_fence(cuda::memory_order_seq_cst, cuda::thread_scope_system);
    else cuda::atomic_thread_fence(cuda::memory_order_seq_cst, cuda::thread_scope_device);
#else
    (void)sys;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

/// A pause inside a spin loop.
GV_HOST_DEVICE void relax() {
#if GV_DEVICE_CODE
    __nanosleep(32);
#elif defined(__x86_64__)
    __builtin_ia32_pause();
#endif
}

/// Monotonic nanoseconds (device: %globaltimer; host: steady clock).
GV_HOST_DEVICE uint64_t now_ns();

}  // namespace gv::atom

namespace gv::atom {
GV_HOST_DEVICE uint64_t now_ns() {
#if GV_DEVICE_CODE
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#else
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
#endif
}
}  // namespace gv::atom
