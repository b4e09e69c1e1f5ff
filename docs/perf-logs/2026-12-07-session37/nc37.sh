#!/bin/bash
# Session 37, call 1: M (main's tools, session 35) against W (branch warp-fast: handle-by-value +
# warp_run), compare.sh, 2 interleaved runs of cases7.txt; then the README's test command
# (GV_SKIP_SANITIZERS=1 scripts/run_tests.sh) on W's source tree. Results under $OUT.
set -u
S=$OUT/summary.txt
for f in s35m s37w; do tar xJf .devcarry/$f.tar.xz -C .devcarry || echo "untar $f failed" >> $S; done
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
timeout 75 bash bench/compare.sh --out $OUT/cmp --reps 2 --cases .devcarry/cases7.txt M=.devcarry/s35m W=.devcarry/s37w > $OUT/cmp.txt 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
tail -8 $OUT/cmp.txt | cut -c1-200 >> $S
cp $OUT/cmp/*.jsonl $OUT/ 2>/dev/null; tar czf $OUT/cmp.tgz -C $OUT cmp && rm -rf $OUT/cmp
mkdir -p /tmp/w && tar xJf .devcarry/w-src.tar.xz -C /tmp/w
( cd /tmp/w && GV_SKIP_SANITIZERS=1 timeout $((588 - SECONDS)) scripts/run_tests.sh > $OUT/readme-test.log 2>&1 )
echo "README test exit $? at ${SECONDS} s" >> $S
grep -E '^==|tests passed|tests failed|FAILED|all tests passed|Total Test time' $OUT/readme-test.log | tail -30 >> $S
for d in /tmp/w/build; do for f in $d/ctest-last.log; do [ -f $f ] && cp $f $OUT/; done; done
xz -T8 $OUT/readme-test.log
cat $S
