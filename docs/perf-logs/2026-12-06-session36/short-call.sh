#!/bin/bash
# Written in session 36 for a call with little device time: M (main
# 2a42901's tools) against V (handle-by-value) and VT (V + direct-trim) and F (V + fastrun-sys), 3 runs of
# 3 cases, then V's two-process latency against M's, then probes. Each result saved as it comes.
set -u
S=$OUT/summary.txt
for f in s35m s36v s36vt s36f; do tar xJf .devcarry/$f.tar.xz -C .devcarry || echo "untar $f failed" >> $S; done
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
timeout 70 bash bench/compare.sh --out $OUT/cmp --reps 3 --cases .devcarry/cases5.txt M=.devcarry/s35m V=.devcarry/s36v VT=.devcarry/s36vt F=.devcarry/s36f > $OUT/cmp.txt 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
tail -5 $OUT/cmp.txt | cut -c1-170 >> $S
timeout 50 bash .devcarry/tp-lat.sh $OUT/tp 1 M=.devcarry/s35m V=.devcarry/s36v > $OUT/tp.txt 2>&1
echo "tp-lat exit $? at ${SECONDS} s" >> $S
tail -4 $OUT/tp.txt >> $S
for b in s35m s36v; do echo "== $b gv_probe_path --commit" >> $OUT/probe.txt; timeout 15 .devcarry/$b/gv_probe_path --commit >> $OUT/probe.txt 2>&1; done
echo "probes at ${SECONDS} s" >> $S
tar czf $OUT/logs.tgz -C $OUT cmp tp && rm -rf $OUT/cmp $OUT/tp
cat $S
