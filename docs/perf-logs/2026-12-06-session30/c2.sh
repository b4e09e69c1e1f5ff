#!/bin/bash
# Second call (warm machine after next.sh built the tree): the README's test command, then
# R13 (branch copy-l2: 16-byte copy loads with the .L2::256B hint) against R12 and B0x on the
# copy-bound cases. Carry .devcarry/B0x, R12, R13.
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
GV_SKIP_SANITIZERS=1 timeout 380 scripts/run_tests.sh > $OUT/tests.log 2>&1
echo "tests exit $? at ${SECONDS} s" >> $S
grep -E 'tests passed|tests failed|passed|FAILED' $OUT/tests.log | tail -8 >> $S
left=$(( 585 - SECONDS ))
(( left > 60 )) && timeout $left bench/compare.sh --out $OUT/cmp2 --reps 3 --cases docs/perf-logs/2026-12-06-session30/r13-cases.txt \
  B0x=.devcarry/B0x R12=.devcarry/R12 R13=.devcarry/R13 >> $S 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
