#!/bin/bash
# Session 20 call 9: the README test command on the session's final tree (main with the batched
# fast_send_run), nothing else (the device budget holds one run of it).
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
GV_SKIP_SANITIZERS=1 timeout 560 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "^==== |tests passed|tests failed|all tests passed|\(Failed\)|Timeout|Not Run|failed:|why they skipped" $OUT/run_tests-h200.log | tail -40 >> $S
grep -E "SmallSends|LostSendCompletion|SendsComplete|LostReceive" $OUT/run_tests-h200.log >> $S
tail -c 30000 $OUT/run_tests-h200.log > $OUT/run_tests-tail.txt
rm -f $OUT/run_tests-h200.log
