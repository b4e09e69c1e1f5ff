#!/bin/bash
# usage: ptxas-bw-kernel.sh SRCROOT "-DDEFS"
# ptxas resource usage (sm_90) of gv_bench.cu's bw_kernel<false>: the block-commit kernel of the
# bandwidth rows, __launch_bounds__(512), so 128 registers at most and the rest spilled.
R=$1; D=$2
nvcc -DGV_HAVE_CUDA=1 $D -I"$R/include" -I"$R/tools" -isystem=/usr/local/cuda/include -O3 -DNDEBUG -arch=sm_90 \
    -std=c++17 --resource-usage -cubin "$R/tools/gv_bench.cu" -o /tmp/ptxas-bw-kernel.cubin 2>&1 |
    grep -A3 'bw_kernelILb0' | grep -E 'stack|Used'
