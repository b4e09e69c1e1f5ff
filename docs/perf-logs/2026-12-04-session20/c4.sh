#!/bin/bash
# Session 20 call 4: F3 = branch s20-final's tree (publish_group, the default-handle fix, and
# fast_send_run keeping the peer's receive position and posted count for the run, its view
# loaded with each WQE) against M = main at b70dfaf. gv_bench.cu built on the development
# machine (nvcc 13.0, sm_90, -O3), linked with main's libgpuverbs.a. bench/compare.sh, 3 rounds
# alternating; cases in c4-cases.txt (call 3's).
set -u
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
for d in M F3; do cp .devcarry/$d/gv_write_bw .devcarry/$d/gv_write_lat; done
timeout 540 bench/compare.sh --out $OUT/cmp --reps 3 --cases docs/perf-logs/2026-12-04-session20/c4-cases.txt \
    M=.devcarry/M F3=.devcarry/F3 >> $S 2>&1
echo "compare exit $?" >> $S
