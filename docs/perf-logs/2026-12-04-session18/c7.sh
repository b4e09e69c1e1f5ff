#!/bin/bash
# Session 18 call 7 (the last of the session's device time): F (f43a55b) against W2 (the fast path
# up to 128 bytes with its first 32-byte round in a straight line: fast-path-128.patch), both
# built on the development machine, 2 rounds alternating.
set -u
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 15 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2; do
  for t in F W2; do
    d=.devcarry/$t
    run "$t r$r" $d/gv_write_bw --lat -s 8
    run "$t r$r" $d/gv_write_bw --lat -s 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64
    run "$t r$r" $d/gv_write_bw -s 64 -q 264 -t 512 -n 2048 --reps 3
  done
done
