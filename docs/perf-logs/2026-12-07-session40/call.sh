#!/bin/bash
# Session 40's device calls. The tree is A: main + bench-aligned (messages at multiples of their
# size). M (main: A with to-main.diff applied) and WA (A + ../2026-12-07-session39/warp-run2.patch)
# are built beside it in build-msrc/ and build-wasrc/ (their tools only).
#   bash call.sh test     the README's test command on A (GV_SKIP_SANITIZERS=1: the sanitizer tree
#                         is CI's), M's and WA's tools built meanwhile at low priority
#   bash call.sh measure  WA's gv_probe_costs (its two-warp row), bench/compare.sh of M, A and WA
#                         (two interleaved rounds), then A's suite with --two-process
#   bash call.sh chunk    the tree is branch warp-chunk (C); main (chunk-to-main.diff applied) is
#                         built beside it at low priority while the README's test command runs on
#                         C; then bench/compare.sh of main and C, the cases runs of 8-64 B touch
#                         (as run in session 40: the test command ran past the 500 s limit)
#   bash call.sh chunk-test     the same in two calls: the README's test command on C alone
#   bash call.sh chunk-measure  (the next call, machine still warm) main's tools, then the compare
#   bash call.sh ncu      Nsight Compute on this tree's gv_write_bw (build/, built if missing): the
#                         one-QP 8-byte case, the SASS source page with counts and stall samples
#                         (.csv.xz), read by ../2026-12-07-session39/ncu_sass.py (top 40 and the
#                         instructions executed about once per WQE or more)
set -u
MODE=${1:?usage: call.sh test|measure|chunk|chunk-test|chunk-measure|ncu}
ROOT=$(pwd)
D=$ROOT/docs/perf-logs/2026-12-07-session40
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv | tee $OUT/gpu.txt
src() {  # NAME PATCH CHECK: a copy of this tree with PATCH applied; CHECK must hold afterwards
  [ -f build-$1src/.patched ] && return 0
  rm -rf build-$1src && mkdir build-$1src
  tar cf - --exclude='./build*' --exclude=./.devcarry . | tar xf - -C build-$1src
  (cd build-$1src && GIT_CEILING_DIRECTORIES="$ROOT" git apply "$2" && eval "$3" && touch .patched) ||
    { echo "patch $2 failed for $1"; return 1; }
}
tools() {  # NAME TARGETS...: configure and build in build-NAMEsrc/b at low priority
  local n=$1; shift
  [ -f build-${n}src/b/CMakeCache.txt ] ||
    cmake -S build-${n}src -B build-${n}src/b -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > $OUT/cfg-$n.log 2>&1
  nice -n 19 cmake --build build-${n}src/b -j8 --target "$@" > $OUT/build-$n.log 2>&1
  echo "$n tools: rc $? after $(( $(date +%s) - t0 )) s"
}
if [ "$MODE" = test ]; then
  src m "$D/to-main.diff" '[ ! -f tools/msg_offset.hpp ]' || exit 1
  src wa "$ROOT/docs/perf-logs/2026-12-07-session39/warp-run2.patch" '[ -f include/gpuverbs/detail/soft/warp_run.cuh ]' || exit 1
  ( tools m gv_write_bw gv_probe_path & tools wa gv_write_bw gv_probe_costs & wait ) &
  bp=$!
  GV_SKIP_SANITIZERS=1 timeout 500 scripts/run_tests.sh > $OUT/run_tests.log 2>&1; echo "run_tests rc $? after $(( $(date +%s) - t0 )) s"
  grep -E "tests passed|tests failed|Total Test time|FAILED|\*\*\*|^== " $OUT/run_tests.log | tail -40
  wait $bp
  exit 0
fi
if [ "$MODE" = ncu ]; then
  NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  echo "ncu: $NCU"
  [ -x build/tools/gv_write_bw ] || { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > $OUT/cfg-ncu.log 2>&1;
    cmake --build build -j16 --target gv_write_bw > $OUT/build-ncu.log 2>&1; }
  timeout 300 $NCU --clock-control none --set full --import-source no -k regex:bw_kernel -c 1 -f -o /tmp/bw1q \
    build/tools/gv_write_bw -s 8 -q 1 -t 64 -n 2048 > $OUT/ncu-run.txt 2>&1; echo "ncu rc $?"
  $NCU -i /tmp/bw1q.ncu-rep --page source --csv --print-source sass > /tmp/bw1q-sass.csv 2>&1
  xz -c /tmp/bw1q-sass.csv > $OUT/ncu-bw1q-sass.csv.xz
  R=docs/perf-logs/2026-12-07-session39/ncu_sass.py
  python3 $R /tmp/bw1q-sass.csv 2048 top 40 > $OUT/ncu-top.txt 2>&1
  python3 $R /tmp/bw1q-sass.csv 2048 range 1900 100000 > $OUT/ncu-loop.txt 2>&1
  head -45 $OUT/ncu-top.txt
  exit 0
