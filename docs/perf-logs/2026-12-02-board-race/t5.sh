#!/bin/bash
# Session 10: the board-loop fix, checked where it failed: build the GPU tests, run every
# CpuDoorbells test once, then loop the ones that lost WQEs (about 1 run in 5 before the fix).
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
git log --oneline -1 >> $S
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > $OUT/cmake.log 2>&1
cmake --build build -j16 --target gv_gpu_tests > $OUT/build.log 2>&1; echo "build rc=$? at $(el) s" >> $S
G=build/tests/gv_gpu_tests
cnt() { echo "fails $(grep -cE 'FAILED  \] .*\([0-9]+ ms\)' $1) ok $(grep -cE '^\[       OK \]' $1)"; }
timeout 60 $G --gtest_filter='CpuDoorbells.*' > $OUT/once.log 2>&1; echo "once rc=$? $(cnt $OUT/once.log) at $(el) s" >> $S
grep -E '^\[ *(OK|FAILED) *\]' $OUT/once.log >> $S
timeout 30 $G --gtest_filter='CpuDoorbells.ThreadsOnTheirOwnQpsLoseNothing' --gtest_repeat=150 > $OUT/loop-threads.log 2>&1; echo "threads x150 rc=$? $(cnt $OUT/loop-threads.log) at $(el) s" >> $S
timeout 40 $G --gtest_filter='CpuDoorbells.KernelsOutOfTimeMidWorkLoseNothing' --gtest_repeat=150 > $OUT/loop-short.log 2>&1; echo "short-budget x150 rc=$? $(cnt $OUT/loop-short.log) at $(el) s" >> $S
R=$(( 215 - $(el) ))
if [ $R -gt 10 ]; then
  timeout $R $G --gtest_filter='CpuDoorbells.*' --gtest_repeat=1000 > $OUT/loop-all.log 2>&1; echo "all loop rc=$? $(cnt $OUT/loop-all.log) at $(el) s" >> $S
fi
for f in $OUT/loop-*.log; do grep -E 'FAILED  \] .*\([0-9]+ ms\)' $f | sed 's/ (.*//' | sort | uniq -c; done >> $S
grep -h -B2 -A6 "Failure" $OUT/once.log $OUT/loop-*.log | head -30 >> $S
echo "done at $(el) s" >> $S
