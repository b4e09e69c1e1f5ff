#!/bin/bash
# Session 20 call 1: chained SENDs and signaled WQEs against main at b70dfaf (M). S = branch s20 at
# 76a1d1a (publish_group, the default-handle fix, take_slots with the taken slots in the leader's
# registers: the block-commit kernel spills 136 bytes, main 8); S2 = S with the taken slots in
# the plan buffer (shared memory). gv_bench.cu built on the development machine (nvcc 13.0,
# sm_90, -O3), linked with main's libgpuverbs.a. bench/compare.sh, 3 rounds alternating M, S,
# S2, S3; S3 = S2 built with -DGV_SEND_AHEAD_BYTES=1048576 (every SEND planned ahead, so chained).
# Cases in c1-cases.txt.
set -u
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
for d in M S S2 S3; do cp .devcarry/$d/gv_write_bw .devcarry/$d/gv_write_lat; done
timeout 520 bench/compare.sh --out $OUT/cmp --reps 3 --cases docs/perf-logs/2026-12-04-session20/c1-cases.txt \
    M=.devcarry/M S=.devcarry/S S2=.devcarry/S2 S3=.devcarry/S3 >> $S 2>&1
echo "compare exit $?" >> $S
