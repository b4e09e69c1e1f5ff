#!/bin/bash
# Session 11, call 1: README test command at HEAD (the board-loop fix's first GPU run), then the
# CPU-initiated rate and latency, then the CpuDoorbells loops that failed 1 run in 5 before the fix.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
git log --oneline -1 >> $S
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> $S 2>&1
GV_SKIP_SANITIZERS=1 scripts/run_tests.sh > $OUT/run_tests-h200.log 2>&1; echo "run_tests rc=$? at $(el) s" >> $S
grep -E "tests passed|tests failed|all tests passed|FAILED|Failed|Total Test time" $OUT/run_tests-h200.log | tail -14 >> $S
grep -E "CpuDoorbells|GpuVerbsProxy" $OUT/run_tests-h200.log | grep "Test #" >> $S
B=build/tools
for i in 1 2; do timeout 60 $B/gv_write_bw --initiator cpu -s 8 -q 4 -t 64 -n 4096 --reps 2 >> $OUT/bench.log 2>&1; echo "cpu-init rc=$?" >> $OUT/bench.log; done
for i in 1 2; do timeout 60 $B/gv_write_bw --initiator gpu -s 8 -q 4 -t 64 -n 4096 --reps 2 >> $OUT/bench.log 2>&1; done
for i in 1 2 3; do timeout 60 $B/gv_write_lat -s 8 -n 10000 >> $OUT/bench.log 2>&1; done
timeout 60 $B/gv_probe_path >> $OUT/bench.log 2>&1
echo "bench done at $(el) s" >> $S
G=build/tests/gv_gpu_tests
cnt() { echo "fails $(grep -cE 'FAILED  \] .*\([0-9]+ ms\)' $1) ok $(grep -cE '^\[       OK \]' $1)"; }
timeout 30 $G --gtest_filter='CpuDoorbells.ThreadsOnTheirOwnQpsLoseNothing' --gtest_repeat=150 > $OUT/loop-threads.log 2>&1; echo "threads x150 rc=$? $(cnt $OUT/loop-threads.log) at $(el) s" >> $S
timeout 40 $G --gtest_filter='CpuDoorbells.KernelsOutOfTimeMidWorkLoseNothing' --gtest_repeat=150 > $OUT/loop-short.log 2>&1; echo "short-budget x150 rc=$? $(cnt $OUT/loop-short.log) at $(el) s" >> $S
R=$(( 545 - $(el) ))
if [ $R -gt 10 ]; then
  timeout $R $G --gtest_filter='CpuDoorbells.*' --gtest_repeat=2000 > $OUT/loop-all.log 2>&1; echo "all loop rc=$? $(cnt $OUT/loop-all.log) at $(el) s" >> $S
fi
for f in $OUT/loop-*.log; do grep -E 'FAILED  \] .*\([0-9]+ ms\)' $f | sed 's/ (.*//' | sort | uniq -c; done >> $S
grep -h -B2 -A6 "Failure" $OUT/loop-*.log | head -30 >> $S
echo "done at $(el) s" >> $S
