#!/bin/bash
# Written in session 35 for the next session, not run yet: the suite on main's code as of session
# 35 (G5 merged; tools built on the development machine into .devcarry/s35m: gv_write_bw,
# gv_write_lat, gv_read_bw, gv_send_bw, gv_post_rate, gv_compute_send, gv_probe_path), loopback
# and two processes, results*.jsonl kept for issue 14's table; then the README's test command
# (sanitizers skipped: the ASan tier runs in CI) in what is left of the call. Carry:
# .devcarry/{next-suite.sh,cases2.txt,s35m,s35t2} (cases2.txt: session 35's cases.txt here).
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
timeout 150 bash bench/run_suite.sh --two-process .devcarry/s35m $OUT/suite > $OUT/suite.out 2>&1
echo "suite exit $? at ${SECONDS} s" >> $S
tail -3 $OUT/suite.out >> $S
cp $OUT/suite/results.jsonl $OUT/suite/results-two-process.jsonl $OUT/ 2>/dev/null
for m in --commit "--batch 64"; do echo "== gv_probe_path $m" >> $OUT/probe.txt; timeout 60 .devcarry/s35m/gv_probe_path $m >> $OUT/probe.txt 2>&1; done
# Measurement only: T2 (branch direct-trim: the retirement point in round A under its acquire
# fence, Preloaded's words not zeroed; tools in .devcarry/s35t2) against main, 3 interleaved runs.
bash bench/compare.sh --out $OUT/cmp --reps 3 --cases .devcarry/cases2.txt M=.devcarry/s35m T2=.devcarry/s35t2 > $OUT/cmp.txt 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
tail -9 $OUT/cmp.txt | cut -c1-140 >> $S
tar czf $OUT/logs.tgz -C $OUT suite suite.out cmp && rm -rf $OUT/suite $OUT/suite.out $OUT/cmp
GV_SKIP_SANITIZERS=1 timeout $((590 - SECONDS)) scripts/run_tests.sh > $OUT/tests.log 2>&1
echo "tests exit $? at ${SECONDS} s" >> $S
grep -E 'tests passed|tests failed|FAILED|Failed|Not Run|^==== |all install checks' $OUT/tests.log | tail -20 >> $S
gzip -f $OUT/tests.log
cat $S
