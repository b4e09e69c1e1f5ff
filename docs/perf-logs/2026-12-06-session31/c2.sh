#!/bin/bash
# Second call: the direct path with its lock's acquire as a relaxed RMW and a one-way acquire
# fence, and a small WRITE's source loaded beside the RMW (branch direct-spec). Builds, carried:
# .devcarry/B (main 9dc022d), .devcarry/E1 (direct-spec), .devcarry/E1b (direct-spec with
# -DGV_DIRECT_PRELOAD=0: the fence change alone); gv_write_lat and gv_compute_send each, built on
# the development machine (nvcc 13.0, Release, sm_90).
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
D=docs/perf-logs/2026-12-06-session31
timeout 300 bench/compare.sh --out $OUT/cmp --reps 5 --cases $D/c2-cases.txt \
  B=.devcarry/B E1=.devcarry/E1 E1b=.devcarry/E1b >> $S 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
for r in 1 2 3; do
  for b in B E1 E1b; do
    timeout 60 .devcarry/$b/gv_compute_send -n 1000 -s 8 --json | sed "s/^{/{\"build\":\"$b\",\"round\":$r,/" >> $OUT/compute_send.jsonl
  done
done
echo "compute_send done at ${SECONDS} s" >> $S
python3 - $OUT/compute_send.jsonl >> $S <<'PY'
import json, sys, statistics
d = {}
for l in open(sys.argv[1]):
    r = json.loads(l); d.setdefault(r["build"], []).append((r["gpu_us"], r["cpu_us"]))
for b, v in d.items():
    print(f"compute_send 8 B {b}: gpu_us median {statistics.median(x[0] for x in v):.3f} {[x[0] for x in v]}, cpu_us {[x[1] for x in v]}")
PY
rm -f $OUT/cmp/compare.log
# Then the tree's own GPU property tests (the new CommitFlagWriteCarriesTheSourceStoredJustBefore
# among them), built here into build/ as the README's test command configures it (a later call's
# README test reuses it).
left=$(( 590 - SECONDS ))
(cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && timeout $(( left - 40 )) cmake --build build -j16 --target gv_gpu_tests) > $OUT/build.log 2>&1
echo "build exit $? at ${SECONDS} s" >> $S
left=$(( 590 - SECONDS ))
(( left > 10 )) && timeout $left build/tests/gv_gpu_tests --gtest_filter='GpuProperties.*' > $OUT/gpu_properties.log 2>&1
echo "GpuProperties exit $? at ${SECONDS} s" >> $S
grep -E "^\[  (PASSED|FAILED) |^\[       OK|^\[  FAILED" $OUT/gpu_properties.log >> $S
gzip $OUT/build.log
cat $S
