#!/bin/bash
# session 33 call 1: the README's test command (sanitizer build skipped, as on every GPU-machine
# run: CI runs it) on main 5668876 (N merged), fresh machine.
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader) at $(git log --oneline -1 | cut -c1-60)" >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
GV_SKIP_SANITIZERS=1 timeout ${LIM:-570} scripts/run_tests.sh > $OUT/tests.log 2>&1
echo "tests exit $? at ${SECONDS} s" >> $S
grep -E 'tests passed|tests failed|FAILED|Failed|Not Run|^==== |building|took' $OUT/tests.log | tail -20 >> $S
gzip -f $OUT/tests.log
cat $S
