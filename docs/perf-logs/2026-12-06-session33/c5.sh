#!/bin/bash
# session 33 call 5, measurement only: M = main's final code (as call 4's tools), G2 = branch
# direct-preload2 (56e64f1: the lock as a relaxed RMW plus fence.acquire after round A's loads,
# the local region's entry in round A from the handle's table, a small WRITE's source loaded in
# round B; not run through the GPU tests, not merged). Probes, then compare.sh, 5 runs.
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
for v in s37ms s37g2; do
  echo "== $v gv_probe_path --commit" >> $OUT/probe.txt
  timeout 60 .devcarry/$v/gv_probe_path --commit >> $OUT/probe.txt 2>&1
done
bash bench/compare.sh --out $OUT/cmp --reps 5 --cases .devcarry/cases.txt M=.devcarry/s37ms G2=.devcarry/s37g2 > $OUT/cmp.txt 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
tail -8 $OUT/cmp.txt >> $S
tar czf $OUT/logs.tgz -C $OUT cmp && rm -rf $OUT/cmp
cat $S; grep -A16 "==" $OUT/probe.txt | grep -E "==|call|round|publish|copy" | head -30
