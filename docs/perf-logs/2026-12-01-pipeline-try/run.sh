#!/bin/bash
# The executor pipeline (branch pipeline, built on the dev machine): its GPU test binaries, then
# gv_write_bw against main's (also built there), alternating.
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
P=.devcarry/pipe
for b in gv_gpu_tests gv_gpu_traffic_tests; do
  timeout 150 $P/$b > $OUT/$b.log 2>&1; rc=$?
  echo "$b rc=$rc: $(grep -E '^\[  (PASSED|FAILED) \]' $OUT/$b.log | tr '\n' ' ')"
  grep -E "^\[  FAILED  \]" $OUT/$b.log | head -10
  el "$b"
done
for c in "-s 65536 -q 264 -t 512 -n 64" "-s 1048576 -q 264 -t 512 -n 32" "-s 4096 -q 264 -t 512 -n 256" "-s 8 -q 1 -t 64 -n 4096"; do
  for r in 1 2; do for side in main pipe; do
    timeout 60 $P/../bin/gv_write_bw_$side $c --json 2>/dev/null | grep '^{' | sed "s/^{/{\"side\":\"$side\",/" >> $OUT/bw.jsonl
  done; done
done
cut -c1-260 $OUT/bw.jsonl
el "done"
