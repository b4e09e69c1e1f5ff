#!/bin/bash
# Session 18 call 5: the README test command on the session's final tree (the same-shape check,
# the one-way release fence), then, in the time left, the benchmark suite on the tools it built.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
git status --short | head -5 >> $S
GV_SKIP_SANITIZERS=1 timeout 480 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "^==== |tests passed|tests failed|all tests passed|\(Failed\)|Timeout|Not Run|failed:|why they skipped" $OUT/run_tests-h200.log | tail -40 >> $S
tail -c 30000 $OUT/run_tests-h200.log > $OUT/run_tests-tail.txt
rm -f $OUT/run_tests-h200.log
left=$(( 585 - $(el) ))
if [ $left -gt 30 ]; then
  timeout $left bench/run_suite.sh build/tools $OUT/suite > $OUT/suite-stdout.txt 2>&1; echo "suite rc=$? at $(el) s (limit $left s)" >> $S
  rm -f $OUT/suite/*.png
fi
echo "done at $(el) s" >> $S
