#!/bin/bash
# Session 16 call 3: the README test command on the final tree (kCommit, the direct path).
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
GV_SKIP_SANITIZERS=1 timeout 538 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "^==== |tests passed|tests failed|all tests passed|\(Failed\)|Timeout|Not Run|failed:" $OUT/run_tests-h200.log | tail -40 >> $S
grep -E "CommitFlag|RcOrdering" $OUT/run_tests-h200.log | grep "Test #" >> $S
tail -c 30000 $OUT/run_tests-h200.log > $OUT/run_tests-tail.txt
