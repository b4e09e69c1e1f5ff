#!/bin/bash
# session 33 call 3: B = main 5668876 (N merged; tools built on the development machine from
# branch direct-roundb, the same include/ tree), R = B + the position's RMW as a global-space
# atom (direct path and ring_reserve: no shared-memory test and branch between it and the lock's
# RMW), R2 = B + every 64-bit add and max of the device code as a global-space atom (atom::g64_*;
# the working tree of this call). Probes and compare.sh (5 interleaved runs), then the README's
# test command on R2's tree (sanitizers skipped, as on every GPU-machine run), in the time left.
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
grep -c "g64_add_relaxed" include/gpuverbs/device/atomic.cuh >> $S
for v in s37b s37r s37r2; do
  echo "== $v gv_probe_path --commit" >> $OUT/probe.txt
  timeout 60 .devcarry/$v/gv_probe_path --commit >> $OUT/probe.txt 2>&1
done
bash bench/compare.sh --out $OUT/cmp --reps 5 --cases .devcarry/cases.txt B=.devcarry/s37b R=.devcarry/s37r R2=.devcarry/s37r2 > $OUT/cmp.txt 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
tar czf $OUT/logs.tgz -C $OUT cmp && rm -rf $OUT/cmp
tail -9 $OUT/cmp.txt >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
GV_SKIP_SANITIZERS=1 timeout $((590 - SECONDS)) scripts/run_tests.sh > $OUT/tests.log 2>&1
echo "tests exit $? at ${SECONDS} s" >> $S
grep -E 'tests passed|tests failed|FAILED|Failed|Not Run|^==== |building|took' $OUT/tests.log | tail -20 >> $S
gzip -f $OUT/tests.log
cat $S; grep -A16 "==" $OUT/probe.txt | grep -E "==|call|round|lock|publish" | head -40
