#!/bin/bash
# session 34 call 3: M = main (s37ms), G4 = direct-plan (9622766), G5 = direct-plan-g2 (294b43a: G2 +
# the direct path's own checks, FastFirst), G6 = direct-plan-nosys (66128b6: G4 without fast_run's
# scope change; the working tree of this call). Probes, compare.sh (3 interleaved runs); then the
# README's test command on the tree of the candidate that wins latency without losing rate (G4 and
# G5 by applying their patches to this tree), if one does.
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
for v in s34g5 s34g6; do
  echo "== $v gv_probe_path --commit" >> $OUT/probe.txt
  timeout 60 .devcarry/$v/gv_probe_path --commit >> $OUT/probe.txt 2>&1
done
bash bench/compare.sh --out $OUT/cmp --reps 3 --cases .devcarry/cases2.txt M=.devcarry/s37ms G4=.devcarry/s34g4 G5=.devcarry/s34g5 G6=.devcarry/s34g6 > $OUT/cmp.txt 2>&1
rc=$?
echo "compare exit $rc at ${SECONDS} s" >> $S
tail -10 $OUT/cmp.txt | cut -c1-150 >> $S
tar czf $OUT/logs.tgz -C $OUT cmp && rm -rf $OUT/cmp
pick=$(python3 - $OUT/cmp.txt <<'PY'
import sys
r = {}
for l in open(sys.argv[1]):
    if l.startswith('gv_') and '[' in l:
        t = l.split('[')[0].split()
        r[l.split('  ')[0].strip()] = [float(x) for x in t[-3:]]   # G4/M G5/M G6/M
best, bl = 'none', 0.975
for i, n in enumerate(['G4', 'G5', 'G6']):
    g = lambda c, d: r.get(c, [d] * 3)[i]
    lat = g('gv_write_bw --lat -s 8 -n 10000', 9)
    ok = (g('gv_write_bw --lat -s 64 -n 10000', 9) <= 1.0 and g('gv_write_bw -s 8 -q 66 -t 64 -n 4096 --reps 3', 0) >= 0.99
          and g('gv_write_bw -s 8 -q 1 -t 64 -n 4096 --reps 3', 0) >= 0.99 and g('gv_write_bw -s 4096 -q 264 -t 512 -n 64 --reps 3', 0) >= 0.98)
    print(n, lat, ok, file=sys.stderr)
    if ok and lat < bl: best, bl = n, lat
print(best)
PY
)
echo "pick: $pick" >> $S
if [[ $rc == 0 && $pick != none ]]; then
  case $pick in
    G4) git apply .devcarry/to-g4.patch || patch -p1 < .devcarry/to-g4.patch ;;
    G5) git apply .devcarry/to-g5.patch || patch -p1 < .devcarry/to-g5.patch ;;
  esac
  echo "applied $? ; FastFirst in direct.cuh: $(grep -c FastFirst include/gpuverbs/detail/soft/direct.cuh)" >> $S
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
  GV_SKIP_SANITIZERS=1 timeout $((592 - SECONDS)) scripts/run_tests.sh > $OUT/tests.log 2>&1
  echo "tests exit $? at ${SECONDS} s" >> $S
  grep -E 'tests passed|tests failed|FAILED|Failed|Not Run|^==== |took' $OUT/tests.log | tail -20 >> $S
  gzip -f $OUT/tests.log
fi
cat $S; grep -A16 "==" $OUT/probe.txt | grep -E "==|call|round|checks|decode|regions|copy|fence" | head -50
