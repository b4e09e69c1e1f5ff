#!/bin/bash
# session 32 call 7: B = main 5b2ec44; N = next-roundb-one-block.patch on e08ba2a (F's round B
# with mr_fill untouched, sq_ci before the fence in every fast_run); NP = N + mr_pin (round B's
# region words pinned after the retirement point's load). Development-machine builds.
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
for v in s33b s36n s36np; do
  echo "== $v gv_probe_path --commit" >> $OUT/probe.txt
  timeout 60 .devcarry/$v/gv_probe_path --commit >> $OUT/probe.txt 2>&1
done
cuobjdump -sass .devcarry/s36np/gv_probe_path | awk '/Function : _Z11path_kernel/{p=1} /Function : _ZN2gv6detail/{p=0} p' > $OUT/path_np.sass 2>&1
bash bench/compare.sh --out $OUT/cmp --reps 5 --cases .devcarry/s33/cases.txt B=.devcarry/s33b N=.devcarry/s36n NP=.devcarry/s36np > $OUT/cmp.txt 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
tar czf $OUT/logs.tgz -C $OUT cmp path_np.sass && rm -rf $OUT/cmp $OUT/path_np.sass
cat $S; tail -8 $OUT/cmp.txt; grep -A16 "==" $OUT/probe.txt | grep -E "==|call|round" | head -40
