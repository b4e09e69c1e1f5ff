#!/bin/bash
# Session 10, call 1: README test command at HEAD (prefetch removed), then loop the CpuDoorbells
# tests (the call-4 failure), then write_lat / probe without the prefetch.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
GV_SKIP_SANITIZERS=1 timeout 480 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "tests passed|tests failed|all tests passed|FAILED|Failed|Total Test time" $OUT/run_tests-h200.log | tail -14 >> $S
G=build/tests/gv_gpu_tests
if [ -x $G ]; then
  timeout 60 $G --gtest_filter='CpuDoorbells.ThreadsOnTheirOwnQpsLoseNothing' --gtest_repeat=120 > $OUT/loop1.log 2>&1; echo "loop1 rc=$? at $(el) s; fails: $(grep -c '^\[  FAILED  \] CpuDoorbells' $OUT/loop1.log) runs: $(grep -c '^\[       OK \]' $OUT/loop1.log)" >> $S
  for i in 1 2 3; do timeout 10 build/tools/gv_write_lat -s 8 >> $OUT/lat.txt 2>&1; done
  timeout 20 build/tools/gv_probe_path >> $OUT/lat.txt 2>&1
  R=$(( 585 - $(el) )); if [ $R -gt 15 ]; then
  timeout $R $G --gtest_filter='CpuDoorbells.*' --gtest_repeat=1000 > $OUT/loop2.log 2>&1; echo "loop2 rc=$? at $(el) s; fails: $(grep -c '^\[  FAILED  \] CpuDoorbells' $OUT/loop2.log) OK: $(grep -c '^\[       OK \]' $OUT/loop2.log)" >> $S
  fi
  grep -B3 -A12 'Failure' $OUT/loop*.log | head -80 >> $S
fi
echo "done at $(el) s" >> $S
