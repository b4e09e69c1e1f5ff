#!/bin/bash
# Session 17 call 1: the README test command on d12d65c (session 16's final tree, never run whole
# on the H200), then gv_write_lat -s 8 from the tree it built (3 rounds).
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
git log --oneline -1 >> $S 2>&1
GV_SKIP_SANITIZERS=1 timeout 545 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "^==== |tests passed|tests failed|all tests passed|\(Failed\)|Timeout|Not Run|failed:|SKIP|skip" $OUT/run_tests-h200.log | tail -40 >> $S
tail -c 30000 $OUT/run_tests-h200.log > $OUT/run_tests-tail.txt
for r in 1 2 3; do
  [ $(el) -lt 575 ] || break
  echo "== gv_write_lat -s 8 r$r" >> $S
  timeout 8 build/tools/gv_write_lat -s 8 >> $S 2>&1 || echo "(exit $?)" >> $S
done
echo "done at $(el) s" >> $S
