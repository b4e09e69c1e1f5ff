#!/bin/bash
# Session 18 call 3: L = main at 316717b (the same-shape check) against F = L + the one-way
# release fence (fence.release instead of libcu++'s fence.acq_rel), both gv_write_bw built on the
# development machine, 3 rounds alternating; then, what limits SEND 4 KiB: SEND and WRITE of the
# same shapes, and SEND 8 B, on F; then the two-process latency (server and client, MPS) on F.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 30 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2 3; do
  for t in L R2; do
    d=.devcarry/$t
    run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64
    run "$t r$r" $d/gv_write_bw --lat -s 8
    run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3
    run "$t r$r" $d/gv_write_bw -s 65536 -q 264 -t 512 -n 512 --reps 3
    run "$t r$r" $d/gv_write_bw --op send -s 4096 -q 64 -t 256 -n 1024
  done
done
echo "ab at $(el) s" >> $S
LOG=$OUT/send.txt
d=.devcarry/R2
for r in 1 2; do
  run "send r$r" $d/gv_write_bw --op send -s 4096 -q 64 -t 256 -n 1024
  run "write r$r" $d/gv_write_bw -s 4096 -q 64 -t 256 -n 1024
  run "send r$r" $d/gv_write_bw --op send -s 8 -q 64 -t 256 -n 1024
  run "write r$r" $d/gv_write_bw -s 8 -q 64 -t 256 -n 1024
  run "send r$r" $d/gv_write_bw --op send -s 4096 -q 1 -t 256 -n 1024
  run "write r$r" $d/gv_write_bw -s 4096 -q 1 -t 256 -n 1024
  run "send r$r" $d/gv_write_bw --op send -s 65536 -q 64 -t 256 -n 256
  run "write r$r" $d/gv_write_bw -s 65536 -q 64 -t 256 -n 256
done
echo "send at $(el) s" >> $S
LOG=$OUT/two-process.txt
for t in L R2; do
  d=.devcarry/$t
  ( timeout 40 $d/gv_write_bw --lat --server > $OUT/server-$t.txt 2>&1 & )
  sleep 1
  run "$t two-process" $d/gv_write_bw --lat -s 8 127.0.0.1
  sleep 1
done
echo "done at $(el) s" >> $S
