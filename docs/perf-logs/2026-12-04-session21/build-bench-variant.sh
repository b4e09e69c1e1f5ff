#!/bin/bash
# usage: build-bench-variant.sh NAME SRCROOT "-DDEFS"
# Builds gv_write_bw from SRCROOT's headers and tools/gv_bench.cu into .devcarry/NAME/ of this
# checkout (ptxas resource usage in /tmp/bx-NAME/ptxas.txt), linked with the library of this
# checkout's build/ (host code only: the library's device code is the headers'). For comparing
# executor variants on the H200 with bench/compare.sh (carry .devcarry).
set -e
N=$1; R=$(cd "$2" && pwd); D=$3
TOP=$(git rev-parse --show-toplevel)
O=$TOP/.devcarry/$N; mkdir -p "$O" /tmp/bx-$N
cd "$TOP/build/tools"
nvcc -DGV_HAVE_CUDA=1 $D -I"$R/include" -isystem=/usr/local/cuda/include -O3 -DNDEBUG \
    --generate-code=arch=compute_90,code=[compute_90,sm_90] -Xcompiler=-fPIE -std=c++17 --resource-usage \
    -c "$R/tools/gv_bench.cu" -o /tmp/bx-$N/b.o > /tmp/bx-$N/ptxas.txt 2>&1
c++ -O3 -DNDEBUG /tmp/bx-$N/b.o -o "$O/gv_write_bw" -L/usr/local/cuda/targets/x86_64-linux/lib \
    ../libgpuverbs.a /usr/local/cuda/lib/libcudart.so -libverbs -lmlx5 -ldl -lcudadevrt -lcudart_static -lrt -lpthread
echo "built $O/gv_write_bw"
