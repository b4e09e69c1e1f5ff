#!/bin/bash
# session 34 call 1: M = main's final code (s37ms, built in session 33 from main's code), G2 =
# branch direct-preload2 (e78d574; built as s37g2 from the same code, 56e64f1). Probes, compare.sh
# (5 interleaved runs); then, only when G2 wins latency without losing rate, the README's test
# command on G2's tree (the working tree of this call).
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
for v in s37ms s37g2; do
  echo "== $v gv_probe_path --commit" >> $OUT/probe.txt
  timeout 60 .devcarry/$v/gv_probe_path --commit >> $OUT/probe.txt 2>&1
done
bash bench/compare.sh --out $OUT/cmp --reps 5 --cases .devcarry/cases.txt M=.devcarry/s37ms G2=.devcarry/s37g2 > $OUT/cmp.txt 2>&1
rc=$?
echo "compare exit $rc at ${SECONDS} s" >> $S
tail -8 $OUT/cmp.txt >> $S
tar czf $OUT/logs.tgz -C $OUT cmp && rm -rf $OUT/cmp
go=$(python3 - $OUT/cmp.txt <<'PY'
import sys
r = {}
for l in open(sys.argv[1]):
    if l.startswith('gv_') and '[' in l:
        r[l.split('  ')[0].strip()] = float(l.split('[')[0].split()[-1])
lat = r.get('gv_write_bw --lat -s 8 -n 10000', 9)
q66 = r.get('gv_write_bw -s 8 -q 66 -t 64 -n 4096 --reps 3', 0)
kb4 = r.get('gv_write_bw -s 4096 -q 264 -t 512 -n 64 --reps 3', 0)
print('yes' if lat <= 0.98 and q66 >= 0.99 and kb4 >= 0.98 else 'no', lat, q66, kb4)
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
cat $S; grep -A16 "==" $OUT/probe.txt | grep -E "==|call|round|publish|copy" | head -30
