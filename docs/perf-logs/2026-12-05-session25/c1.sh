#!/bin/bash
# Session 25 call 2: B0 = main at 5dd3664, R2 = 9922990 (SENDs in runs, the next loaded during the checks). Each gv_write_bw built
# on the development machine (cmake Release, nvcc 13.0, sm_90: `cmake --build build --target
# gv_write_bw`), carried in .devcarry. bench/compare.sh, 2 rounds alternating; cases in c1-cases.txt.
set -u
S=$OUT/summary.txt
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
for b in B0 R1 R2; do cuobjdump --dump-resource-usage .devcarry/$b/gv_write_bw 2>&1 | grep -A1 'bw_kernel' > $OUT/res-$b.txt; done
timeout 430 bench/compare.sh --out $OUT/cmp --reps 2 --cases docs/perf-logs/2026-12-05-session25/c1-cases.txt \
    B0=.devcarry/B0 R2=.devcarry/R2 >> $S 2>&1
echo "compare exit $?" >> $S
