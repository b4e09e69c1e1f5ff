#!/bin/bash
# session 33 call 3: B = main 5668876 (N merged; tools built on the development machine from
# branch direct-roundb, the same include/ tree), R = B + the position's RMW as a global-space
# atom (atom::fetch_add_relaxed_global: no shared-memory test and branch between it and the
# lock's RMW, so the lock's RMW issues beside it). Probes, then compare.sh, 5 interleaved runs.
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
for v in ${VARS:-s37b s37r}; do
  echo "== $v gv_probe_path --commit" >> $OUT/probe.txt
  timeout 60 .devcarry/$v/gv_probe_path --commit >> $OUT/probe.txt 2>&1
done
bash bench/compare.sh --out $OUT/cmp --reps 5 --cases .devcarry/cases.txt ${CMP:-B=.devcarry/s37b R=.devcarry/s37r} > $OUT/cmp.txt 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
tar czf $OUT/logs.tgz -C $OUT cmp && rm -rf $OUT/cmp
cat $S; tail -9 $OUT/cmp.txt; grep -A16 "==" $OUT/probe.txt | grep -E "==|call|round|lock|publish" | head -40
