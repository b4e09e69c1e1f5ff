#!/bin/bash
# Session 17 call 6: B = d12d65c's bench tools against L = the fast path's lean way for WQEs of
# the shape of the one before (lean-fast-path.patch), both built on the development machine,
# alternating, 3 rounds; then L's GPU test binaries (built on the development machine) where
# carried.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 30 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2 3; do
  for t in B L; do
    d=.devcarry/$t
    run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw --op read -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 264 -t 64
    run "$t r$r" $d/gv_write_bw --lat -s 8
    run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3
  done
done
echo "ab at $(el) s" >> $S
for t in B L; do run "$t" .devcarry/$t/gv_probe_path --batch 256; done
echo "probe at $(el) s" >> $S
for t in gv_gpu_traffic_tests gv_gpu_tests; do
  [ -x .devcarry/L/$t ] || { echo "$t not carried" >> $S; continue; }
  left=$(( 150 - $(el) )); [ $left -gt 10 ] || { echo "$t: no time left" >> $S; continue; }
  timeout $left .devcarry/L/$t > $OUT/$t.log 2>&1; echo "$t rc=$? at $(el) s (limit $left)" >> $S
  grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $OUT/$t.log | head -20 >> $S
done
echo "done at $(el) s" >> $S
