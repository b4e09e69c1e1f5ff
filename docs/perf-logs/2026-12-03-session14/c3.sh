#!/bin/bash
# Session 14 call 3: the README test command (sanitizer tree skipped, as on every H200 run) on
# the working tree X = main + region hints (L) + counting lock (K) + SEND plan-ahead <= 16 KiB;
# beside it, the bench tools of L (4adfbb1) built niced; then L/X alternate on the rows K and
# the SEND change touch.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
git log --oneline -1 >> $S 2>&1
mkdir -p /tmp/L && tar -xf .devcarry/L.tar -C /tmp/L
( cmake -S /tmp/L -B /tmp/L/build -DCMAKE_BUILD_TYPE=Release -DGV_BUILD_TESTS=OFF > /tmp/L.cmake.log 2>&1 && nice -n 15 cmake --build /tmp/L/build -j3 --target gv_write_bw gv_send_bw gv_write_lat gv_probe_path > $OUT/L.build.log 2>&1; echo "L build rc=$? at $(el) s" >> $S ) &
GV_SKIP_SANITIZERS=1 timeout 450 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "tests passed|tests failed|all tests passed|FAILED|\(Failed\)|Timeout|Not Run|^== |failed:" $OUT/run_tests-h200.log | tail -25 >> $S
wait
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 20 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2; do
  [ $(el) -gt 520 ] && break
  for t in L X; do [ $t = L ] && d=/tmp/L/build/tools || d=build/tools
    run "$t r$r" $d/gv_write_lat -s 8
    run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64
    run "$t r$r" $d/gv_send_bw -s 4096 -q 64 -t 256 -n 2048 --reps 3
    run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3
    run "$t r$r" $d/gv_write_bw -s 65536 -q 264 -t 512 -n 62 --reps 3
    [ $r = 1 ] && run "$t r$r" $d/gv_probe_path
  done
  echo "ab round $r at $(el) s" >> $S
done
echo "done at $(el) s" >> $S
