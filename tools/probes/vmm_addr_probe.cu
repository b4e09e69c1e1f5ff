// Probe: which fixed addresses does cuMemAddressReserve honour for a 1 GiB range?
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
int main() {
    cuInit(0); cudaSetDevice(0); cudaFree(0);
    const size_t size = 1ull << 30;
    unsigned long long tb = 1ull << 40, mb2 = 2ull << 20, gb = 1ull << 30;
    unsigned long long cands[] = {17 * tb, 17 * tb + mb2, 17 * tb + 37 * mb2, 17 * tb + 5 * gb, 18 * tb, 20 * tb, 24 * tb, 32 * tb,
                                  40 * tb, 48 * tb, 60 * tb, 64 * tb, 80 * tb, 90 * tb, 95 * tb, 100 * tb, 120 * tb, 2 * tb, 8 * tb};
    for (unsigned long long want : cands) {
        for (size_t align : {size_t(0), size_t(2) << 20, size}) {
            CUdeviceptr got = 0;
            CUresult r = cuMemAddressReserve(&got, size, align, want, 0);
            printf("want %6.3f TiB (0x%llx) align %zu -> r=%d got 0x%llx %s\n", want / double(tb), want, align, (int)r,
                   (unsigned long long)got, got == want ? "EXACT" : "");
            if (r == CUDA_SUCCESS) cuMemAddressFree(got, size);
        }
    }
    CUdeviceptr any = 0;
    cuMemAddressReserve(&any, size, 0, 0, 0);
    printf("driver's own choice: 0x%llx (%.3f TiB)\n", (unsigned long long)any, any / double(tb));
    return 0;
}
