#!/bin/bash
# Session 29, device call 1 (fresh machine): session 27's call I (e9-cases: WRITE 4 KiB, builds
# B0x / R7A / R8 / R9 carried in .devcarry) in at most 170 s, then the Release build of main the
# way scripts/run_tests.sh builds it, so that call 2 on the warm machine runs the README's test
# command on a built tree.
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
timeout 170 bench/compare.sh --out $OUT/callI --reps 2 --cases docs/perf-logs/2026-12-05-session27/e9-cases.txt \
  B0x=.devcarry/B0x R7A=.devcarry/R7A R8=.devcarry/R8 R9=.devcarry/R9 >> $S 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
( source scripts/common.sh; cd "$GV_ROOT"; configure build; build_tree build ) > $OUT/build.log 2>&1
echo "build exit $? at ${SECONDS} s" >> $S
tail -3 $OUT/build.log >> $S
