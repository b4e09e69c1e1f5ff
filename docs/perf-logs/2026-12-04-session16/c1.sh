#!/bin/bash
# Session 16 call 1: B = ce95171's tools (.devcarry/Ft) against N = the kCommit tree (.devcarry/N16,
# built on the development machine); G = N's gv_write_lat with a device-scope lock RMW on the direct
# path. Then the GPU test binaries built here and run whole.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
( cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > $OUT/cfg.log 2>&1 &&
  cmake --build build-dev -j12 --target gv_gpu_tests gv_gpu_traffic_tests > $OUT/build.log 2>&1; echo "build rc=$? at $(el) s" >> $S ) &
BP=$!
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 25 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2 3; do
  run "B r$r" .devcarry/Ft/gv_write_lat -s 8
  run "N r$r" .devcarry/N16/gv_write_lat -s 8
  run "G r$r" .devcarry/N16/gv_write_lat_gpulock -s 8
  run "S r$r" .devcarry/N16/gv_write_lat -s 8 --separate-commit
done
echo "lat at $(el) s" >> $S
wait $BP
for r in 1 2; do
  for t in B N; do
    case $t in B) d=.devcarry/Ft;; N) d=.devcarry/N16;; esac
    run "$t r$r" $d/gv_compute_send -s 8
    run "$t r$r" $d/gv_compute_send -s 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64
    run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3
  done
done
run "N" .devcarry/N16/gv_probe_path
echo "ab at $(el) s" >> $S
for t in gv_gpu_tests gv_gpu_traffic_tests; do
  [ -x build-dev/tests/$t ] || { echo "$t not built" >> $S; continue; }
  timeout 150 build-dev/tests/$t > $OUT/$t.log 2>&1; echo "$t rc=$? at $(el) s" >> $S
  grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran" $OUT/$t.log | head -20 >> $S
done
echo "done at $(el) s" >> $S
