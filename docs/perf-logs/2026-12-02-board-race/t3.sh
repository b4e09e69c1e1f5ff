#!/bin/bash
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > $OUT/cmake.log 2>&1
cmake --build build -j16 --target gv_gpu_tests > $OUT/build.log 2>&1; echo "build rc=$? at $(el) s" >> $S
G=build/tests/gv_gpu_tests
cnt() { echo "fails $(grep -cE 'FAILED  \] .*\([0-9]+ ms\)' $1) ok $(grep -cE '^\[       OK \]' $1) desync $(grep -c DESYNC $1) stale $(grep -c STALE $1)"; }
for m in 0 2; do
  GV_DBG_STAGE_MODE=$m timeout 40 $G --gtest_filter='CpuDoorbells.ThreadsOnTheirOwnQpsLoseNothing' --gtest_repeat=80 > $OUT/m$m.log 2>&1
  echo "mode $m rc=$? $(cnt $OUT/m$m.log) at $(el) s" >> $S
  grep -h "\[dbg\] \(STALE\|DESYNC\)\|Which is: \"completion" $OUT/m$m.log | head -20 >> $S
done
echo "done at $(el) s" >> $S
