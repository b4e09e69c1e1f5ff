#!/bin/bash
# Session 29, device call 4, on the machine call 3 left warm: the README's test command without
# the sanitizer tier, on the tree as it is (R10 landed, or not: the closing note says which).
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) at $(git log --oneline -1 2>/dev/null | cut -c1-60)" >> $S
export GV_SKIP_SANITIZERS=1
scripts/run_tests.sh > $OUT/tests.log 2>&1
echo "tests exit $? at ${SECONDS} s" >> $S
grep -E 'tests passed|tests failed|PASSED|FAILED|Total Test|skipped' $OUT/tests.log | tail -15 >> $S
