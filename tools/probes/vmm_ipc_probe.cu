// Probe: can two processes on one GPU map the same VMM allocation at the SAME virtual
// address (cuMemAddressReserve with a fixed address), with the handle moved by
// pidfd_getfd? Also: round-trip time of a flag ping-pong between their kernels, and
// whether cudaHostRegister'ed memfd memory has device pointer == host pointer.
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* s; cuGetErrorString(r_, &s); \
  printf("[%d] %s failed: %s\n", getpid(), #x, s); fflush(stdout); _exit(2);} } while (0)
#define RK(x) do { cudaError_t r_ = (x); if (r_ != cudaSuccess) { printf("[%d] %s failed: %s\n", getpid(), #x, cudaGetErrorString(r_)); fflush(stdout); _exit(2);} } while (0)

struct Msg { int pid; int fd; unsigned long long base; unsigned long long size; };

__global__ void pingpong(volatile unsigned long long* flag, int iters, int me, unsigned long long* out_ns) {
    unsigned long long t0 = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (int i = 0; i < iters; ++i) {
        unsigned long long want = 2ull * i + me;  // me=0: A starts
        while (*flag != want) { }
        __threadfence_system();
        *flag = want + 1;
        __threadfence_system();
    }
    unsigned long long t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    *out_ns = t1 - t0;
}

__global__ void fill(unsigned* p, unsigned n, unsigned v) { for (unsigned i = threadIdx.x; i < n; i += blockDim.x) p[i] = v + i; }
__global__ void check(const unsigned* p, unsigned n, unsigned v, unsigned* bad) { for (unsigned i = threadIdx.x; i < n; i += blockDim.x) if (p[i] != v + i) atomicAdd(bad, 1); }

int main(int argc, char** argv) {
    int to_b[2], to_a[2];
    if (pipe(to_b) || pipe(to_a)) return 1;
    pid_t child = fork();
    bool A = child != 0;
    const size_t size = 64ull << 20;
    CK(cuInit(0));
    RK(cudaSetDevice(0));
    RK(cudaFree(0));
    CUdevice dev; CK(cuDeviceGet(&dev, 0));
    int v = 0;
    cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev);
    int hp = 0; cudaDeviceGetAttribute(&hp, cudaDevAttrCanUseHostPointerForRegisteredMem, 0);
    printf("[%s %d] posix fd handles %d, host ptr for registered mem %d\n", A ? "A" : "B", getpid(), v, hp);
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0; CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemAccessDesc acc{}; acc.location = prop.location; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    unsigned long long* d_ns; RK(cudaMalloc(&d_ns, 8));
    if (A) {
        CUmemGenericAllocationHandle h; CK(cuMemCreate(&h, size, &prop, 0));
        std::mt19937_64 rng(std::random_device{}());
        unsigned long long want = 0; CUdeviceptr p = 0;
        for (int k = 0; k < 8; ++k) {
            want = (17ull << 40) + (rng() % 79) * (1ull << 30);
            CUresult r = cuMemAddressReserve(&p, size, 0, want, 0);
            printf("[A] reserve at 0x%llx -> 0x%llx (%d)\n", want, (unsigned long long)p, (int)r);
            if (r == CUDA_SUCCESS && p == want) break;
            if (r == CUDA_SUCCESS) cuMemAddressFree(p, size);
            p = 0;
        }
        if (!p) { printf("[A] no fixed address\n"); _exit(3); }
        CK(cuMemMap(p, size, 0, h, 0)); CK(cuMemSetAccess(p, size, &acc, 1));
        int fd = -1; CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        RK(cudaMemset((void*)p, 0, size));
        fill<<<1, 256>>>((unsigned*)(p + 4096), 1 << 20, 7); RK(cudaDeviceSynchronize());
        Msg m{getpid(), fd, (unsigned long long)p, size};
        write(to_b[1], &m, sizeof m);
        char c; read(to_a[0], &c, 1);  // B mapped
        if (c != 'k') { printf("[A] B failed\n"); _exit(4); }
        auto t0 = std::chrono::steady_clock::now();
        pingpong<<<1, 1>>>((unsigned long long*)p, 2000, 0, d_ns); RK(cudaDeviceSynchronize());
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        unsigned long long ns; RK(cudaMemcpy(&ns, d_ns, 8, cudaMemcpyDeviceToHost));
        printf("[A] ping-pong 2000 round trips: kernel %.2f us/rt, wall %.2f us/rt\n", ns / 2000.0 / 1e3, s / 2000 * 1e6);
        int st; waitpid(child, &st, 0);
        printf("[A] child exit %d\n", WEXITSTATUS(st));
        // memfd host registration
        int mfd = memfd_create("probe", 0); ftruncate(mfd, 1 << 20);
        void* hpv = mmap((void*)(20ull << 40), 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, mfd, 0);
        RK(cudaHostRegister(hpv, 1 << 20, cudaHostRegisterMapped | cudaHostRegisterPortable));
        void* dp; RK(cudaHostGetDevicePointer(&dp, hpv, 0));
        printf("[A] memfd host %p -> device %p (%s)\n", hpv, dp, hpv == dp ? "same" : "DIFFERENT");
        return 0;
    } else {
        Msg m; read(to_b[0], &m, sizeof m);
        int pfd = syscall(SYS_pidfd_open, m.pid, 0);
        int fd = syscall(SYS_pidfd_getfd, pfd, m.fd, 0);
        printf("[B] pidfd %d getfd %d\n", pfd, fd);
        if (fd < 0) { perror("pidfd_getfd"); char c = 'x'; write(to_a[1], &c, 1); _exit(5); }
        CUmemGenericAllocationHandle h;
        CK(cuMemImportFromShareableHandle(&h, (void*)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        CUdeviceptr p = 0;
        CUresult r = cuMemAddressReserve(&p, m.size, 0, m.base, 0);
        printf("[B] reserve at 0x%llx -> 0x%llx (%d)\n", m.base, (unsigned long long)p, (int)r);
        if (p != m.base) { char c = 'x'; write(to_a[1], &c, 1); _exit(6); }
        CK(cuMemMap(p, m.size, 0, h, 0)); CK(cuMemSetAccess(p, m.size, &acc, 1));
        unsigned* bad; RK(cudaMallocManaged(&bad, 4)); *bad = 0;
        check<<<1, 256>>>((unsigned*)(p + 4096), 1 << 20, 7, bad); RK(cudaDeviceSynchronize());
        printf("[B] data check: %u bad\n", *bad);
        char c = 'k'; write(to_a[1], &c, 1);
        pingpong<<<1, 1>>>((unsigned long long*)p, 2000, 1, d_ns); RK(cudaDeviceSynchronize());
        unsigned long long ns; RK(cudaMemcpy(&ns, d_ns, 8, cudaMemcpyDeviceToHost));
        printf("[B] kernel %.2f us/rt\n", ns / 2000.0 / 1e3);
        _exit(0);
    }
}
