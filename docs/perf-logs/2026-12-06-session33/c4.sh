#!/bin/bash
# session 33 call 4: the suite (bench/run_suite.sh --two-process) on main's final code (tools
# built on the development machine at 693afd7's code: .devcarry/s37m), then, measurement only,
# L = the same tools built with -DGV_DIRECT_LOCK_SYS=0 (the direct path's lock RMW at device
# scope: wrong for a peer on another GPU; what system scope costs) against main, compare.sh.
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
timeout 300 bash bench/run_suite.sh --two-process .devcarry/s37m $OUT/suite > $OUT/suite.out 2>&1
echo "suite exit $? at ${SECONDS} s" >> $S
tail -3 $OUT/suite.out >> $S
cp $OUT/suite/results.jsonl $OUT/suite/results-two-process.jsonl $OUT/ 2>/dev/null
bash bench/compare.sh --out $OUT/cmp --reps 5 --cases .devcarry/cases-l.txt M=.devcarry/s37m L=.devcarry/s37l > $OUT/cmp.txt 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
tail -6 $OUT/cmp.txt >> $S
for b in 64 256; do echo "== gv_probe_path --batch $b" >> $OUT/probe.txt; timeout 60 .devcarry/s37m/gv_probe_path --batch $b >> $OUT/probe.txt 2>&1; done
echo "probes at ${SECONDS} s" >> $S
tar czf $OUT/logs.tgz -C $OUT suite cmp suite.out && rm -rf $OUT/suite $OUT/cmp $OUT/suite.out
cat $S
