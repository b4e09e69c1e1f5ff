#!/bin/bash
# session 32 call 3: B = main 5b2ec44; F = round B as one basic block (mr_load_if), published before
# the copy with one fence and a relaxed give-back CAS, sq_ci before fast_run's fence; G = F + the
# local entry from the handle's table in round A and a small WRITE's source loaded in round B.
# Tools built on the development machine (nvcc 13.0, Release, sm_90).
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
for r in 1 2; do
  for v in b f g; do
    echo "== round $r: $v gv_probe_path --commit" >> $OUT/probe.txt
    timeout 60 .devcarry/s33$v/gv_probe_path --commit >> $OUT/probe.txt 2>&1
  done
done
for v in f g; do
  cuobjdump -sass .devcarry/s33$v/gv_probe_path | awk '/Function : _Z11path_kernel/{p=1} /Function : _ZN2gv6detail/{p=0} p' > $OUT/path_$v.sass 2>&1
done
echo "probe done at ${SECONDS} s" >> $S
bash bench/compare.sh --out $OUT/cmp --reps 5 --cases .devcarry/s33/cases.txt B=.devcarry/s33b F=.devcarry/s33f G=.devcarry/s33g > $OUT/cmp.txt 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
tar czf $OUT/logs.tgz -C $OUT cmp path_f.sass path_g.sass && rm -rf $OUT/cmp $OUT/path_f.sass $OUT/path_g.sass
cat $S; tail -8 $OUT/cmp.txt; grep -A16 "round 1" $OUT/probe.txt | head -60
