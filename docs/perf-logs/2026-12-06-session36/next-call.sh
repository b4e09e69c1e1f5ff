#!/bin/bash
# Written in session 36 for the next call (measurement only, no README test, about 300 s):
# M (main 2a42901's tools) against V (branch handle-by-value: commit_outlined takes the handle
# by value, lat_kernel's jobs __grid_constant__) and VT (V + direct-trim), 3 interleaved runs of
# 4 cases (F: fastrun-sys, on V, too); two-process latency of M and V; probes; then the suite on V's tools.
set -u
S=$OUT/summary.txt
for f in s35m s36v s36vt s36f; do tar xJf .devcarry/$f.tar.xz -C .devcarry || echo "untar $f failed" >> $S; done
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
timeout 80 bash bench/compare.sh --out $OUT/cmp --reps 3 --cases .devcarry/cases4.txt M=.devcarry/s35m V=.devcarry/s36v VT=.devcarry/s36vt F=.devcarry/s36f > $OUT/cmp.txt 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
tail -6 $OUT/cmp.txt | cut -c1-170 >> $S
cp $OUT/cmp.txt $OUT/cmp/*.jsonl $OUT/ 2>/dev/null
timeout 60 bash .devcarry/tp-lat.sh $OUT/tp 2 M=.devcarry/s35m V=.devcarry/s36v > $OUT/tp.txt 2>&1
echo "tp-lat exit $? at ${SECONDS} s" >> $S
tail -4 $OUT/tp.txt >> $S
for b in s35m s36v; do echo "== $b gv_probe_path --commit" >> $OUT/probe.txt; timeout 20 .devcarry/$b/gv_probe_path --commit >> $OUT/probe.txt 2>&1; done
echo "probes at ${SECONDS} s" >> $S
tar czf $OUT/logs.tgz -C $OUT cmp tp && rm -rf $OUT/cmp $OUT/tp
timeout 200 bash bench/run_suite.sh --two-process .devcarry/s36v $OUT/suite > $OUT/suite.out 2>&1
echo "suite exit $? at ${SECONDS} s" >> $S
tail -3 $OUT/suite.out >> $S
cp $OUT/suite/results.jsonl $OUT/suite/results-two-process.jsonl $OUT/ 2>/dev/null
tar czf $OUT/suite.tgz -C $OUT suite suite.out && rm -rf $OUT/suite $OUT/suite.out
cat $S
