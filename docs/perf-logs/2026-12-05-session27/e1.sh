#!/bin/bash
# Session 27, device call A, on the send-runs branch (c0d72f1): session 26's d5.sh (carried
# builds B0x / R5 / R6, each run bounded) in at most 150 s, then the Release build only, so the
# next call on the same warm machine runs the README's test command on a built tree.
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ)" >> $S
timeout 150 bash docs/perf-logs/2026-12-05-session26/d5.sh > $OUT/d5.txt 2>&1
echo "d5 exit $? at ${SECONDS} s" >> $S
nproc >> $S
( cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j16 ) > $OUT/build.log 2>&1
echo "build exit $? at ${SECONDS} s" >> $S
tail -3 $OUT/build.log >> $S
