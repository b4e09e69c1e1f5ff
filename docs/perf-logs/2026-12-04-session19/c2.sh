#!/bin/bash
# Session 19 call 2: the README test command on the session's tree (send-fast + fast path up to 128
# bytes + receives posted per warp), then F (main at the session's start, built on the development
# machine) against N (this tree's gv_write_bw: the README run's build, or .devcarry/N when that
# build failed), 3 rounds alternating.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
git status --short | head -5 >> $S
GV_SKIP_SANITIZERS=1 timeout 500 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "^==== |tests passed|tests failed|all tests passed|\(Failed\)|Timeout|Not Run|failed:|why they skipped" $OUT/run_tests-h200.log | tail -40 >> $S
grep -E "Receives|UpTo129" $OUT/run_tests-h200.log | grep "Test +#" >> $S
tail -c 30000 $OUT/run_tests-h200.log > $OUT/run_tests-tail.txt
rm -f $OUT/run_tests-h200.log
mkdir -p .devcarry/R
[ -x build/tools/gv_write_bw ] && cp build/tools/gv_write_bw .devcarry/R/ || cp .devcarry/N/gv_write_bw .devcarry/R/
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 30 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2 3; do
  [ $(el) -lt 570 ] || break
  for t in F R; do
    d=.devcarry/$t
    run "$t r$r" $d/gv_write_bw --lat -s 8
    run "$t r$r" $d/gv_write_bw --lat -s 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64
    run "$t r$r" $d/gv_write_bw -s 64 -q 264 -t 512 -n 2048 --reps 3
    run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3
    run "$t r$r" $d/gv_write_bw --op send -s 8 -q 1 -t 64 -n 1024
    run "$t r$r" $d/gv_write_bw --op send -s 8 -q 64 -t 256 -n 1024
    run "$t r$r" $d/gv_write_bw --op send -s 64 -q 64 -t 256 -n 1024
    run "$t r$r" $d/gv_write_bw --op send -s 4096 -q 64 -t 256 -n 1024
    run "$t r$r" $d/gv_write_bw --op send -s 65536 -q 64 -t 256 -n 256
  done
done
echo "done at $(el) s" >> $S
