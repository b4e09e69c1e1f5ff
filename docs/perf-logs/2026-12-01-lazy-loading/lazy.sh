#!/bin/bash
# Issue 13 diagnosis: lazy kernel loading vs the stand-in CPU-proxy timeouts.
B=.devcarry/bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
one() { # name env filter bin n
  local name=$1 envs=$2 filt=$3 bin=$4 n=$5 fail=0
  for i in $(seq $n); do
    if ! env $envs timeout 20 $bin --gtest_filter="$filt" > $OUT/$name-$i.log 2>&1; then fail=$((fail+1)); else rm -f $OUT/$name-$i.log; fi
  done
  echo "$name: $fail of $n runs failed"
}
one old-lazy "CUDA_MODULE_LOADING=LAZY" 'Backends/Traffic.NopSignalsTheEndOfUnsignaledWork/mlx5_standin_gpu_proxy' $B/gv_gpu_traffic_tests 25
one old-eager "CUDA_MODULE_LOADING=EAGER" 'Backends/Traffic.NopSignalsTheEndOfUnsignaledWork/mlx5_standin_gpu_proxy' $B/gv_gpu_traffic_tests 25
one old-lazy-gpu "CUDA_MODULE_LOADING=LAZY" 'Backends/Traffic.NopSignalsTheEndOfUnsignaledWork/mlx5_standin_gpu' $B/gv_gpu_traffic_tests 15
one new-test "CUDA_MODULE_LOADING=LAZY" 'GpuDataPath.CpuWriteReachesAKernelAlreadyWaitingForIt' $B/gv_gpu_tests 15
$B/gv_gpu_tests --gtest_filter='GpuDataPath.CpuWriteReachesAKernelAlreadyWaitingForIt' 2>&1 | tail -5
ls $OUT | head
