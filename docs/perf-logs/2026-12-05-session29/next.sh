#!/bin/bash
# For the next session's first device call (fresh machine), carry .devcarry/B0x, R7A, R8, R8A and
# R12 (39 MB): the five builds on f1-cases.txt, three rounds (at most 150 s), then the Release
# build of the tree as checked out (check out branch drain-split first if R12 is the one to
# merge), so that a second call on the warm machine runs `GV_SKIP_SANITIZERS=1
# scripts/run_tests.sh`.
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
timeout 150 bench/compare.sh --out $OUT/cmp --reps 3 --cases docs/perf-logs/2026-12-05-session29/f1-cases.txt \
  B0x=.devcarry/B0x R7A=.devcarry/R7A R8=.devcarry/R8 R8A=.devcarry/R8A R12=.devcarry/R12 >> $S 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
( source scripts/common.sh; cd "$GV_ROOT"; configure build; build_tree build ) > $OUT/build.log 2>&1
echo "build exit $? at ${SECONDS} s" >> $S
tail -3 $OUT/build.log >> $S
