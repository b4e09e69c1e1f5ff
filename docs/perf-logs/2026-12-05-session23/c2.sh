#!/bin/bash
# Session 23 call 3: R3 = send-runs with fast_send_run back in every group (SENDs of up to 32
# bytes by the leader alone; larger ones in group runs) and gv_bench.cu's check that send_bw's
# grid fits the GPU, against M2 = main (5cd3d2b); both built with
# docs/perf-logs/2026-12-04-session21/build-bench-variant.sh (carried in .devcarry). bench/compare.sh, 2 rounds
# alternating; cases in c2-cases.txt. Then the GPU test binaries of R3's tree, built on the
# development machine (build/tests, carried): gv_gpu_tests and gv_gpu_traffic_tests whole.
set -u
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
timeout 170 bench/compare.sh --out $OUT/cmp --reps 2 --cases docs/perf-logs/2026-12-05-session23/c2-cases.txt \
    M2=.devcarry/M2 R3=.devcarry/R3 >> $S 2>&1
echo "compare exit $?" >> $S
timeout 30 .devcarry/R3/gv_write_bw --op send -q 4096 -t 512 -n 512 > $OUT/send-grid.txt 2>&1
echo "send grid check exit $?" >> $OUT/send-grid.txt
for t in gv_gpu_tests gv_gpu_traffic_tests; do
  ( time timeout 200 build/tests/$t ) > $OUT/$t.log 2>&1
  echo "$t exit $?" >> $S
  grep -E '^\[  (PASSED|FAILED) |tests? ran|SKIPPED \]' $OUT/$t.log | tail -8 >> $S
done
