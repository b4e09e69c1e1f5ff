#!/bin/bash
# Session 15 call 1: the README test command on main (c900d5f), then, with what time is left,
# the probe and the small-message rows of the same build as this session's baseline.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
git log --oneline -1 >> $S 2>&1
nvidia-smi --query-gpu=name,clocks.sm,driver_version --format=csv >> $S 2>&1
GV_SKIP_SANITIZERS=1 timeout 500 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "tests passed|tests failed|all tests passed|FAILED|\(Failed\)|Timeout|Not Run|^== |failed:" $OUT/run_tests-h200.log | tail -30 >> $S
tail -c 20000 $OUT/run_tests-h200.log > $OUT/run_tests-tail.txt
LOG=$OUT/base.txt
run() { echo "== $*" >> $LOG; timeout 20 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
d=build/tools
if [ -x $d/gv_probe_path ] && [ $(el) -lt 540 ]; then
  run $d/gv_probe_path
  run $d/gv_write_lat -s 8
  run $d/gv_write_bw -s 8 -q 1 -t 64
  run $d/gv_compute_send
fi
echo "done at $(el) s" >> $S
