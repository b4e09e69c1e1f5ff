#!/bin/bash
# Session 14 call 2: B = ace5d3c (main at the session's start), L = 4adfbb1 (a drain's two
# rounds, region hints), S = L + SENDs planned ahead up to 16 KiB (wip). Bench tools only,
# three trees built in parallel, then B/L/S alternate.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv >> $S 2>&1
TG="gv_write_bw gv_send_bw gv_write_lat gv_probe_path gv_compute_send"
for t in B L S; do
  mkdir -p /tmp/$t && tar -xf .devcarry/$t.tar -C /tmp/$t
  ( cmake -S /tmp/$t -B /tmp/$t/build -DCMAKE_BUILD_TYPE=Release -DGV_BUILD_TESTS=OFF > /tmp/$t.cmake.log 2>&1 && cmake --build /tmp/$t/build -j6 --target $TG > $OUT/$t.build.log 2>&1; echo "$t build rc=$? at $(el) s" >> $S ) &
done
wait
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 25 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2 3; do
  [ $(el) -gt 470 ] && break
  for t in B L S; do d=/tmp/$t/build/tools
    run "$t r$r" $d/gv_write_lat -s 8
    run "$t r$r" $d/gv_write_bw -s 8 -q 1 -t 64
    run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64
    run "$t r$r" $d/gv_send_bw -s 4096 -q 64 -t 256 -n 2048 --reps 3
    run "$t r$r" $d/gv_send_bw -s 16384 -q 64 -t 256 -n 512 --reps 3
    run "$t r$r" $d/gv_send_bw -s 65536 -q 64 -t 256 -n 256 --reps 3
    run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3
    run "$t r$r" $d/gv_write_bw -s 65536 -q 264 -t 512 -n 62 --reps 3
    run "$t r$r" $d/gv_compute_send
    [ $r = 1 ] && run "$t r$r" $d/gv_probe_path
  done
  echo "ab round $r at $(el) s" >> $S
done
echo "done at $(el) s" >> $S
