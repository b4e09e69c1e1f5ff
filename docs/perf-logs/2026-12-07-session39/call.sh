#!/bin/bash
# Session 39's device call: builds main (M, this tree) and warp-run2 (W: this tree with
# docs/perf-logs/2026-12-07-session39/warp-run2.patch applied, in build-wsrc/) on the GPU machine
# itself (16 cores; the development machine needs 25-40 minutes for the same), puts their tools in
# .devcarry/m and .devcarry/w, then runs session 38's call.sh MODE (measure, quick, full, ncu).
# Where .devcarry/m.tar.xz and .devcarry/w.tar.xz are carried (built on the development machine),
# it builds nothing. Build trees stay in build-m/ and build-wsrc/b/ (ignored paths: a warm machine keeps them).
#   bash call.sh MODE [build-only]
set -u
MODE=${1:?usage: call.sh measure|quick|full|ncu [build-only]}
ROOT=$(pwd)
PATCH=$ROOT/docs/perf-logs/2026-12-07-session39/warp-run2.patch
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
if [ -f .devcarry/m.tar.xz ] && [ -f .devcarry/w.tar.xz ]; then  # built on the development machine
  exec bash docs/perf-logs/2026-12-07-session38/call.sh "$MODE"
fi
if [ ! -f build-wsrc/.patched ]; then
  rm -rf build-wsrc && mkdir build-wsrc
  tar cf - --exclude='./build*' --exclude=./.devcarry . | tar xf - -C build-wsrc
  (cd build-wsrc && GIT_CEILING_DIRECTORIES="$ROOT" git apply "$PATCH" && [ -f include/gpuverbs/detail/soft/warp_run.cuh ] && touch .patched) || { echo "patch failed"; exit 1; }
fi
cfg() { [ -f "$2/CMakeCache.txt" ] || cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > "$OUT/cfg-$(basename "$2").log" 2>&1; }
cfg . build-m & cfg build-wsrc build-wsrc/b & wait
cmake --build build-m -j6 --target gv_write_bw gv_probe_costs gv_probe_path > $OUT/build-m.log 2>&1 &
cmake --build build-wsrc/b -j10 --target gv_write_bw gv_read_bw gv_probe_costs gv_gpu_tests > $OUT/build-w.log 2>&1 &
wait
echo "build done in $(( $(date +%s) - t0 )) s"
tail -3 $OUT/build-m.log $OUT/build-w.log
mkdir -p .devcarry/m .devcarry/w
cp build-m/tools/gv_write_bw build-m/tools/gv_probe_costs build-m/tools/gv_probe_path .devcarry/m/ || exit 1
cp build-wsrc/b/tools/gv_write_bw build-wsrc/b/tools/gv_read_bw build-wsrc/b/tools/gv_probe_costs .devcarry/w/ || exit 1
cp "$(find build-wsrc/b -name gv_gpu_tests -type f | head -1)" .devcarry/w/ || exit 1
[ "${2:-}" = build-only ] && exit 0
bash docs/perf-logs/2026-12-07-session38/call.sh "$MODE"
