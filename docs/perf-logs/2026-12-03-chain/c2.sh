#!/bin/bash
# Session 13, call 2: three trees built here: B = main 6de20ee, S = the plan in shared memory
# (working tree), C = S with -DGV_EXP_CHAIN=1 (one barrier per chained WQE, per-thread fences).
# C's GPU tests on the plan-ahead, ordering and traffic suites; then B/S/C alternating.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
mkdir -p /tmp/B && tar -xf .devcarry/base.tar -C /tmp/B
mkdir -p /tmp/C && git ls-files -z | xargs -0 -I{} cp --parents {} /tmp/C/ 2>/dev/null
T="gv_write_bw gv_read_bw gv_send_bw"
( cmake -S /tmp/B -B /tmp/B/build -DCMAKE_BUILD_TYPE=Release -DGV_BUILD_TESTS=OFF > /tmp/B.cmake.log 2>&1 && cmake --build /tmp/B/build -j5 --target $T > $OUT/B.build.log 2>&1; echo "B build rc=$? at $(el) s" >> $S ) &
( cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /tmp/S.cmake.log 2>&1 && cmake --build build -j5 --target $T > $OUT/S.build.log 2>&1; echo "S build rc=$? at $(el) s" >> $S ) &
( cmake -S /tmp/C -B /tmp/C/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_FLAGS=-DGV_EXP_CHAIN=1 > /tmp/C.cmake.log 2>&1 && cmake --build /tmp/C/build -j8 --target $T gv_gpu_tests gv_gpu_traffic_tests > $OUT/C.build.log 2>&1; echo "C build rc=$? at $(el) s" >> $S ) &
wait
CT=/tmp/C/build/tests
if [ -x $CT/gv_gpu_tests ]; then
  timeout 90 $CT/gv_gpu_tests > $OUT/C-gpu-tests.log 2>&1; echo "C gv_gpu_tests rc=$? at $(el) s: $(grep -E '^\[  (PASSED|FAILED)' $OUT/C-gpu-tests.log | tr '\n' ' ')" >> $S
  grep -E '^\[  FAILED' $OUT/C-gpu-tests.log | head >> $S
  timeout 60 $CT/gv_gpu_traffic_tests > $OUT/C-traffic.log 2>&1; echo "C traffic rc=$? at $(el) s: $(grep -E '^\[  (PASSED|FAILED)' $OUT/C-traffic.log | tr '\n' ' ')" >> $S
  grep -E '^\[  FAILED' $OUT/C-traffic.log | head >> $S
  timeout 30 $CT/gv_gpu_tests --gtest_filter='GpuPlanAhead.*:*RcOrdering*:*Stress*' --gtest_repeat=3 > $OUT/C-loop.log 2>&1; echo "C loop rc=$? ok $(grep -c '^\[       OK \]' $OUT/C-loop.log) failed $(grep -cE 'FAILED  \] .*\([0-9]+ ms\)' $OUT/C-loop.log) at $(el) s" >> $S
fi
LOG=$OUT/ab.txt
run() { local l=$1; shift; echo "== $l: $*" >> $LOG; timeout 20 "$@" >> $LOG 2>&1 || echo "   (exit $?)" >> $LOG; }
for r in 1 2 3; do
  [ $(el) -gt 480 ] && break
  for t in B S C; do case $t in B) d=/tmp/B/build/tools;; S) d=build/tools;; C) d=/tmp/C/build/tools;; esac
    run "$t r$r" $d/gv_write_bw -s 65536 -q 264 -t 512 -n 62 --reps 3; done
  for t in B S C; do case $t in B) d=/tmp/B/build/tools;; S) d=build/tools;; C) d=/tmp/C/build/tools;; esac
    run "$t r$r" $d/gv_write_bw -s 4096 -q 264 -t 512 -n 992 --reps 3; done
  for t in B S C; do case $t in B) d=/tmp/B/build/tools;; S) d=build/tools;; C) d=/tmp/C/build/tools;; esac
    run "$t r$r" $d/gv_send_bw -s 4096 -q 64 -t 256 -n 2048 --reps 3; done
  for t in B S C; do case $t in B) d=/tmp/B/build/tools;; S) d=build/tools;; C) d=/tmp/C/build/tools;; esac
    run "$t r$r" $d/gv_read_bw -s 65536 -q 264 -t 512 -n 62 --reps 3; done
  [ $(el) -gt 500 ] && break
  for t in B S C; do case $t in B) d=/tmp/B/build/tools;; S) d=build/tools;; C) d=/tmp/C/build/tools;; esac
    run "$t r$r" $d/gv_write_bw -s 65536 -q 264 -t 256 -n 62 --reps 3; done
  for t in B S C; do case $t in B) d=/tmp/B/build/tools;; S) d=build/tools;; C) d=/tmp/C/build/tools;; esac
    run "$t r$r" $d/gv_write_bw -s 1048576 -q 264 -t 512 -n 32 --reps 3; done
  echo "ab round $r at $(el) s" >> $S
done
echo "done at $(el) s" >> $S
