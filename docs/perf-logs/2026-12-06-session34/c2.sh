#!/bin/bash
# session 34 call 2: M = main (s37ms), G2 = direct-preload2 (s37g2), G3 = direct-preload3 (51583ff),
# G4 = direct-plan (9622766, the working tree of this call), T = main + mr_fill through mr_take
# (41f9d39). Probes, compare.sh (5 interleaved runs); then, only when G4 wins latency without
# losing rate, the README's test command on G4's tree.
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
for v in s37ms s34g3 s34g4; do
  echo "== $v gv_probe_path --commit" >> $OUT/probe.txt
  timeout 60 .devcarry/$v/gv_probe_path --commit >> $OUT/probe.txt 2>&1
done
bash bench/compare.sh --out $OUT/cmp --reps 5 --cases .devcarry/cases2.txt M=.devcarry/s37ms G2=.devcarry/s37g2 G3=.devcarry/s34g3 G4=.devcarry/s34g4 T=.devcarry/s34t > $OUT/cmp.txt 2>&1
rc=$?
echo "compare exit $rc at ${SECONDS} s" >> $S
tail -10 $OUT/cmp.txt | cut -c1-150 >> $S
tar czf $OUT/logs.tgz -C $OUT cmp && rm -rf $OUT/cmp
go=$(python3 - $OUT/cmp.txt <<'PY'
import sys
r = {}
for l in open(sys.argv[1]):
    if l.startswith('gv_') and '[' in l:
        t = l.split('[')[0].split()
        r[l.split('  ')[0].strip()] = [float(x) for x in t[-4:]]   # G2/M G3/M G4/M T/M
lat = r.get('gv_write_bw --lat -s 8 -n 10000', [9]*4)[2]
lat64 = r.get('gv_write_bw --lat -s 64 -n 10000', [9]*4)[2]
q66 = r.get('gv_write_bw -s 8 -q 66 -t 64 -n 4096 --reps 3', [0]*4)[2]
kb4 = r.get('gv_write_bw -s 4096 -q 264 -t 512 -n 64 --reps 3', [0]*4)[2]
print('yes' if lat <= 0.97 and lat64 <= 1.0 and q66 >= 0.99 and kb4 >= 0.98 else 'no', lat, lat64, q66, kb4)
PY
)
echo "decision: $go" >> $S
if [[ $rc == 0 && $go == yes* ]]; then
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
  GV_SKIP_SANITIZERS=1 timeout $((590 - SECONDS)) scripts/run_tests.sh > $OUT/tests.log 2>&1
  echo "tests exit $? at ${SECONDS} s" >> $S
  grep -E 'tests passed|tests failed|FAILED|Failed|Not Run|^==== |took' $OUT/tests.log | tail -20 >> $S
  gzip -f $OUT/tests.log
fi
cat $S; grep -A16 "==" $OUT/probe.txt | grep -E "==|call|round|checks|decode|regions|copy|fence" | head -50
