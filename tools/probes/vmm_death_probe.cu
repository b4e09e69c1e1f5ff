// Probe: process B exports a VMM allocation, A maps it at the same address; then B goes
// away (mode "kill-running": SIGKILL while its kernel runs; "kill-idle": SIGKILL with no
// kernel running; "exit": normal exit). Afterwards, can A still use (1) its own memory and
// (2) the memory it imported from B?
#include <cuda.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { printf("[%d] %s failed: %d\n", getpid(), #x, (int)r_); fflush(stdout); _exit(2);} } while (0)
struct Msg { int pid; int fd; unsigned long long base; unsigned long long size; };
__global__ void spin(volatile unsigned* p) { while (p[2] == 0) { p[0] = p[0] + 1; } }
__global__ void touch(volatile unsigned* p, unsigned* out) { out[0] = p[0]; p[1] = 77; out[1] = p[1]; }

int main(int argc, char** argv) {
    const char* mode = argc > 1 ? argv[1] : "kill-running";
    int to_a[2], to_b[2];
    if (pipe(to_a) || pipe(to_b)) return 1;
    pid_t b = fork();
    CK(cuInit(0)); cudaSetDevice(0); cudaFree(0);
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemAccessDesc acc{}; acc.location = prop.location; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    const size_t size = 64ull << 20;
    if (b == 0) {  // B: exporter
        CUmemGenericAllocationHandle h; CK(cuMemCreate(&h, size, &prop, 0));
        CUdeviceptr p = 0; CK(cuMemAddressReserve(&p, size, 0, 20ull << 40, 0));
        CK(cuMemMap(p, size, 0, h, 0)); CK(cuMemSetAccess(p, size, &acc, 1));
        int fd = -1; CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        cudaMemset((void*)p, 0, 4096); cudaDeviceSynchronize();
        spin<<<1, 1>>>((unsigned*)p);
        Msg m{getpid(), fd, p, size};
        write(to_a[1], &m, sizeof m);
        char c; read(to_b[0], &c, 1);  // A mapped and looked
        if (strcmp(mode, "kill-running") != 0) {
            // Stop the spin from a non-blocking stream (the legacy stream would queue behind it).
            static unsigned one = 1;
            cudaStream_t s;
            cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
            cudaMemcpyAsync((unsigned*)p + 2, &one, 4, cudaMemcpyHostToDevice, s);
            cudaDeviceSynchronize();
        }
        write(to_a[1], &c, 1);
        if (strcmp(mode, "exit") == 0) _exit(0);
        pause();
        _exit(0);
    }
    Msg m; read(to_a[0], &m, sizeof m);
    int pfd = syscall(SYS_pidfd_open, m.pid, 0);
    int fd = syscall(SYS_pidfd_getfd, pfd, m.fd, 0);
    CUmemGenericAllocationHandle h; CK(cuMemImportFromShareableHandle(&h, (void*)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    CUdeviceptr p = 0; CK(cuMemAddressReserve(&p, m.size, 0, m.base, 0));
    if (p != m.base) printf("[A] reserved 0x%llx, wanted 0x%llx\n", (unsigned long long)p, m.base);
    CK(cuMemMap(p, m.size, 0, h, 0)); CK(cuMemSetAccess(p, m.size, &acc, 1));
    unsigned* out; cudaMallocManaged(&out, 8);
    unsigned* own; cudaMalloc(&own, 4096); cudaMemset(own, 0, 4096);
    usleep(50000);
    touch<<<1, 1>>>((unsigned*)p, out);
    cudaError_t le = cudaGetLastError();
    cudaError_t e = cudaDeviceSynchronize();
    printf("[A %s] before: launch %s sync %s, B's counter %u, write-read %u\n", mode, cudaGetErrorString(le), cudaGetErrorString(e), out[0], out[1]);
    char c = 'k'; write(to_b[1], &c, 1); read(to_a[0], &c, 1);
    if (strcmp(mode, "exit") != 0) kill(b, SIGKILL);
    int st; waitpid(b, &st, 0);
    usleep(300000);
    touch<<<1, 1>>>(own, out);
    e = cudaDeviceSynchronize();
    printf("[A %s] after: own memory: %s (wrote-read %u)\n", mode, cudaGetErrorString(e), e == cudaSuccess ? out[1] : 0);
    if (e != cudaSuccess) return 0;
    touch<<<1, 1>>>((unsigned*)p, out);
    e = cudaDeviceSynchronize();
    printf("[A %s] after: B's memory: %s (counter %u, wrote-read %u)\n", mode, cudaGetErrorString(e), e == cudaSuccess ? out[0] : 0, e == cudaSuccess ? out[1] : 0);
    return 0;
}
