#!/bin/bash
# Session 19 call 3: why 64-byte SENDs lost in call 2 (10.0 -> 6.7 M msg/s over 64 QPs) while
# 8-byte ones gained (11.1 -> 16.7 M). F = main at the session's start; R = f24115d (call 2's
# tree: small SENDs on the fast path up to 128 bytes, receives posted per warp); R32 = R with
# fast_send_run limited to 32 bytes. All built on the development machine; 3 rounds alternating.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 30 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2 3; do
  [ $(el) -lt 300 ] || break
  for t in F R R32; do
    d=.devcarry/$t
    for s in 8 32 40 64 128; do run "$t r$r" $d/gv_write_bw --op send -s $s -q 64 -t 256 -n 1024; done
    run "$t r$r" $d/gv_write_bw --op send -s 8 -q 1 -t 64 -n 1024
    run "$t r$r" $d/gv_write_bw --op send -s 64 -q 1 -t 64 -n 1024
    run "$t r$r" $d/gv_write_bw --op send -s 64 -q 64 -t 32 -n 1024
    run "$t r$r" $d/gv_write_bw --op send -s 8 -q 64 -t 32 -n 1024
    run "$t r$r" $d/gv_write_bw --op send -s 4096 -q 64 -t 256 -n 1024
  done
done
echo "done at $(el) s" >> $S
