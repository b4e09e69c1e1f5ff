#!/bin/bash
# Session 17 call 3: what limits one QP. B = d12d65c, N = 6e3a406 (the fast path two WQEs deep),
# X1 = N without the fast path's fence (an experiment: breaks RC ordering; only its gv_write_bw
# is N's code), X2 = N with the fast path's state copied out of the leader cache (FastCtx), all
# built on the development machine; alternating, 3 rounds.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 30 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2 3; do
  for t in B N X1 X2; do
    d=.devcarry/$t
    run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw --op read -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 264 -t 64
    run "$t r$r" $d/gv_write_bw --lat -s 8
    [ $t = X1 ] || run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3
  done
done
echo "ab at $(el) s" >> $S
for t in N X2; do run "$t" .devcarry/$t/gv_probe_path --batch 256; run "$t" .devcarry/$t/gv_probe_path; done
echo "done at $(el) s" >> $S
