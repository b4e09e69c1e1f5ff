#!/bin/bash
set -u
OUTD=$OUT
T0=$(date +%s)
GV_SKIP_SANITIZERS=1 timeout 470 scripts/run_tests.sh > $OUTD/run_tests-h200.log 2>&1; echo "run_tests rc=$? $(( $(date +%s) - T0 )) s" | tee $OUTD/summary.txt
tail -30 $OUTD/run_tests-h200.log >> $OUTD/summary.txt
N=build/tools
run() { echo "== $*" >> $OUTD/bench.txt; timeout 40 "$@" >> $OUTD/bench.txt 2>&1 || echo "  (exit $?)" >> $OUTD/bench.txt; }
run $N/gv_write_bw --initiator cpu -s 8 -q 4 -t 64 -n 4096 --reps 3
run $N/gv_write_bw --initiator cpu -s 8 -q 16 -t 64 -n 4096 --reps 3
run $N/gv_write_lat -s 8
run $N/gv_write_bw -s 4096 -q 264 -t 512 -n 2048 --reps 3
run $N/gv_write_bw --initiator cpu -s 8 -q 4 -t 64 -n 4096 --reps 3
echo "all done $(( $(date +%s) - T0 )) s" >> $OUTD/summary.txt
