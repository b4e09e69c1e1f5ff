#!/bin/bash
# Session 14 call 4: the GPU tests that call 3 failed, and their neighbours, on the final tree's
# binaries (built on the development machine, sm_90, Release, carried): the counting lock's
# kMore fix. Budget is short: the rest of gv_gpu_tests only if time is left.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
G=build-cuda/tests/gv_gpu_tests; T=build-cuda/tests/gv_gpu_traffic_tests
cnt() { echo "ok $(grep -c '^\[       OK \]' $1) failed $(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)' $1)"; }
timeout 45 $G --gtest_filter='CpuDoorbells.*' --gtest_repeat=2 > $OUT/cpudoorbells.log 2>&1
echo "CpuDoorbells.* x2 rc=$? $(cnt $OUT/cpudoorbells.log) at $(el) s" >> $S
timeout 30 $T --gtest_filter='*soft_gpu_cpu_initiator*' > $OUT/traffic-cpu-init.log 2>&1
echo "traffic soft_gpu_cpu_initiator rc=$? $(cnt $OUT/traffic-cpu-init.log) at $(el) s" >> $S
timeout 25 $T --gtest_filter='*SelectiveSignalingAcrossRingWrap*:*RcOrdering*:*LongLists*' --gtest_repeat=2 > $OUT/traffic-ring.log 2>&1
echo "traffic ring wrap / RC ordering x2 rc=$? $(cnt $OUT/traffic-ring.log) at $(el) s" >> $S
if [ $(el) -lt 100 ]; then
  timeout 60 $G --gtest_filter='-CpuDoorbells.*' > $OUT/gpu-rest.log 2>&1
  echo "gv_gpu_tests rest rc=$? $(cnt $OUT/gpu-rest.log) at $(el) s" >> $S
fi
grep -hE '^\[  FAILED  \]|Failure' $OUT/*.log | sort | uniq -c | head -20 >> $S
echo "done at $(el) s" >> $S
