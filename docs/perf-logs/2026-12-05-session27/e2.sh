#!/bin/bash
# Session 27, device call B, on the machine call A left warm (build tree kept): the README's
# test command without the sanitizer tier, then bench/compare.sh B0x against R6 (d4-cases, 3
# rounds) in the time left.
set -u
S=$OUT/summary.txt
export GV_SKIP_SANITIZERS=1
scripts/run_tests.sh > $OUT/tests.log 2>&1
echo "tests exit $? at ${SECONDS} s" >> $S
grep -E 'tests passed|tests failed|PASSED|FAILED|Total Test' $OUT/tests.log | tail -15 >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
left=$((${GV_DEADLINE:-570} - SECONDS))
if [ $left -gt 30 ]; then
  timeout $left bench/compare.sh --out $OUT/cmp --reps 3 --cases docs/perf-logs/2026-12-05-session26/d4-cases.txt B0x=.devcarry/B0x R6=.devcarry/R6 >> $S 2>&1
  echo "compare exit $? at ${SECONDS} s" >> $S
fi
