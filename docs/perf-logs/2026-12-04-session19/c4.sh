#!/bin/bash
# Session 19 call 4: the README test command on the session's final tree (small SENDs of at most
# 32 bytes on the fast path, WRITE/READ up to 128 bytes, receives posted per warp, drain()'s
# try_fast by opcode), then F (main at the session's start, built on the development machine)
# against R (this tree's gv_write_bw from the README run's build; .devcarry/N2 if it failed).
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
GV_SKIP_SANITIZERS=1 timeout 530 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "^==== |tests passed|tests failed|all tests passed|\(Failed\)|Timeout|Not Run|failed:|why they skipped" $OUT/run_tests-h200.log | tail -40 >> $S
grep -E "Receives|UpTo129" $OUT/run_tests-h200.log | grep "Test +#" >> $S
tail -c 30000 $OUT/run_tests-h200.log > $OUT/run_tests-tail.txt
rm -f $OUT/run_tests-h200.log
mkdir -p .devcarry/R
if [ -x build/tools/gv_write_bw ]; then cp build/tools/gv_write_bw .devcarry/R/; else cp .devcarry/N2/gv_write_bw .devcarry/R/; echo "R = N2" >> $S; fi
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 20 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2 3; do
  [ $(el) -lt 575 ] || break
  for t in F R; do
    d=.devcarry/$t
    run "$t r$r" $d/gv_write_bw --lat -s 8
    run "$t r$r" $d/gv_write_bw --lat -s 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64
    run "$t r$r" $d/gv_write_bw -s 64 -q 264 -t 512 -n 2048 --reps 3
    for s in 8 32 64 128 4096; do run "$t r$r" $d/gv_write_bw --op send -s $s -q 64 -t 256 -n 1024; done
    run "$t r$r" $d/gv_write_bw --op send -s 64 -q 64 -t 32 -n 1024
  done
done
echo "done at $(el) s" >> $S
