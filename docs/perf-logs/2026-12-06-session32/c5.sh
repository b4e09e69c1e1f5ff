#!/bin/bash
# session 32 call 5 (inline in the run call; written out here as it ran): right after call 4, on
# the same warm machine, B = main 5b2ec44's tools (built on the development machine) against H =
# the tools call 4's README test command built from 87155a8 on the GPU machine.
S=$OUT/summary.txt; echo "start $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader)" > $S
ls -la build/tools/gv_write_bw build/tools/gv_probe_path >> $S 2>&1 || { cat $S; exit 3; }
mkdir -p $OUT/h && cp build/tools/gv_write_bw build/tools/gv_probe_path $OUT/h/ 2>/dev/null
for r in 1 2; do for v in .devcarry/s33b $OUT/h; do echo "== round $r: $v" >> $OUT/probe.txt; timeout 60 $v/gv_probe_path --commit >> $OUT/probe.txt 2>&1; done; done
bash bench/compare.sh --out $OUT/cmp --reps 5 --cases .devcarry/s33/cases.txt B=.devcarry/s33b H=$OUT/h > $OUT/cmp.txt 2>&1
echo "compare exit $? at $SECONDS s" >> $S; rm -rf $OUT/h; tar czf $OUT/cmp.tgz -C $OUT cmp && rm -rf $OUT/cmp
