#!/bin/bash
# README test command + A/B (b48 = 48c1ee3 vs new) + suite, one call.
set -u
OUTD=$OUT
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /tmp/b48 && tar -xf .devcarry/base48.tar -C /tmp/b48
( cmake -S /tmp/b48 -B /tmp/b48/build -DCMAKE_BUILD_TYPE=Release > /tmp/b48/cmake.log 2>&1 && \
  cmake --build /tmp/b48/build -j4 --target gv_write_bw gv_write_lat gv_send_bw gv_probe_path > /tmp/b48/build.log 2>&1; echo "b48 build rc=$? at $(el) s" >> $OUTD/summary.txt ) &
GV_SKIP_SANITIZERS=1 timeout 450 scripts/run_tests.sh > $OUTD/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $OUTD/summary.txt
grep -E "tests passed|tests failed|all tests passed|FAILED|Failed" $OUTD/run_tests-h200.log | tail -12 >> $OUTD/summary.txt
wait
N=build/tools; B=/tmp/b48/build/tools
LOG=$OUTD/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 40 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2; do
  [ $(el) -gt 470 ] && break
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_send_bw -s 8 -q 66 -t 64 -n 4096 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_send_bw -s 4096 -q 64 -t 256 -n 2048 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_lat -s 8; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 64 -n 4096 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 2048 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw --initiator cpu -s 8 -q 4 -t 64 -n 4096 --reps 3; done
  run "b48 r$r" $B/gv_probe_path
  run "new r$r" $N/gv_probe_path
  echo "ab round $r at $(el) s" >> $OUTD/summary.txt
done
if [ $(el) -lt 480 ]; then
  timeout $(( 585 - $(el) )) bench/run_suite.sh --two-process build/tools /tmp/suite > $OUTD/suite.log 2>&1; echo "suite rc=$? at $(el) s" >> $OUTD/summary.txt
  cp /tmp/suite/results*.jsonl $OUTD/ 2>/dev/null
fi
echo "done at $(el) s" >> $OUTD/summary.txt
