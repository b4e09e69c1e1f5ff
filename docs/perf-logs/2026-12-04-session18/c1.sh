#!/bin/bash
# Session 18 call 1: the README test command with the lean fast path applied (session 17's
# lean-fast-path.patch), then call 6's rows of session 17 again: B = main before the patch
# (0c33909's bench tools, built on the development machine and carried) against L = the tools
# the README command just built with the patch, alternating, 3 rounds; then gv_write_lat -s 8.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
git diff --stat >> $S 2>&1
GV_SKIP_SANITIZERS=1 timeout 500 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "^==== |tests passed|tests failed|all tests passed|\(Failed\)|Timeout|Not Run|failed:|why they skipped" $OUT/run_tests-h200.log | tail -40 >> $S
grep -E "SameShape" $OUT/run_tests-h200.log | grep "Test +#" >> $S
tail -c 30000 $OUT/run_tests-h200.log > $OUT/run_tests-tail.txt
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 30 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2 3; do
  [ $(el) -lt 560 ] || break
  for t in B L; do
    if [ $t = B ]; then d=.devcarry/B; else d=build/tools; fi
    run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw --op read -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 264 -t 64
    run "$t r$r" $d/gv_write_bw --lat -s 8
    run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3
  done
done
echo "ab at $(el) s" >> $S
[ $(el) -lt 580 ] && { echo "== gv_write_lat -s 8" >> $S; timeout 8 build/tools/gv_write_lat -s 8 >> $S 2>&1; }
echo "done at $(el) s" >> $S
