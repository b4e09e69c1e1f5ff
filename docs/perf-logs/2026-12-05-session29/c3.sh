#!/bin/bash
# Session 29, device call 3 (fresh machine): R10 (copy_run without its own per-segment loop: a
# run of unlike SENDs is copied by the drain's segment loop, so group_copy is inlined once less)
# against B0x (before runs), R7A (main's executor before R10) and R8 (runs compiled out), three
# rounds on f1-cases.txt; then the Release build of this tree (R10 applied) for call 4.
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
timeout 240 bench/compare.sh --out $OUT/cmp --reps 3 --cases docs/perf-logs/2026-12-05-session29/f1-cases.txt \
  B0x=.devcarry/B0x R7A=.devcarry/R7A R8=.devcarry/R8 R10=.devcarry/R10 >> $S 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
( source scripts/common.sh; cd "$GV_ROOT"; configure build; build_tree build ) > $OUT/build.log 2>&1
echo "build exit $? at ${SECONDS} s" >> $S
tail -3 $OUT/build.log >> $S
