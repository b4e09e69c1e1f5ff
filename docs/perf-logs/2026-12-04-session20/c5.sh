#!/bin/bash
# Session 20 call 5: M = main at b70dfaf; F3 = 2ae1f9a (call 4's); F4 = F3 with an empty asm that
# takes the peer's view and QPN/CQ in registers right after they are loaded with the WQE (the
# compiler otherwise sinks each load to its first use). gv_bench.cu built on the development
# machine (nvcc 13.0, sm_90, -O3), linked with main's libgpuverbs.a. bench/compare.sh, 3 rounds
# alternating; cases in c5-cases.txt (call 3's).
set -u
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
for d in M F3 F4; do cp .devcarry/$d/gv_write_bw .devcarry/$d/gv_write_lat; done
timeout 540 bench/compare.sh --out $OUT/cmp --reps 3 --cases docs/perf-logs/2026-12-04-session20/c5-cases.txt \
    M=.devcarry/M F3=.devcarry/F3 F4=.devcarry/F4 >> $S 2>&1
echo "compare exit $?" >> $S