fi
if [ "$MODE" = chunk-test ]; then
  GV_SKIP_SANITIZERS=1 timeout 580 scripts/run_tests.sh > $OUT/run_tests-C.log 2>&1; echo "run_tests rc $? after $(( $(date +%s) - t0 )) s"
  grep -E "tests passed|tests failed|Total Test time|FAILED|\*\*\*Failed|all tests" $OUT/run_tests-C.log | tail -20
  exit 0
fi
if [ "$MODE" = chunk ] || [ "$MODE" = chunk-measure ]; then
  src main "$D/chunk-to-main.diff" '! grep -q "sh_len <= kFastChunk" include/gpuverbs/detail/soft/fast.cuh' || exit 1
  if [ "$MODE" = chunk ]; then
    ( tools main gv_write_bw gv_read_bw ) &
    bp=$!
    GV_SKIP_SANITIZERS=1 timeout 500 scripts/run_tests.sh > $OUT/run_tests-C.log 2>&1; echo "run_tests rc $? after $(( $(date +%s) - t0 )) s"
    grep -E "tests passed|tests failed|Total Test time|FAILED|\*\*\*Failed|all tests" $OUT/run_tests-C.log | tail -20
    wait $bp
  else
    tools main gv_write_bw gv_read_bw
    [ -x build/tools/gv_write_bw ] || cmake --build build -j16 --target gv_write_bw gv_read_bw > $OUT/build-c.log 2>&1
  fi
  mkdir -p .devcarry/main .devcarry/c
  cp build-mainsrc/b/tools/gv_write_bw build-mainsrc/b/tools/gv_read_bw .devcarry/main/ || exit 1
  cp build/tools/gv_write_bw build/tools/gv_read_bw .devcarry/c/ || exit 1
  cat > /tmp/cases.txt <<'C'
gv_write_bw -s 64 -q 264 -t 512 -n 8192 --reps 3
gv_write_bw -s 8 -q 264 -t 512 -n 8192 --reps 3
gv_write_bw -s 64 -q 1 -t 64 -n 4096 --reps 3
gv_write_bw -s 128 -q 66 -t 64 -n 4096 --reps 3
gv_write_bw -s 8 -q 1 -t 64 -n 4096 --reps 3
gv_write_bw -s 32 -q 66 -t 64 -n 4096 --reps 3
gv_read_bw -s 64 -q 264 -t 512 -n 8192 --reps 3
C
  timeout $(( 590 - ($(date +%s) - t0) )) bash bench/compare.sh --out $OUT/cmp-chunk --reps 2 --cases /tmp/cases.txt main=.devcarry/main C=.devcarry/c 2>&1 | tail -10 | tee $OUT/cmp-chunk.txt
  echo "compare done after $(( $(date +%s) - t0 )) s"
  exit 0
fi
mkdir -p .devcarry/m .devcarry/a .devcarry/wa
cp build-msrc/b/tools/gv_write_bw build-msrc/b/tools/gv_probe_path .devcarry/m/ || exit 1
cp build/tools/gv_write_bw .devcarry/a/ || exit 1
cp build-wasrc/b/tools/gv_write_bw build-wasrc/b/tools/gv_probe_costs .devcarry/wa/ || exit 1
timeout 60 .devcarry/wa/gv_probe_costs 2>&1 | tee $OUT/probe-costs-wa.txt
cat > /tmp/cases.txt <<'C'
gv_write_bw --lat -s 8 -n 10000
gv_write_bw -s 8 -q 1 -t 64 -n 4096 --reps 3
gv_write_bw -s 32 -q 1 -t 256 -n 4096 --reps 3
gv_write_bw -s 8 -q 66 -t 64 -n 4096 --reps 3
gv_write_bw -s 8 -q 264 -t 64 -n 4096 --reps 3
gv_write_bw -s 4096 -q 264 -t 512 -n 64 --reps 3
C
timeout 330 bash bench/compare.sh --out $OUT/cmp --reps 2 --cases /tmp/cases.txt M=.devcarry/m A=.devcarry/a WA=.devcarry/wa 2>&1 | tail -14 | tee $OUT/cmp.txt
echo "compare done after $(( $(date +%s) - t0 )) s"
timeout $(( 580 - ($(date +%s) - t0) )) bench/run_suite.sh --two-process build/tools $OUT/suite > $OUT/suite-run.log 2>&1; echo "suite rc $? after $(( $(date +%s) - t0 )) s"
tail -5 $OUT/suite-run.log
