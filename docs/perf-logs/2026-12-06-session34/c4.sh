#!/bin/bash
# session 34 call 4, measurement only (too little device time was left for the README's test
# command): M = main (s37ms), G4 = direct-plan (9622766), G5 = direct-plan-g2 (294b43a: G2 + FastFirst),
# G6 = direct-plan-nosys (66128b6: G4 without fast_run's scope change). compare.sh, 3 runs; probes.
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
bash bench/compare.sh --out $OUT/cmp --reps 3 --cases .devcarry/cases2.txt M=.devcarry/s37ms G4=.devcarry/s34g4 G5=.devcarry/s34g5 G6=.devcarry/s34g6 > $OUT/cmp.txt 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
tail -10 $OUT/cmp.txt | cut -c1-150 >> $S
tar czf $OUT/logs.tgz -C $OUT cmp && rm -rf $OUT/cmp
for v in s34g5 s34g6; do
  echo "== $v gv_probe_path --commit" >> $OUT/probe.txt
  timeout 30 .devcarry/$v/gv_probe_path --commit >> $OUT/probe.txt 2>&1
done
cat $S; grep -A16 "==" $OUT/probe.txt | grep -E "==|call|round|checks|decode|regions|copy|fence" | head -30
