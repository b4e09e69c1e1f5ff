// Probe: process B exports a VMM allocation, A maps it at the same address; B is killed
// (SIGKILL) while its kernel spins. Can A still read and write the memory afterwards?
#include <cuda.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>

struct Msg { int pid; int fd; unsigned long long base; unsigned long long size; };
__global__ void spin(volatile unsigned* p) { while (true) { p[0] = p[0] + 1; } }
__global__ void touch(volatile unsigned* p, unsigned* out) { out[0] = p[0]; p[1] = 77; out[1] = p[1]; }

int main() {
    int to_a[2];
    if (pipe(to_a)) return 1;
    pid_t b = fork();
    cuInit(0); cudaSetDevice(0); cudaFree(0);
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemAccessDesc acc{}; acc.location = prop.location; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    const size_t size = 64ull << 20;
    if (b == 0) {  // B: exporter, will be killed
        CUmemGenericAllocationHandle h; cuMemCreate(&h, size, &prop, 0);
        CUdeviceptr p = 0; cuMemAddressReserve(&p, size, 0, 20ull << 40, 0);
        cuMemMap(p, size, 0, h, 0); cuMemSetAccess(p, size, &acc, 1);
        int fd = -1; cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        cudaMemset((void*)p, 0, 4096); cudaDeviceSynchronize();
        spin<<<1, 1>>>((unsigned*)p);
        Msg m{getpid(), fd, p, size};
        write(to_a[1], &m, sizeof m);
        cudaDeviceSynchronize();
        _exit(0);
    }
    Msg m; read(to_a[0], &m, sizeof m);
    int pfd = syscall(SYS_pidfd_open, m.pid, 0);
    int fd = syscall(SYS_pidfd_getfd, pfd, m.fd, 0);
    CUmemGenericAllocationHandle h; CUresult r = cuMemImportFromShareableHandle(&h, (void*)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUdeviceptr p = 0; cuMemAddressReserve(&p, m.size, 0, m.base, 0);
    cuMemMap(p, m.size, 0, h, 0); cuMemSetAccess(p, m.size, &acc, 1);
    if (getenv("RELEASE")) cuMemRelease(h);
    unsigned* out; cudaMallocManaged(&out, 8);
    touch<<<1, 1>>>((unsigned*)p, out);
    printf("[A] import %d, before kill: sync %s, counter %u, wrote %u\n", (int)r, cudaGetErrorString(cudaDeviceSynchronize()), out[0], out[1]);
    usleep(100000);
    kill(b, SIGKILL);
    int st; waitpid(b, &st, 0);
    usleep(200000);
    touch<<<1, 1>>>((unsigned*)p, out);
    cudaError_t e = cudaDeviceSynchronize();
    printf("[A] after B was killed: sync %s", cudaGetErrorString(e));
    if (e == cudaSuccess) printf(", counter %u, wrote %u", out[0], out[1]);
    printf("\n");
    return 0;
}
