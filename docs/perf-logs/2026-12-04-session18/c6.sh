#!/bin/bash
# Session 18 call 6: the README test command on the tree with the fast path up to 128 bytes
# (W, 5ff... the commit after f8878f1), then F (f43a55b's gv_write_bw: 32 bytes at most) against W
# (built on the development machine), 3 rounds alternating: latency and rates at 8, 64 and 128
# bytes, and 4 KiB as the guard.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
GV_SKIP_SANITIZERS=1 timeout 450 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "^==== |tests passed|tests failed|all tests passed|\(Failed\)|Timeout|Not Run|failed:|why they skipped" $OUT/run_tests-h200.log | tail -40 >> $S
grep -E "UpTo129" $OUT/run_tests-h200.log | grep "Test +#" >> $S
tail -c 30000 $OUT/run_tests-h200.log > $OUT/run_tests-tail.txt
rm -f $OUT/run_tests-h200.log
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 30 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2 3; do
  [ $(el) -lt 540 ] || break
  for t in F W; do
    d=.devcarry/$t
    run "$t r$r" $d/gv_write_bw --lat -s 8
    run "$t r$r" $d/gv_write_bw --lat -s 64
    run "$t r$r" $d/gv_write_bw --lat -s 128
    run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw -s 64 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64
    run "$t r$r" $d/gv_write_bw -s 64 -q 264 -t 512 -n 2048 --reps 3
    run "$t r$r" $d/gv_write_bw --op read -s 128 -q 264 -t 512 -n 2048 --reps 3
    run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3
  done
done
echo "done at $(el) s" >> $S
