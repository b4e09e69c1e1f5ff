__global__ void k(int* a, int* b){ a[0]=1; asm volatile("fence.release.gpu;" ::: "memory"); b[0]=1; }
__global__ void k2(int* a, int* b){ a[0]=1; asm volatile("fence.acq_rel.gpu;" ::: "memory"); b[0]=1; }
