#!/bin/bash
# Session 23 call 2: M2 = main (5cd3d2b), R2 = branch send-runs with main merged in (3bb86d9).
# Each gv_write_bw built on the development machine with
# docs/perf-logs/2026-12-04-session21/build-bench-variant.sh NAME TREE "" (nvcc 13.0, sm_90, -O3),
# carried in .devcarry. bench/compare.sh, 3 rounds alternating; cases in c1-cases.txt.
set -u
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
timeout 520 bench/compare.sh --out $OUT/cmp --reps 3 --cases docs/perf-logs/2026-12-05-session23/c1-cases.txt \
    M2=.devcarry/M2 R2=.devcarry/R2 >> $S 2>&1
echo "compare exit $?" >> $S
