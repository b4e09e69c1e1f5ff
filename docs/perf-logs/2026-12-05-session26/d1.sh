#!/bin/bash
# Session 26, device call 1: the README's test command (without the sanitizer tree, which is CPU
# only and passed in CI here) on the send-runs branch, then, in the time left, one round of the
# short comparison: B0 = gv_write_bw of main 5dd3664 (the code main has), R3 = the branch's, both
# built on the development machine (cmake Release, nvcc 13.0, sm_90) and carried in .devcarry.
set -u
S=$OUT/summary.txt
D=docs/perf-logs/2026-12-05-session26
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
GV_SKIP_SANITIZERS=1 timeout ${GV_TEST_LIMIT:-585} scripts/run_tests.sh > $OUT/tests.log 2>&1
echo "run_tests exit $? at ${SECONDS} s" >> $S
grep -E 'tests passed|tests failed|^(PASS|FAIL|SKIP)|passed|failed' $OUT/tests.log | grep -vE '^ *[0-9]+/[0-9]+ Test' | tail -30 >> $S
grep -E '\(Failed\)|\(Timeout\)|\*\*\*Failed|\*\*\*Timeout|Exception' $OUT/tests.log | head -20 >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
left=$((${GV_DEADLINE:-590} - SECONDS))
if [ $left -gt 25 ]; then
    timeout $left bench/compare.sh --out $OUT/cmp --reps 1 --cases $D/short-cases.txt \
        B0=.devcarry/B0 R3=.devcarry/R3 >> $S 2>&1
    echo "compare exit $? at ${SECONDS} s" >> $S
fi
