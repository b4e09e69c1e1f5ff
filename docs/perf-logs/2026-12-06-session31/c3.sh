#!/bin/bash
# Third call (fresh machine, main's final tree): the README's test command, then gv_probe_path's
# split of a lone WRITE posted and committed in one call (--commit: the direct path) and, for the
# same run, of the two-call path, on the tools that build made.
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
GV_SKIP_SANITIZERS=1 timeout 570 scripts/run_tests.sh > $OUT/tests.log 2>&1
echo "tests exit $? at ${SECONDS} s" >> $S
grep -E 'tests passed|tests failed|FAILED|Not Run|^==== ' $OUT/tests.log | tail -14 >> $S
grep -E 'GpuProperties.CommitFlagWriteCarries|cli' $OUT/tests.log | grep -E 'Passed|Failed' | head -4 >> $S
for a in "--commit" "--commit --size 64" ""; do
  left=$(( 592 - SECONDS ))
  (( left > 4 )) || break
  echo "== gv_probe_path $a" >> $OUT/probe.txt
  timeout $left build/tools/gv_probe_path $a >> $OUT/probe.txt 2>&1
  echo "exit $?" >> $OUT/probe.txt
done
echo "probe done at ${SECONDS} s" >> $S
gzip $OUT/tests.log
cat $S $OUT/probe.txt
