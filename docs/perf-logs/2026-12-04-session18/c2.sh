#!/bin/bash
# Session 18 call 2: where one QP's 0.93 us per small WQE goes after the same-shape check.
# Variants of gv_write_bw built on the development machine (main at 316717b + experiment macros):
#   L   main;  R  every release fence as `fence.release.{gpu,sys}` instead of libcu++'s acq_rel form;
#   NC  the fast path without its copy;  NF  without its fence;  NCF  without both
# (NC/NF/NCF break what they remove: measurements only). 3 rounds alternating. Then the SASS of
# the two fence forms (fr.cubin) and of L's gv_write_bw.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 30 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2 3; do
  for t in L R NC NF NCF; do
    d=.devcarry/$t
    run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw --op read -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64
    run "$t r$r" $d/gv_write_bw --lat -s 8
    if [ $t = L -o $t = R ]; then
      run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3
      run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 512 -n 4096
      run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 32
    fi
  done
done
echo "ab at $(el) s" >> $S
cuobjdump -sass .devcarry/fr.cubin > $OUT/fence-forms-sass.txt 2>&1
cuobjdump -sass .devcarry/L/gv_write_bw 2>&1 | gzip > $OUT/L-sass.txt.gz
echo "done at $(el) s" >> $S
