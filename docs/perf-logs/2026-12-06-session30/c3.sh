#!/bin/bash
# Third call: R14 (branch copy-big: copies of 16 KiB or more in an out-of-line loop with its own
# registers) against B0x, R7A (main's executor) and R8 (runs compiled out) on the copy-bound
# cases; and the copy loop's SASS of R7A, R8 and R14 (does the run code's register pressure take
# loads in flight from the copy?). Carry .devcarry/B0x, R7A, R8, R14.
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
CUOBJ=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
for b in R7A R8 R14; do
  # Only the benchmark's bandwidth kernel(s): from its "Function :" line to the next one.
  "$CUOBJ" -sass .devcarry/$b/gv_write_bw 2>>$S | awk '/Function :/{p = ($0 ~ /bw_kernel|copy_words/)} p' | gzip > $OUT/$b.sass.gz
  echo "$b sass: $(zcat $OUT/$b.sass.gz | wc -l) lines, LDG.E.128 $(zcat $OUT/$b.sass.gz | grep -c 'LDG.E.128'), STG.E.128 $(zcat $OUT/$b.sass.gz | grep -c 'STG.E.128')" >> $S
done
timeout 300 bench/compare.sh --out $OUT/cmp3 --reps 3 --cases docs/perf-logs/2026-12-06-session30/r14-cases.txt \
  B0x=.devcarry/B0x R7A=.devcarry/R7A R8=.devcarry/R8 R14=.devcarry/R14 >> $S 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
# At most 8 files come back: the table is in summary.txt already.
grep -i -E "error|fail" $OUT/cmp3/compare.log | head -20 >> $S; rm -f $OUT/cmp3/compare.log $OUT/cmp3/compare.txt
