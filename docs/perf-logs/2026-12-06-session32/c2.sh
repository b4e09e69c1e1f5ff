#!/bin/bash
# session 32 call 2: round B issued whole, one fence in the direct path's tail (after) against
# main 5b2ec44 (before); tools built on the development machine (nvcc 13.0, Release, sm_90).
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
A=.devcarry/s32a; B=.devcarry/s32b; E=.devcarry/s32e
for r in 1 2; do
  for v in a e; do
    echo "== round $r: $v gv_probe_path --commit" >> $OUT/probe.txt
    timeout 60 .devcarry/s32$v/gv_probe_path --commit >> $OUT/probe.txt 2>&1
  done
done
echo "== after gv_probe_path --batch 64" >> $OUT/probe.txt
timeout 60 $A/gv_probe_path --batch 64 >> $OUT/probe.txt 2>&1
echo "== after gv_probe_path --commit --size 64" >> $OUT/probe.txt
timeout 60 $A/gv_probe_path --commit --size 64 >> $OUT/probe.txt 2>&1
echo "== after gv_probe_path (two calls) " >> $OUT/probe.txt
timeout 60 $A/gv_probe_path >> $OUT/probe.txt 2>&1
cuobjdump -sass $A/gv_probe_path | awk '/Function : _Z11path_kernel/{p=1} /Function : _ZN2gv6detail/{p=0} p' > $OUT/path_a.sass 2>&1
cuobjdump -sass $E/gv_probe_path | awk '/Function : _Z11path_kernel/{p=1} /Function : _ZN2gv6detail/{p=0} p' > $OUT/path_e.sass 2>&1
echo "probe done at ${SECONDS} s" >> $S
bash bench/compare.sh --out $OUT/cmp --reps 5 --cases .devcarry/s32/cases1.txt before=$B after=$A e2=$E > $OUT/cmp.txt 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
# two processes: latency, interleaved
source bench/pair.sh
LOGS=$OUT/tp; mkdir -p $LOGS; PORT=18600; LIMIT=90; n=0; failed=0
PAIR_SERVER_ARGS=(); PAIR_CLIENT_ARGS=()
for r in 1 2 3; do
  for v in before after e2; do
    if [ $v = before ]; then BIN=$B; elif [ $v = after ]; then BIN=$A; else BIN=$E; fi
    run_pair $OUT/tp-$v.jsonl gv_write_bw --lat -s 8 -n 10000 >> $OUT/tp.txt 2>&1
  done
done
echo quit | timeout 10 nvidia-cuda-mps-control
echo "two-process failed=$failed at ${SECONDS} s" >> $S
for v in before after e2; do echo "$v: $(grep -o '"t_typical[^,]*' $OUT/tp-$v.jsonl | tr '\n' ' ')" >> $S; done
tar czf $OUT/logs.tgz -C $OUT cmp tp tp.txt && rm -rf $OUT/cmp $OUT/tp $OUT/tp.txt
tar czf $OUT/sass.tgz -C $OUT path_a.sass path_e.sass && rm $OUT/path_a.sass $OUT/path_e.sass
cat $S; tail -20 $OUT/cmp.txt; grep -A26 "round 1" $OUT/probe.txt | head -60
