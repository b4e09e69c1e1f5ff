#!/bin/bash
# Session 27, device call C (fresh machine): bench/compare.sh, 3 rounds, B0x (main before runs)
# against R6 (runs, as landed in e3333fd), R7A (R6 + plan_send_run reads the WQE's opcode before
# the peer's context) and R7B (R7A + no run offer after a WRITE/READ; a SEND planned ahead makes
# the next one offered), all carried (Release, nvcc 13.0, sm_90, built on the development
# machine); then the Release build of the tree (main with R7A) for call D's README test.
set -u
S=$OUT/summary.txt
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
timeout 120 bench/compare.sh --out $OUT/cmp --reps 3 --cases docs/perf-logs/2026-12-05-session27/e3-cases.txt \
  B0x=.devcarry/B0x R6=.devcarry/R6 R7A=.devcarry/R7A R7B=.devcarry/R7B >> $S 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
( cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j16 ) > $OUT/build.log 2>&1
echo "build exit $? at ${SECONDS} s" >> $S
