#!/bin/bash
# Session 20 call 6: the README test command on the session's final tree (branch s20-final:
# publish_group and the default-handle fix, the SEND tests, fast_send_run keeping the peer's
# receive position), then, while time is left, 8-byte WRITE latency (gv_write_bw --lat) of
# M (main at b70dfaf) and F3 (this tree), both built on the development machine, 3 rounds.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
GV_SKIP_SANITIZERS=1 timeout 560 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "^==== |tests passed|tests failed|all tests passed|\(Failed\)|Timeout|Not Run|failed:|why they skipped" $OUT/run_tests-h200.log | tail -40 >> $S
grep -E "SendsComplete|LostReceive|DefaultConstructed" $OUT/run_tests-h200.log | grep "Test +#" >> $S
tail -c 30000 $OUT/run_tests-h200.log > $OUT/run_tests-tail.txt
rm -f $OUT/run_tests-h200.log
LOG=$OUT/lat.txt
for r in 1 2 3; do
  [ $(el) -lt 580 ] || break
  for t in M F3; do echo "== $t r$r" >> $LOG; timeout 10 .devcarry/$t/gv_write_bw --lat -s 8 >> $LOG 2>&1; done
done
echo "done at $(el) s" >> $S
