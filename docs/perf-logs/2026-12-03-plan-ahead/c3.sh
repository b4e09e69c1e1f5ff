#!/bin/bash
# Session 12, call 3: README test command on the final plan-ahead tree; the failing test of call 2
# and the plan-ahead tests repeated; the large-WQE rows of the new tree (no base: budget).
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
GV_SKIP_SANITIZERS=1 timeout 370 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "tests passed|tests failed|all tests passed|FAILED|Failed|Timeout" $OUT/run_tests-h200.log | tail -12 >> $S
grep -E "GpuPlanAhead|WriteGatherListReadScatterList/soft_gpu_cpu" $OUT/run_tests-h200.log | grep "Test #" >> $S
T=build/tests/gv_gpu_traffic_tests
[ -x $T ] && timeout 25 $T --gtest_filter='Backends/Traffic.WriteGatherListReadScatterList/soft_gpu_cpu_initiator' --gtest_repeat=40 > $OUT/loop-gather.log 2>&1
echo "gather/scatter cpu-initiator loop rc=$? ok $(grep -c '^\[       OK \]' $OUT/loop-gather.log) failed $(grep -cE 'FAILED  \] .*\([0-9]+ ms\)' $OUT/loop-gather.log) at $(el) s" >> $S
G=build/tests/gv_gpu_tests
[ -x $G ] && timeout 20 $G --gtest_filter='GpuPlanAhead.*' --gtest_repeat=4 > $OUT/loop-plan-ahead.log 2>&1
echo "plan-ahead loop rc=$? ok $(grep -c '^\[       OK \]' $OUT/loop-plan-ahead.log) failed $(grep -cE 'FAILED  \] .*\([0-9]+ ms\)' $OUT/loop-plan-ahead.log) at $(el) s" >> $S
grep -B2 -A6 Failure $OUT/loop-gather.log $OUT/loop-plan-ahead.log | head -20 >> $S
N=build/tools; LOG=$OUT/bench.txt
run() { echo "== $*" >> $LOG; timeout 20 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
[ $(el) -lt 420 ] && run $N/gv_write_bw -s 65536 -q 264 -t 512 -n 62 --reps 3
[ $(el) -lt 425 ] && run $N/gv_send_bw -s 4096 -q 64 -t 256 -n 2048 --reps 3
[ $(el) -lt 430 ] && run $N/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3
[ $(el) -lt 435 ] && run $N/gv_write_bw -s 65536 -q 264 -t 1024 -n 62
echo "done at $(el) s" >> $S
