#!/bin/bash
# session 32 call 6: where F's latency gain comes from. B = main 5b2ec44, F = call 3's F,
# H2 = main 87155a8 (the tail: published early, one fence, relaxed give-back CAS) + F's round B
# (one basic block: mr_load_if, our own context for a peer not guessed). Tools built on the
# development machine (nvcc 13.0, Release, sm_90).
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
for v in s33b s35h2; do
  echo "== $v gv_probe_path --commit" >> $OUT/probe.txt
  timeout 60 .devcarry/$v/gv_probe_path --commit >> $OUT/probe.txt 2>&1
done
cuobjdump -sass .devcarry/s35h2/gv_probe_path | awk '/Function : _Z11path_kernel/{p=1} /Function : _ZN2gv6detail/{p=0} p' > $OUT/path_h2.sass 2>&1
bash bench/compare.sh --out $OUT/cmp --reps 5 --cases .devcarry/s33/cases.txt B=.devcarry/s33b F=.devcarry/s33f H2=.devcarry/s35h2 > $OUT/cmp.txt 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
tar czf $OUT/logs.tgz -C $OUT cmp path_h2.sass && rm -rf $OUT/cmp $OUT/path_h2.sass
cat $S; tail -8 $OUT/cmp.txt; grep -A16 "==" $OUT/probe.txt | head -40
