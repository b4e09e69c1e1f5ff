#!/bin/bash
# Session 25, the one device call there was room for: the GPU test binaries (gv_gpu_tests,
# gv_gpu_traffic_tests) built on the development machine from main at this commit (cmake Release,
# nvcc 13.0, sm_90) and carried in .devcarry/T, each run whole in one process; then one round of
# c2-cases.txt with the carried builds B0 (main 5dd3664) and R2 (9922990: SENDs in runs).
# Device time was short (the refused starts used most of it), so this replaces the README's test
# command there (build on the device, ~470 s) for this session.
set -u
S=$OUT/summary.txt
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
for t in gv_gpu_tests gv_gpu_traffic_tests; do
    timeout ${GV_TEST_LIMIT:-170} .devcarry/T/$t > $OUT/$t.log 2>&1
    echo "$t exit $? at ${SECONDS} s" >> $S
    grep -E '^\[  PASSED|^\[  FAILED|tests ran|^\[  SKIPPED' $OUT/$t.log | head -20 >> $S
    # ctest runs each test in a process of its own; a test that failed in the shared process runs
    # again alone.
    for f in $(grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/$t.log | grep -v ' listed below' | awk '{print $4}' | sort -u); do
        timeout 60 .devcarry/T/$t --gtest_filter="$f" > $OUT/$t-alone-$f.log 2>&1
        echo "  alone: $f exit $?" >> $S
    done
done
left=$((${GV_DEADLINE:-440} - SECONDS))
if [ $left -gt 20 ]; then
    timeout $left bench/compare.sh --out $OUT/cmp --reps 1 --cases docs/perf-logs/2026-12-05-session25/c2-cases.txt \
        B0=.devcarry/B0 R2=.devcarry/R2 >> $S 2>&1
    echo "compare exit $? at ${SECONDS} s" >> $S
fi
