#!/bin/bash
# Session 17 call 4: the README test command on the session's final tree (the fast path as at
# d12d65c, the new Traffic.ChainedSmallWqesCarryEachOthersBytes), then gv_write_lat -s 8 once.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
git log --oneline -1 >> $S 2>&1
GV_SKIP_SANITIZERS=1 timeout 550 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "^==== |tests passed|tests failed|all tests passed|\(Failed\)|Timeout|Not Run|failed:|why they skipped" $OUT/run_tests-h200.log | tail -40 >> $S
grep -E "Chained" $OUT/run_tests-h200.log | grep "Test +#" >> $S
tail -c 30000 $OUT/run_tests-h200.log > $OUT/run_tests-tail.txt
[ $(el) -lt 580 ] && { echo "== gv_write_lat -s 8" >> $S; timeout 8 build/tools/gv_write_lat -s 8 >> $S 2>&1; }
echo "done at $(el) s" >> $S
