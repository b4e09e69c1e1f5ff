#!/bin/bash
# Session 17 call 2: B = d12d65c's bench tools (.devcarry/B, built on the development machine)
# against N = the fast path two WQEs deep (.devcarry/N, same build), alternating, 3 rounds; then
# N's GPU test binaries, built here while the benches run, run whole.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
( cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > $OUT/cfg.log 2>&1 &&
  cmake --build build-dev -j12 --target gv_gpu_tests gv_gpu_traffic_tests > $OUT/build.log 2>&1; echo "build rc=$? at $(el) s" >> $S ) &
BP=$!
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 30 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2 3; do
  for t in B N; do
    d=.devcarry/$t
    run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw -s 16 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw --op read -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 264 -t 64
    run "$t r$r" $d/gv_write_bw --lat -s 8
    run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3
  done
done
echo "ab at $(el) s" >> $S
for t in B N; do
  run "$t" .devcarry/$t/gv_probe_path --batch 256
  run "$t" .devcarry/$t/gv_probe_path
  run "$t" .devcarry/$t/gv_write_bw -s 65536 -q 264 -t 512
done
echo "probe at $(el) s" >> $S
wait $BP
for t in gv_gpu_tests gv_gpu_traffic_tests; do
  [ -x build-dev/tests/$t ] || { echo "$t not built" >> $S; continue; }
  left=$(( 565 - $(el) )); [ $left -gt 170 ] && left=170; [ $left -gt 10 ] || { echo "$t: no time left" >> $S; continue; }
  timeout $left build-dev/tests/$t > $OUT/$t.log 2>&1; echo "$t rc=$? at $(el) s (limit $left)" >> $S
  grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests ran" $OUT/$t.log | head -20 >> $S
done
echo "done at $(el) s" >> $S
