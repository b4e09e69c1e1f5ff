#!/bin/bash
# Session 41's device calls. The tree is branch warp-chunk (main + runs handed to the warp only up
# to kFastChunk bytes per WQE).
#   bash call.sh test   the README's test command (GV_SKIP_SANITIZERS=1: the sanitizer tree is CI's),
#                       then the README's first command (scripts/run_demo.sh: gv_demo's GPU main job)
#   bash call.sh measure  the tree is B (branch lane-chunks: lane i stores WQE i's bytes, chunks of 32);
#                       A (lane-store: the lane stores alone) and M (main) built beside it from
#                       B-to-A.diff and B-to-M.diff; B's warp-run and ordering GPU tests; then
#                       bench/compare.sh of M, A and B, two interleaved rounds
#   bash call.sh ncu    (next call, machine warm) Nsight Compute on build/'s gv_write_bw, the one-QP
#                       8-byte case: SASS samples (.csv.xz), read by ../2026-12-07-session39/ncu_sass.py
set -u
MODE=${1:?usage: call.sh test|measure|ncu}
ROOT=$(pwd)
D=$ROOT/docs/perf-logs/2026-12-07-session41
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
src() {  # NAME PATCH: a copy of this tree with PATCH applied
  rm -rf build-$1src && mkdir build-$1src
  tar cf - --exclude='./build*' --exclude=./.devcarry . | tar xf - -C build-$1src
  (cd build-$1src && GIT_CEILING_DIRECTORIES="$ROOT" git apply "$2") || { echo "patch $2 failed for $1"; return 1; }
}
tools() {  # NAME TARGETS...: configure and build in build-NAMEsrc/b
  local n=$1; shift
  cmake -S build-${n}src -B build-${n}src/b -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > $OUT/cfg-$n.log 2>&1
  cmake --build build-${n}src/b -j8 --target "$@" > $OUT/build-$n.log 2>&1
  echo "$n tools: rc $? after $(( $(date +%s) - t0 )) s"
}
if [ "$MODE" = measure ]; then
  scripts/setup.sh > $OUT/setup.log 2>&1; echo "setup rc $?"
  src m $D/B-to-M.diff || exit 1
  src a $D/B-to-A.diff || exit 1
  ( cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > $OUT/cfg-b.log 2>&1
    cmake --build build -j10 --target gv_write_bw gv_read_bw gv_gpu_tests > $OUT/build-b.log 2>&1; echo "b: rc $? after $(( $(date +%s) - t0 )) s" ) &
  tools m gv_write_bw gv_read_bw &
  tools a gv_write_bw gv_read_bw &
  wait
  timeout 120 build/tests/gv_gpu_tests --gtest_filter='GpuWarpRun.*:GpuProperties.RcOrdering*:GpuPlanAhead.*:GpuDataPath.ManyBlocks*' > $OUT/b-tests.txt 2>&1
  echo "b tests rc $?"; grep -E "PASSED|FAILED|tests ran" $OUT/b-tests.txt | tail -8
  mkdir -p .devcarry/m .devcarry/a .devcarry/b
  cp build-msrc/b/tools/gv_write_bw build-msrc/b/tools/gv_read_bw .devcarry/m/ || exit 1
  cp build-asrc/b/tools/gv_write_bw build-asrc/b/tools/gv_read_bw .devcarry/a/ || exit 1
  cp build/tools/gv_write_bw build/tools/gv_read_bw .devcarry/b/ || exit 1
  cat > /tmp/cases.txt <<'C'
gv_write_bw -s 8 -q 1 -t 64 -n 4096 --reps 3
gv_write_bw -s 32 -q 1 -t 256 -n 4096 --reps 3
gv_read_bw -s 8 -q 1 -t 64 -n 4096 --reps 3
gv_write_bw -s 8 -q 66 -t 64 -n 4096 --reps 3
gv_write_bw -s 8 -q 264 -t 64 -n 4096 --reps 3
gv_write_bw -s 8 -q 264 -t 512 -n 8192 --reps 3
gv_write_bw -s 64 -q 264 -t 512 -n 8192 --reps 3
gv_write_bw -s 4096 -q 264 -t 512 -n 64 --reps 3
C
  timeout $(( 590 - ($(date +%s) - t0) )) bash bench/compare.sh --out $OUT/cmp --reps 2 --cases /tmp/cases.txt M=.devcarry/m A=.devcarry/a B=.devcarry/b 2>&1 | tail -12
  (cd $OUT/cmp && tar cJf ../cmp.tar.xz . ) && rm -rf $OUT/cmp
  echo "compare done after $(( $(date +%s) - t0 )) s"
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
