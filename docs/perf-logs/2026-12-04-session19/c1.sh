#!/bin/bash
# Session 19 call 1: four builds of gv_write_bw made on the development machine, 3 rounds alternating:
#   F  = main (f43a55b's library code: fast path up to 32 bytes)
#   W2 = F + fast-path-128.patch (WRITE/READ up to 128 bytes on the fast path, first round straight-line)
#   S  = branch send-fast (ae0769f: small SENDs in fast_send_run)
#   SW = S + fast-path-128.patch
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 30 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2 3; do
  [ $(el) -lt 400 ] || break
  for t in F W2 S SW; do
    d=.devcarry/$t
    run "$t r$r" $d/gv_write_bw --lat -s 8
    run "$t r$r" $d/gv_write_bw --lat -s 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw -s 64 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64
    run "$t r$r" $d/gv_write_bw -s 64 -q 264 -t 512 -n 2048 --reps 3
    run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3
    run "$t r$r" $d/gv_write_bw --op send -s 8 -q 1 -t 64 -n 1024
    run "$t r$r" $d/gv_write_bw --op send -s 8 -q 64 -t 256 -n 1024
    run "$t r$r" $d/gv_write_bw --op send -s 32 -q 64 -t 256 -n 1024
    run "$t r$r" $d/gv_write_bw --op send -s 4096 -q 64 -t 256 -n 1024
  done
done
echo "done at $(el) s" >> $S
