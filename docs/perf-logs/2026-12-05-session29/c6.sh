#!/bin/bash
# Session 29, device call 6 (fresh machine; calls 3-5 got none, 180-210 s of device time each):
# R10 against B0x and R7A, one round on f1-cases.txt (at most 45 s), then the README's test
# command (GV_SKIP_SANITIZERS=1) on this tree (R10 applied) in what is left.
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
timeout 45 bench/compare.sh --out $OUT/cmp --reps 1 --cases docs/perf-logs/2026-12-05-session29/f1-cases.txt \
  B0x=.devcarry/B0x R7A=.devcarry/R7A R10=.devcarry/R10 >> $S 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
export GV_SKIP_SANITIZERS=1
scripts/run_tests.sh > $OUT/tests.log 2>&1
echo "tests exit $? at ${SECONDS} s" >> $S
grep -E 'tests passed|tests failed|PASSED|FAILED|Total Test|skipped' $OUT/tests.log | tail -15 >> $S
