#!/bin/bash
# session 32 call 1: round B split (next-roundb-stamps.patch), SASS of the probe and of gv_write_lat
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
P=.devcarry/p1
for r in 1 2 3; do
  echo "== round $r: gv_probe_path --commit" >> $OUT/probe.txt
  timeout 60 $P/gv_probe_path --commit >> $OUT/probe.txt 2>&1
done
echo "== gv_probe_path --commit --size 64" >> $OUT/probe.txt
timeout 60 $P/gv_probe_path --commit --size 64 >> $OUT/probe.txt 2>&1
for r in 1 2 3 4 5; do
  timeout 60 $P/gv_write_lat -s 8 >> $OUT/lat.txt 2>&1
done
cuobjdump -sass $P/gv_probe_path > $OUT/probe.sass 2>&1
cuobjdump -sass $P/gv_write_lat > $OUT/lat.sass 2>&1
ls -la $OUT >> $S
gzip $OUT/probe.sass $OUT/lat.sass
echo "end at ${SECONDS} s" >> $S
cat $S; tail -40 $OUT/probe.txt; grep -i "typical\|^ *[0-9]" $OUT/lat.txt | head -20
