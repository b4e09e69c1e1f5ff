#!/bin/bash
# Session 10, final call: README test command with the board-loop fix, then CpuDoorbells in a loop while time is left.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
GV_SKIP_SANITIZERS=1 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "tests passed|tests failed|all tests passed|FAILED|Failed|Total Test time" $OUT/run_tests-h200.log | tail -14 >> $S
grep -E "CpuDoorbells" $OUT/run_tests-h200.log | grep "Test #" >> $S
G=build/tests/gv_gpu_tests
cnt() { echo "fails $(grep -cE 'FAILED  \] .*\([0-9]+ ms\)' $1) ok $(grep -cE '^\[       OK \]' $1)"; }
R=$(( 335 - $(el) ))
if [ -x $G ] && [ $R -gt 8 ]; then
  timeout $R $G --gtest_filter='CpuDoorbells.ThreadsOnTheirOwnQpsLoseNothing:CpuDoorbells.KernelsOutOfTimeMidWorkLoseNothing:CpuDoorbells.BoardTooSmall*' --gtest_repeat=400 > $OUT/loop.log 2>&1
  echo "loop rc=$? $(cnt $OUT/loop.log) at $(el) s" >> $S
  grep -B2 -A6 "Failure" $OUT/loop.log | head -40 >> $S
fi
echo "done at $(el) s" >> $S
