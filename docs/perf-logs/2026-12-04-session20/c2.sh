#!/bin/bash
# Session 20 call 2: where call 1's 4 KiB WRITE loss comes from, and a group's bounded wait for
# a receive (await_receive). M = main at b70dfaf; P = 9406065 (publish_group and the
# default-handle fix only); S2 = 5c52ddd (+ chained SENDs, slots in the plan buffer); R = S2 +
# await_receive (20 us); R3 = R built with -DGV_SEND_AHEAD_BYTES=1048576. gv_bench.cu built on
# the development machine (nvcc 13.0, sm_90, -O3), linked with main's libgpuverbs.a.
# bench/compare.sh, 3 rounds alternating; cases in c2-cases.txt.
set -u
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
for d in M P S2 R R3; do cp .devcarry/$d/gv_write_bw .devcarry/$d/gv_write_lat; done
timeout 540 bench/compare.sh --out $OUT/cmp --reps 3 --cases docs/perf-logs/2026-12-04-session20/c2-cases.txt \
    M=.devcarry/M P=.devcarry/P S2=.devcarry/S2 R=.devcarry/R R3=.devcarry/R3 >> $S 2>&1
echo "compare exit $?" >> $S
