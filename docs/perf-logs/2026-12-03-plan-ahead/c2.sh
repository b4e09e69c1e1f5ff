#!/bin/bash
# Session 12, call 2: README test command on the plan-ahead tree, the plan-ahead tests repeated,
# then A/B against main 49dadc8 (base.tar, built in this call) on the large-WQE rows.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
mkdir -p /tmp/base && tar -xf .devcarry/base.tar -C /tmp/base
( cmake -S /tmp/base -B /tmp/base/build -DCMAKE_BUILD_TYPE=Release > /tmp/base/cmake.log 2>&1 && \
  cmake --build /tmp/base/build -j4 --target gv_write_bw gv_read_bw gv_send_bw gv_write_lat > /tmp/base/build.log 2>&1; echo "base build rc=$? at $(el) s" >> $S ) &
GV_SKIP_SANITIZERS=1 timeout 420 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "tests passed|tests failed|all tests passed|FAILED|Failed|Timeout" $OUT/run_tests-h200.log | tail -12 >> $S
grep -E "GpuPlanAhead|RcOrdering" $OUT/run_tests-h200.log | grep "Test #" >> $S
wait
G=build/tests/gv_gpu_tests
if [ -x $G ]; then
  timeout 60 $G --gtest_filter='GpuPlanAhead.*:GpuProperties.RcOrdering*' --gtest_repeat=5 > $OUT/loop-plan-ahead.log 2>&1
  echo "plan-ahead loop rc=$? ok $(grep -c '^\[       OK \]' $OUT/loop-plan-ahead.log) failed $(grep -cE 'FAILED  \] .*\([0-9]+ ms\)' $OUT/loop-plan-ahead.log) at $(el) s" >> $S
  grep -E "gpu \]" $OUT/loop-plan-ahead.log | head -4 >> $S
  grep -B2 -A6 Failure $OUT/loop-plan-ahead.log | head -30 >> $S
fi
N=build/tools; B=/tmp/base/build/tools
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 25 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2 3; do
  [ $(el) -gt 500 ] && break
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 65536 -q 264 -t 512 -n 62 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 1048576 -q 264 -t 512 -n 32 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_read_bw -s 65536 -q 264 -t 512 -n 62 --reps 3; done
  [ $(el) -gt 530 ] && break
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 65536 -q 264 -t 256 -n 62 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_send_bw -s 4096 -q 64 -t 256 -n 2048 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_lat -s 8; done
  echo "ab round $r at $(el) s" >> $S
done
echo "done at $(el) s" >> $S
