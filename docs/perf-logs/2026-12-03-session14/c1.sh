#!/bin/bash
# Session 14 call 1: A/B of wip/send-plan-ahead (N) against main ace5d3c (B). Both trees from
# tars; only the bench tools are built, in parallel, then B/N alternate for 3 rounds.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv >> $S 2>&1
for t in B N; do mkdir -p /tmp/$t; done
tar -xf .devcarry/base-main.tar -C /tmp/B; tar -xf .devcarry/new-send.tar -C /tmp/N
T="gv_write_bw gv_read_bw gv_send_bw"
for t in B N; do
( cmake -S /tmp/$t -B /tmp/$t/build -DCMAKE_BUILD_TYPE=Release -DGV_BUILD_TESTS=OFF > /tmp/$t.cmake.log 2>&1 && cmake --build /tmp/$t/build -j8 --target $T > $OUT/$t.build.log 2>&1; echo "$t build rc=$? at $(el) s" >> $S ) &
done
wait
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 25 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2 3; do
  [ $(el) -gt 480 ] && break
  for t in B N; do d=/tmp/$t/build/tools
    run "$t r$r" $d/gv_send_bw -s 4096 -q 64 -t 256 -n 2048 --reps 3
    run "$t r$r" $d/gv_send_bw -s 65536 -q 64 -t 256 -n 256 --reps 3
    run "$t r$r" $d/gv_write_bw -s 65536 -q 264 -t 512 -n 62 --reps 3
    run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3
  done
  echo "ab round $r at $(el) s" >> $S
done
echo "done at $(el) s" >> $S
