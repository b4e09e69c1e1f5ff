#!/bin/bash
# Session 25: the README's test command (sanitizer tree skipped: it does not fit the call; it
# runs in CI on the development machine), then, in what is left of the call, one round of
# c2-cases.txt with the carried builds B0 (main 5dd3664) and R2 (9922990: SENDs in runs), both built on the
# development machine (cmake Release, nvcc 13.0, sm_90, target gv_write_bw).
set -u
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
(time GV_SKIP_SANITIZERS=1 scripts/run_tests.sh) > $OUT/tests.log 2>&1
echo "tests exit $? after ${SECONDS} s" >> $S
grep -E 'tests passed|FAILED|all tests passed|Total Test' $OUT/tests.log >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
left=$((560 - SECONDS))
if [ $left -gt 20 ]; then
    timeout $left bench/compare.sh --out $OUT/cmp --reps 1 --cases docs/perf-logs/2026-12-05-session25/c2-cases.txt \
        B0=.devcarry/B0 R2=.devcarry/R2 >> $S 2>&1
    echo "compare exit $?" >> $S
fi
