#!/bin/bash
# Session 16 call 2: the README test command on the kCommit tree, then B = ce95171's tools
# (.devcarry/Ft) against N (.devcarry/N16, this tree's tools built on the development machine),
# alternating while time is left.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
GV_SKIP_SANITIZERS=1 timeout 445 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "tests passed|tests failed|all tests passed|\(Failed\)|Timeout|Not Run|failed:" $OUT/run_tests-h200.log | tail -30 >> $S
tail -c 20000 $OUT/run_tests-h200.log > $OUT/run_tests-tail.txt
grep -E "CommitFlag" $OUT/run_tests-h200.log | grep "Test #" | head >> $S
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 15 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2 3; do
  for t in B N; do
    [ $(el) -gt 570 ] && break 2
    case $t in B) d=.devcarry/Ft;; N) d=.devcarry/N16;; esac
    run "$t r$r" $d/gv_write_lat -s 8
    [ $t = N ] && run "$t r$r" $d/gv_write_lat -s 8 --separate-commit
    run "$t r$r" $d/gv_compute_send -s 8
    run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64
    run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3
  done
  echo "ab round $r at $(el) s" >> $S
done
echo "done at $(el) s" >> $S
