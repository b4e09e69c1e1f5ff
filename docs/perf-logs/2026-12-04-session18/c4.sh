#!/bin/bash
# Session 18 call 4: F = main at f43a55b (one-way release fence) against C8 = F with the group
# copy's loop taking eight words per thread in flight instead of four (GV_EXP_COPY8, an experiment:
# ptxas spills 150 bytes where F spills 24), both built on the development machine, 3 rounds;
# (GV_EXP_COPY8 was, for this call only, an #ifdef'd loop at the top of copy_words() in
# include/gpuverbs/detail/soft/copy.cuh: T v[8]; eight loads of s[i + k * step], then eight
# stores, while i + 7 * step < n; then the existing four-wide loop.)
# SEND 8 B and 4 KiB with 32 and 512 threads per QP on F; then F's WRITE 64 KiB in two processes.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 40 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2 3; do
  for t in F C8; do
    d=.devcarry/$t
    run "$t r$r" $d/gv_write_bw -s 65536 -q 264 -t 512 -n 512 --reps 3
    run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3
    run "$t r$r" $d/gv_write_bw -s 1048576 -q 264 -t 512 -n 32 --reps 3
    run "$t r$r" $d/gv_write_bw --op send -s 65536 -q 64 -t 256 -n 256
  done
done
echo "ab at $(el) s" >> $S
LOG=$OUT/send.txt
d=.devcarry/F
for tt in 32 64 512; do
  run "send t$tt" $d/gv_write_bw --op send -s 8 -q 64 -t $tt -n 1024
  run "send t$tt" $d/gv_write_bw --op send -s 4096 -q 64 -t $tt -n 1024
done
echo "send at $(el) s" >> $S
LOG=$OUT/two-process.txt
( timeout 60 $d/gv_write_bw --server > $OUT/server-F.txt 2>&1 & )
sleep 1
run "F two-process" $d/gv_write_bw -s 65536 -q 264 -t 512 -n 512 --reps 3 127.0.0.1
sleep 2
( timeout 60 $d/gv_write_bw --server > $OUT/server-F2.txt 2>&1 & )
sleep 1
run "F two-process" $d/gv_write_bw -s 1048576 -q 264 -t 512 -n 32 --reps 3 127.0.0.1
echo "done at $(el) s" >> $S
