#!/bin/bash
# Session 23 call 3, c2.sh cut to the device time left (failed machine starts had taken most of
# it): R3 = send-runs with fast_send_run back in every group (SENDs of up to 32 bytes by the
# leader alone, larger ones in group runs) and gv_bench.cu's send_bw grid check, against M2 =
# main (5cd3d2b), one round each (call 2 ran M2 three times). Then R3's grid check, and the GPU
# tests of the executor's SEND, RNR, ordering and plan-ahead paths from R3's gv_gpu_tests
# (built on the development machine, carried).
set -u
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
timeout 60 bench/compare.sh --out $OUT/cmp --reps 1 --cases docs/perf-logs/2026-12-05-session23/c3-cases.txt \
    M2=.devcarry/M2 R3=.devcarry/R3 >> $S 2>&1
echo "compare exit $?" >> $S
timeout 30 .devcarry/R3/gv_write_bw --op send -q 4096 -t 512 -n 512 > $OUT/send-grid.txt 2>&1
echo "send grid check exit $?" >> $OUT/send-grid.txt
( time timeout 75 build/tests/gv_gpu_tests --gtest_filter='GpuVerbsTwoSided.*:GpuVerbsRnr.*:GpuPlanAhead.*:GpuProperties.*' ) > $OUT/gv_gpu_tests.log 2>&1
echo "gv_gpu_tests exit $?" >> $S
grep -E '^\[  (PASSED|FAILED) |tests? ran|FAILED' $OUT/gv_gpu_tests.log | tail -12 >> $S
