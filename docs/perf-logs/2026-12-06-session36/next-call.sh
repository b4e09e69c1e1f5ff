#!/bin/bash
# Written in session 36 for the next call (measurement only, no README test):
#   bash .devcarry/next-call.sh          about 300 s: cases4.txt, two-process latency in 2 runs,
#                                        probes, then the suite on V's tools
#   bash .devcarry/next-call.sh short    about 60 s: cases5.txt, two-process latency in 1 run, probes
# M (main 2a42901's tools) against V (branch handle-by-value: commit_outlined takes the handle by
# value, lat_kernel's jobs __grid_constant__), VT (V + direct-trim) and F (V + fastrun-sys), 3
# interleaved runs. Each result is saved under $OUT as it comes.
set -u
SHORT=0; [ "${1:-}" = short ] && SHORT=1
CASES=.devcarry/cases4.txt; TP_REPS=2
(( SHORT )) && { CASES=.devcarry/cases5.txt; TP_REPS=1; }
S=$OUT/summary.txt
for f in s35m s36v s36vt s36f; do tar xJf .devcarry/$f.tar.xz -C .devcarry || echo "untar $f failed" >> $S; done
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
timeout 80 bash bench/compare.sh --out $OUT/cmp --reps 3 --cases $CASES M=.devcarry/s35m V=.devcarry/s36v VT=.devcarry/s36vt F=.devcarry/s36f > $OUT/cmp.txt 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
tail -6 $OUT/cmp.txt | cut -c1-170 >> $S
cp $OUT/cmp/*.jsonl $OUT/ 2>/dev/null
timeout 60 bash .devcarry/tp-lat.sh $OUT/tp $TP_REPS M=.devcarry/s35m V=.devcarry/s36v > $OUT/tp.txt 2>&1
echo "tp-lat exit $? at ${SECONDS} s" >> $S
tail -4 $OUT/tp.txt >> $S
for b in s35m s36v; do echo "== $b gv_probe_path --commit" >> $OUT/probe.txt; timeout 20 .devcarry/$b/gv_probe_path --commit >> $OUT/probe.txt 2>&1; done
echo "probes at ${SECONDS} s" >> $S
tar czf $OUT/logs.tgz -C $OUT cmp tp && rm -rf $OUT/cmp $OUT/tp
if (( !SHORT )); then
    timeout 200 bash bench/run_suite.sh --two-process .devcarry/s36v $OUT/suite > $OUT/suite.out 2>&1
    echo "suite exit $? at ${SECONDS} s" >> $S
    tail -3 $OUT/suite.out >> $S
    cp $OUT/suite/results.jsonl $OUT/suite/results-two-process.jsonl $OUT/ 2>/dev/null
    tar czf $OUT/suite.tgz -C $OUT suite suite.out && rm -rf $OUT/suite $OUT/suite.out
fi
cat $S
