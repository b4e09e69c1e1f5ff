#!/bin/bash
# Session 12, call 1: plan-ahead drain (working tree) against main 49dadc8 (base.tar):
# GPU tests of the new tree, then A/B on the large-WQE rows; a third build with the threshold at 128.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
mkdir -p /tmp/base && tar -xf .devcarry/base.tar -C /tmp/base
( cmake -S /tmp/base -B /tmp/base/build -DCMAKE_BUILD_TYPE=Release > /tmp/base/cmake.log 2>&1 && \
  cmake --build /tmp/base/build -j5 --target gv_write_bw gv_read_bw > /tmp/base/build.log 2>&1; echo "base build rc=$? at $(el) s" >> $S ) &
( mkdir -p /tmp/n128 && cp -r include src tools cmake CMakeLists.txt samples examples tests bench scripts docs README.md /tmp/n128/ 2>/dev/null; \
  cmake -S /tmp/n128 -B /tmp/n128/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_FLAGS=-DGV_PLAN_AHEAD_THREADS=128 > /tmp/n128.cmake.log 2>&1 && \
  cmake --build /tmp/n128/build -j3 --target gv_write_bw > /tmp/n128.build.log 2>&1; echo "n128 build rc=$? at $(el) s" >> $S ) &
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > $OUT/cmake.log 2>&1
cmake --build build -j8 --target gv_gpu_tests gv_write_bw gv_read_bw > $OUT/build.log 2>&1; echo "new build rc=$? at $(el) s" >> $S
tail -5 $OUT/build.log >> $S
G=build/tests/gv_gpu_tests
timeout 60 $G --gtest_filter="GpuPlanAhead.*" > $OUT/plan_ahead.log 2>&1; echo "plan-ahead tests rc=$? at $(el) s" >> $S; grep -E "OK \]|FAILED|Failure|gpu \]" $OUT/plan_ahead.log | head -20 >> $S
timeout 200 $G > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc=$? at $(el) s" >> $S
grep -E "PASSED|FAILED|tests ran" $OUT/gpu_tests.log | tail -15 >> $S
wait
N=build/tools; B=/tmp/base/build/tools; M=/tmp/n128/build/tools
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 30 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2; do
  [ $(el) -gt 500 ] && break
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 65536 -q 264 -t 512 -n 62 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 1048576 -q 264 -t 512 -n 32 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_read_bw -s 65536 -q 264 -t 512 -n 62 --reps 3; done
  for t in B N M; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 65536 -q 264 -t 256 -n 62 --reps 3; done
  for t in B N M; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 65536 -q 264 -t 128 -n 62 --reps 3; done
  for t in B N; do eval d=\$$t; run "$t r$r" $d/gv_write_bw -s 8 -q 66 -t 64 --reps 3; done
  echo "ab round $r at $(el) s" >> $S
done
echo "done at $(el) s" >> $S
