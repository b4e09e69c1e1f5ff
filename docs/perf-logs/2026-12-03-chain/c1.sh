#!/bin/bash
# Session 13, call 1: README test command at main 6de20ee (the final plan-ahead tree, never run on
# a GPU); the test that found the overlap defect and the plan-ahead tests repeated; A/B against
# 49dadc8 (base.tar, built in this call) on SEND 4 KiB (changed after the last measurement) and
# the 64 KiB row; gv_probe_path on the new tree.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
mkdir -p /tmp/base && tar -xf .devcarry/base.tar -C /tmp/base
( cmake -S /tmp/base -B /tmp/base/build -DCMAKE_BUILD_TYPE=Release > /tmp/base/cmake.log 2>&1 && \
  cmake --build /tmp/base/build -j3 --target gv_write_bw gv_send_bw > /tmp/base/build.log 2>&1; echo "base build rc=$? at $(el) s" >> $S ) &
GV_SKIP_SANITIZERS=1 timeout 400 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "tests passed|tests failed|all tests passed|FAILED|Failed|Timeout" $OUT/run_tests-h200.log | tail -12 >> $S
grep -E "GpuPlanAhead|WriteGatherListReadScatterList/soft_gpu_cpu" $OUT/run_tests-h200.log | grep "Test #" >> $S
wait
T=build/tests/gv_gpu_traffic_tests
[ -x $T ] && timeout 25 $T --gtest_filter='Backends/Traffic.WriteGatherListReadScatterList/soft_gpu_cpu_initiator' --gtest_repeat=40 > $OUT/loop-gather.log 2>&1
echo "gather/scatter cpu-initiator loop rc=$? ok $(grep -c '^\[       OK \]' $OUT/loop-gather.log) failed $(grep -cE 'FAILED  \] .*\([0-9]+ ms\)' $OUT/loop-gather.log) at $(el) s" >> $S
G=build/tests/gv_gpu_tests
[ -x $G ] && timeout 20 $G --gtest_filter='GpuPlanAhead.*' --gtest_repeat=4 > $OUT/loop-plan-ahead.log 2>&1
echo "plan-ahead loop rc=$? ok $(grep -c '^\[       OK \]' $OUT/loop-plan-ahead.log) failed $(grep -cE 'FAILED  \] .*\([0-9]+ ms\)' $OUT/loop-plan-ahead.log) at $(el) s" >> $S
grep -B2 -A6 Failure $OUT/loop-gather.log $OUT/loop-plan-ahead.log | head -20 >> $S
N=build/tools; B=/tmp/base/build/tools
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 20 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2; do
  [ $(el) -gt 520 ] && break
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_send_bw -s 4096 -q 64 -t 256 -n 2048 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 65536 -q 264 -t 512 -n 62 --reps 3; done
  echo "ab round $r at $(el) s" >> $S
done
[ $(el) -lt 550 ] && [ -x $N/gv_probe_path ] && timeout 20 $N/gv_probe_path > $OUT/probe_path.txt 2>&1
echo "done at $(el) s" >> $S
