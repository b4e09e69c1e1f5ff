#!/bin/bash
# Session 15 call 3: the README test command on the final tree, then B = c900d5f against the
# final tree's bench tools: L (built on the development machine, as B was) and D (built here by
# the README command), alternating while time is left.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
GV_SKIP_SANITIZERS=1 timeout 470 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "tests passed|tests failed|all tests passed|\(Failed\)|Timeout|Not Run|failed:" $OUT/run_tests-h200.log | tail -30 >> $S
tail -c 20000 $OUT/run_tests-h200.log > $OUT/run_tests-tail.txt
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 20 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2 3; do
  for t in B L D; do
    [ $(el) -gt 560 ] && break 2
    case $t in B) d=.devcarry/Bt;; L) d=.devcarry/Nt;; D) d=build/tools;; esac
    run "$t r$r" $d/gv_write_lat -s 8
    [ $r = 1 ] && run "$t r$r" $d/gv_probe_path
    run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64
    run "$t r$r" $d/gv_write_bw --initiator cpu -s 8 -q 4 -t 64
    run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3
    run "$t r$r" $d/gv_compute_send -s 8
  done
  echo "ab round $r at $(el) s" >> $S
done
echo "done at $(el) s" >> $S
