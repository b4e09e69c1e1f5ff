#!/bin/bash
# Session 13, call 4: the README test command at the landed code (chained WQEs, plan in shared
# memory); the plan-ahead, ordering and overlap tests repeated; the large-WQE rows and the small
# ones (8-byte rate, latency) of the landed code, two rounds.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
GV_SKIP_SANITIZERS=1 timeout 420 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "tests passed|tests failed|all tests passed|FAILED|Failed|Timeout" $OUT/run_tests-h200.log | tail -12 >> $S
G=build/tests/gv_gpu_tests
[ -x $G ] && timeout 25 $G --gtest_filter='GpuPlanAhead.*:*RcOrdering*' --gtest_repeat=3 > $OUT/loop.log 2>&1
echo "plan-ahead/ordering loop rc=$? ok $(grep -c '^\[       OK \]' $OUT/loop.log) failed $(grep -cE 'FAILED  \] .*\([0-9]+ ms\)' $OUT/loop.log) at $(el) s" >> $S
T=build/tests/gv_gpu_traffic_tests
[ -x $T ] && timeout 15 $T --gtest_filter='Backends/Traffic.WriteGatherListReadScatterList/soft_gpu*' --gtest_repeat=10 > $OUT/loop-gather.log 2>&1
echo "gather/scatter loop rc=$? ok $(grep -c '^\[       OK \]' $OUT/loop-gather.log) failed $(grep -cE 'FAILED  \] .*\([0-9]+ ms\)' $OUT/loop-gather.log) at $(el) s" >> $S
N=build/tools; LOG=$OUT/bench.txt
run() { echo "== $*" >> $LOG; timeout 20 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2; do
  [ $(el) -gt 430 ] && break
  run $N/gv_write_bw -s 65536 -q 264 -t 512 -n 62 --reps 3
  run $N/gv_read_bw -s 65536 -q 264 -t 512 -n 62 --reps 3
  run $N/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3
  run $N/gv_send_bw -s 4096 -q 64 -t 256 -n 2048 --reps 3
  run $N/gv_write_bw -s 65536 -q 264 -t 256 -n 62 --reps 3
  run $N/gv_write_bw -s 1048576 -q 264 -t 512 -n 32 --reps 3
  run $N/gv_write_bw -s 8 -q 66 -t 64 --reps 3
  run $N/gv_write_lat -s 8
  echo "bench round $r at $(el) s" >> $S
done
# The suite (bench/run_suite.sh) of the landed code, in what time is left.
left=$(( 545 - $(el) ))
if [ $left -gt 60 ]; then
  timeout $left bench/run_suite.sh build/tools $OUT/suite > $OUT/suite-stdout.txt 2>&1; echo "suite rc=$? at $(el) s: $(tail -1 $OUT/suite-stdout.txt)" >> $S
fi
echo "done at $(el) s" >> $S
