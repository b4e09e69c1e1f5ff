#!/bin/bash
# Session 10, call 2: which stage-load mode loses the CpuDoorbells race (GV_DBG_STAGE_MODE).
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > $OUT/cmake.log 2>&1
cmake --build build -j16 --target gv_gpu_tests > $OUT/build.log 2>&1; echo "build rc=$? at $(el) s" >> $S
G=build/tests/gv_gpu_tests
cnt() { echo "fails $(grep -cE 'FAILED  \] .*\([0-9]+ ms\)' $1) ok $(grep -cE '^\[       OK \]' $1)"; }
for r in 1 2; do
  for m in 0 1 2 3 4; do
    GV_DBG_STAGE_MODE=$m timeout 40 $G --gtest_filter='CpuDoorbells.ThreadsOnTheirOwnQpsLoseNothing' --gtest_repeat=100 > $OUT/r${r}m$m.log 2>&1
    echo "round $r mode $m rc=$? $(cnt $OUT/r${r}m$m.log) at $(el) s" >> $S
  done
done
L=$(find build -name 'libgpuverbs*.so*' -type f | head -1); [ -z "$L" ] && L=$(find build -name 'libgpuverbs*.a' | head -1)
echo "lib $L" >> $S
cuobjdump -sass $L > $OUT/all.sass 2>&1
python3 - "$OUT/all.sass" > $OUT/board.sass <<'PY'
import sys,re
t=open(sys.argv[1]).read().split('\n')
on=False
for l in t:
    if 'Function :' in l: on = 'board_kernel' in l
    if on: print(l)
PY
gzip -f $OUT/all.sass
grep -c . $OUT/board.sass >> $S
for m in 0 2 3; do
  R=$(( 590 - $(el) )); [ $R -lt 30 ] && break
  GV_DBG_STAGE_MODE=$m timeout 30 $G --gtest_filter='CpuDoorbells.*' --gtest_repeat=100 > $OUT/all-m$m.log 2>&1
  echo "all mode $m rc=$? $(cnt $OUT/all-m$m.log) at $(el) s" >> $S
done
echo "done at $(el) s" >> $S
