#!/bin/bash
# Session 29, device call 2, on the machine call 1 left warm (build tree kept): the README's test
# command without the sanitizer tier (the fresh-clone CI runs that tier), then, in the time
# left, main's tools against B0x on session 27's e9 cases (WRITE 4 KiB).
set -u
S=$OUT/summary.txt
export GV_SKIP_SANITIZERS=1
scripts/run_tests.sh > $OUT/tests.log 2>&1
echo "tests exit $? at ${SECONDS} s" >> $S
grep -E 'tests passed|tests failed|PASSED|FAILED|Total Test|skipped' $OUT/tests.log | tail -15 >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
left=$((${GV_DEADLINE:-570} - SECONDS))
if [ $left -gt 60 ]; then
  timeout $left bench/compare.sh --out $OUT/cmp --reps 2 --cases docs/perf-logs/2026-12-05-session27/e9-cases.txt \
    B0x=.devcarry/B0x main=build/tools >> $S 2>&1
  echo "compare exit $? at ${SECONDS} s" >> $S
fi
