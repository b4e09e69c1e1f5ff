#!/bin/bash
# Session 36, one call for everything: M (main 2a42901's tools) against V (branch
# handle-by-value, this tree) and VT (V + direct-trim), 3 interleaved runs of 4 cases; the
# two-process latency of M and V; then the README's test command on this tree (V), sanitizers
# skipped (CI runs them), in what is left of the call.
set -u
S=$OUT/summary.txt
for f in s35m s36v s36vt; do tar xJf .devcarry/$f.tar.xz -C .devcarry || echo "untar $f failed" >> $S; done
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader) at $(git log --oneline -1 | cut -c1-60)" >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
timeout 60 bash bench/compare.sh --out $OUT/cmp --reps 3 --cases .devcarry/cases4.txt M=.devcarry/s35m V=.devcarry/s36v VT=.devcarry/s36vt > $OUT/cmp.txt 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
tail -6 $OUT/cmp.txt | cut -c1-170 >> $S
timeout 40 bash .devcarry/tp-lat.sh $OUT/tp 1 M=.devcarry/s35m V=.devcarry/s36v > $OUT/tp.txt 2>&1
echo "tp-lat exit $? at ${SECONDS} s" >> $S
tail -4 $OUT/tp.txt >> $S
tar czf $OUT/logs.tgz -C $OUT cmp tp && rm -rf $OUT/cmp $OUT/tp
rm -rf .devcarry/s35m .devcarry/s36vt
GV_SKIP_SANITIZERS=1 timeout $((588 - SECONDS)) scripts/run_tests.sh > $OUT/tests.log 2>&1
echo "tests exit $? at ${SECONDS} s" >> $S
grep -E 'tests passed|tests failed|FAILED|Failed|Not Run|^==== |all install checks' $OUT/tests.log | tail -25 >> $S
gzip -f $OUT/tests.log
cat $S
