#!/bin/bash
# Fourth call: main's tools (built on the development machine at 5bac8c6, carried as
# build/tools/*): (1) how the copy-bound rows depend on the run's length (iterations per QP; the
# suite runs 64 KiB WRITEs with 62 per QP, session 18 measured 78% of the copy with 512), three
# rounds; (2) the loopback suite, for issue 14's table (its two-process half did not fit the device time left). Everything the suite
# writes besides its two results files goes back in one archive (at most 8 files come back).
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
timeout 80 bench/compare.sh --out $OUT/cmp4 --reps 3 --cases docs/perf-logs/2026-12-06-session30/n-cases.txt \
  main=build/tools >> $S 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
grep -i -E "error|fail" $OUT/cmp4/compare.log | head -20 >> $S; rm -f $OUT/cmp4/compare.txt $OUT/cmp4/compare.log
timeout 200 bench/run_suite.sh build/tools $OUT/suite > $OUT/suite-stdout.txt 2>&1
echo "suite exit $? at ${SECONDS} s" >> $S
tail -5 $OUT/suite-stdout.txt >> $S
mv $OUT/suite/results*.jsonl $OUT/ 2>/dev/null
tar czf $OUT/suite-logs.tgz -C $OUT suite suite-stdout.txt && rm -rf $OUT/suite $OUT/suite-stdout.txt
ls -la $OUT >> $S
