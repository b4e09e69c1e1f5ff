#!/bin/bash
# Session 15 call 2: B = c900d5f (main at the session's start), N = this tree (commits ring
# without moving the send record, pollers without the CQ record, one load less to retire).
# Both trees' bench tools built here (Release, sm_90) while the GPU tests of N (carried, built on
# the development machine) run; then B/N alternate on the rows the change touches.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
git log --oneline -1 >> $S 2>&1
TOOLS="gv_write_bw gv_send_bw gv_write_lat gv_probe_path gv_compute_send"
mkdir -p /tmp/B && tar -xf .devcarry/B.tar -C /tmp/B
bld() { cmake -S $1 -B $1/build-ab -DCMAKE_BUILD_TYPE=Release -DGV_BUILD_TESTS=OFF > /tmp/$2.cmake.log 2>&1 && nice -n 10 cmake --build $1/build-ab -j8 --target $TOOLS > $OUT/$2.build.log 2>&1; echo "$2 build rc=$? at $(el) s" >> $S; }
bld /tmp/B B & bld $PWD N &
G=build-cuda/tests/gv_gpu_tests; T=build-cuda/tests/gv_gpu_traffic_tests
cnt() { echo "ok $(grep -c '^\[       OK \]' $1) failed $(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)' $1)"; }
timeout 240 $G > $OUT/gpu-tests.log 2>&1; echo "gv_gpu_tests rc=$? $(cnt $OUT/gpu-tests.log) at $(el) s" >> $S
wait
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 25 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2; do
  [ $(el) -gt 420 ] && break
  for t in B N; do [ $t = B ] && d=/tmp/B/build-ab/tools || d=build-ab/tools
    run "$t r$r" $d/gv_write_lat -s 8
    run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64
    run "$t r$r" $d/gv_write_bw --initiator cpu -s 8 -q 4 -t 64
    run "$t r$r" $d/gv_send_bw -s 4096 -q 64 -t 256 -n 2048 --reps 3
    run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3
    [ $r = 1 ] && run "$t r$r" $d/gv_probe_path
    [ $r = 1 ] && run "$t r$r" $d/gv_probe_path --batch 256
    [ $r = 1 ] && run "$t r$r" $d/gv_compute_send -s 8
  done
  echo "ab round $r at $(el) s" >> $S
done
if [ $(el) -lt 450 ]; then
  timeout $(( 570 - $(el) )) $T > $OUT/traffic-tests.log 2>&1; echo "gv_gpu_traffic_tests rc=$? $(cnt $OUT/traffic-tests.log) at $(el) s" >> $S
fi
grep -hE '^\[  FAILED  \]' $OUT/*.log | sort | uniq -c | head -20 >> $S
echo "done at $(el) s" >> $S
