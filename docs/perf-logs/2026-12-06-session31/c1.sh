#!/bin/bash
# First call (fresh machine, main 9dc022d): the README's test command (build on the device), then
# the benchmark suite with both halves on the tools that build made.
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
GV_SKIP_SANITIZERS=1 timeout 480 scripts/run_tests.sh > $OUT/tests.log 2>&1
echo "tests exit $? at ${SECONDS} s" >> $S
grep -E 'tests passed|tests failed|Bench.compare|FAILED|Not Run' $OUT/tests.log | tail -12 >> $S
left=$(( 585 - SECONDS ))
if (( left > 45 )); then
  timeout $left bench/run_suite.sh --two-process build/tools $OUT/suite > $OUT/suite-stdout.txt 2>&1
  echo "suite exit $? at ${SECONDS} s" >> $S
  tail -4 $OUT/suite-stdout.txt >> $S
  mv $OUT/suite/results*.jsonl $OUT/ 2>/dev/null
  tar czf $OUT/suite-logs.tgz -C $OUT suite suite-stdout.txt && rm -rf $OUT/suite $OUT/suite-stdout.txt
fi
gzip $OUT/tests.log
cat $S
