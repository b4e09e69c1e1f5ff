#!/bin/bash
# Session 41's device calls. The tree is branch warp-chunk (main + runs handed to the warp only up
# to kFastChunk bytes per WQE).
#   bash call.sh test   the README's test command (GV_SKIP_SANITIZERS=1: the sanitizer tree is CI's),
#                       then the README's first command (scripts/run_demo.sh: gv_demo's GPU main job)
#   bash call.sh ncu    (next call, machine warm) Nsight Compute on build/'s gv_write_bw, the one-QP
#                       8-byte case: SASS samples (.csv.xz), read by ../2026-12-07-session39/ncu_sass.py
set -u
MODE=${1:?usage: call.sh test|ncu}
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv | tee $OUT/gpu.txt
if [ "$MODE" = test ]; then
  git log --oneline -1 > $OUT/tree.txt 2>&1
  GV_SKIP_SANITIZERS=1 timeout 530 scripts/run_tests.sh > $OUT/run_tests.log 2>&1; echo "run_tests rc $? after $(( $(date +%s) - t0 )) s"
  grep -E "tests passed|tests failed|Total Test time|FAILED|\*\*\*Failed|all tests|^== " $OUT/run_tests.log | tail -30
  timeout $(( 590 - ($(date +%s) - t0) )) scripts/run_demo.sh > $OUT/run_demo.log 2>&1; echo "run_demo rc $? after $(( $(date +%s) - t0 )) s"
  tail -25 $OUT/run_demo.log
  xz -k $OUT/run_tests.log
  exit 0
fi
if [ "$MODE" = ncu ]; then
  NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  echo "ncu: $NCU"
  [ -x build/tools/gv_write_bw ] || cmake --build build -j16 --target gv_write_bw > $OUT/build-ncu.log 2>&1
  timeout 300 $NCU --clock-control none --set full --import-source no -k regex:bw_kernel -c 1 -f -o /tmp/bw1q \
    build/tools/gv_write_bw -s 8 -q 1 -t 64 -n 2048 > $OUT/ncu-run.txt 2>&1; echo "ncu rc $?"
  $NCU -i /tmp/bw1q.ncu-rep --page source --csv --print-source sass > /tmp/bw1q-sass.csv 2>&1
  xz -c /tmp/bw1q-sass.csv > $OUT/ncu-bw1q-sass.csv.xz
  R=docs/perf-logs/2026-12-07-session39/ncu_sass.py
  python3 $R /tmp/bw1q-sass.csv 2048 top 60 > $OUT/ncu-top.txt 2>&1
  python3 $R /tmp/bw1q-sass.csv 2048 range 1900 100000 > $OUT/ncu-loop.txt 2>&1
  head -50 $OUT/ncu-top.txt
  timeout 60 build/tools/gv_probe_costs > $OUT/probe-costs.txt 2>&1
  timeout 60 build/tools/gv_probe_path > $OUT/probe-path.txt 2>&1
  echo "done after $(( $(date +%s) - t0 )) s"
  exit 0
fi
