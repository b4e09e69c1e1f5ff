#!/bin/bash
# Session 11, call 2: README test command on main with the batched poll_cq re-landed (e765109),
# A/B against 5e7ab55 (main before it, built from a git archive in this call), and the 64 KiB
# WRITE's shape: the same 135168 threads as 264 QPs x 512, split into more or fewer blocks.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
git log --oneline -1 >> $S 2>/dev/null
mkdir -p /tmp/base && tar -xf .devcarry/base.tar -C /tmp/base
( cmake -S /tmp/base -B /tmp/base/build -DCMAKE_BUILD_TYPE=Release > /tmp/base/cmake.log 2>&1 && \
  cmake --build /tmp/base/build -j4 --target gv_write_bw gv_write_lat gv_send_bw gv_probe_path > /tmp/base/build.log 2>&1; echo "base build rc=$? at $(el) s" >> $S ) &
GV_SKIP_SANITIZERS=1 timeout 450 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "tests passed|tests failed|all tests passed|FAILED|Failed" $OUT/run_tests-h200.log | tail -12 >> $S
wait
N=build/tools; B=/tmp/base/build/tools
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 40 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2; do
  [ $(el) -gt 500 ] && break
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_send_bw -s 8 -q 66 -t 64 -n 4096 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_send_bw -s 4096 -q 64 -t 256 -n 2048 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64 -n 4096 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 64 -n 4096 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_lat -s 8; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw --initiator cpu -s 8 -q 4 -t 64 -n 4096 --reps 3; done
  run "B r$r" $B/gv_probe_path
  run "N r$r" $N/gv_probe_path
  echo "ab round $r at $(el) s" >> $S
done
L2=$OUT/shape.txt
shp() { echo "== $*" >> $L2; timeout 40 "$@" >> $L2 2>&1 || echo "   (exit $?)" >> $L2; }
for r in 1 2; do
  [ $(el) -gt 560 ] && break
  shp $N/gv_write_bw -s 65536 -q 264 -t 512 -n 62 --reps 3
  shp $N/gv_write_bw -s 65536 -q 528 -t 256 -n 62 --reps 3
  shp $N/gv_write_bw -s 65536 -q 1056 -t 128 -n 62 --reps 3
  shp $N/gv_write_bw -s 65536 -q 264 -t 512 -n 248 --reps 3
  shp $N/gv_write_bw -s 65536 -q 264 -t 256 -n 62 --reps 3
  shp $N/gv_write_bw -s 65536 -q 264 -t 128 -n 62 --reps 3
  echo "shape round $r at $(el) s" >> $S
done
echo "done at $(el) s" >> $S
