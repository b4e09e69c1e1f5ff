#!/bin/bash
# Session 20 call 8: B1 = main's tree (5d6dab7) with fast_send_run in runs of up to 16 small
# SENDs (checked whole, their receives claimed with one CAS, their receive CQ slots taken with one
# RMW), against M (main at b70dfaf) and F3 (2ae1f9a, main's fast_send_run now). gv_bench.cu built
# on the development machine (nvcc 13.0, sm_90, -O3), linked with main's libgpuverbs.a.
# bench/compare.sh, 3 rounds alternating; cases in c8-cases.txt. Then gv_probe_path --op send of
# B1's tree (.devcarry/gv_probe_path_b1), drains of 64 8-byte SENDs.
set -u
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
timeout 400 bench/compare.sh --out $OUT/cmp --reps 3 --cases docs/perf-logs/2026-12-04-session20/c8-cases.txt \
    M=.devcarry/M F3=.devcarry/F3 B1=.devcarry/B1 >> $S 2>&1
echo "compare exit $?" >> $S
for p in gv_probe_path gv_probe_path_b1; do
  echo "== $p --op send --batch 64" >> $OUT/probe.txt
  timeout 60 .devcarry/$p --op send --batch 64 >> $OUT/probe.txt 2>&1 || echo "   (exit $?)" >> $OUT/probe.txt
done
