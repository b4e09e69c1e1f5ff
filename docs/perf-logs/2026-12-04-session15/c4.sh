#!/bin/bash
# Session 15 call 4: the suite (loopback, then two processes) on the final tree's tools (built on
# the development machine, sm_90, Release), for issue 14's results.jsonl. Bounded: what finished
# comes back.
set -u
T0=$(date +%s)
mkdir -p $OUT/suite
timeout 330 bench/run_suite.sh --two-process .devcarry/Ft $OUT/suite > $OUT/suite/run.txt 2>&1
echo "suite rc=$? at $(( $(date +%s) - T0 )) s" >> $OUT/suite/run.txt
