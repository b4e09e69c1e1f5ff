#!/bin/bash
set -u
OUTD=$OUT
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
GV_SKIP_SANITIZERS=1 timeout 380 scripts/run_tests.sh > $OUTD/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $OUTD/summary.txt
grep -E "tests passed|tests failed|all tests passed|FAILED|\*\*\*Failed" $OUTD/run_tests-h200.log | tail -12 >> $OUTD/summary.txt
N=build/tools; LOG=$OUTD/bench.txt
run() { echo "== $*" >> $LOG; timeout 30 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
if [ $(el) -lt 370 ]; then
run $N/gv_send_bw -s 8 -q 66 -t 64 -n 4096 --reps 3
run $N/gv_send_bw -s 4096 -q 64 -t 256 -n 2048 --reps 3
run $N/gv_write_lat -s 8
run $N/gv_send_bw -s 8 -q 66 -t 64 -n 4096 --reps 3
run $N/gv_write_bw -s 8 -q 66 -t 64 -n 4096 --reps 3
fi
echo "done at $(el) s" >> $OUTD/summary.txt
