#!/bin/bash
# For the next session (not run in session 31): round B of the direct path split by the value each
# interval waits for, and the probe kernel's SASS. Apply next-roundb-stamps.patch first (stamps
# compiled into gv_probe_path only; `git apply docs/perf-logs/2026-12-06-session31/next-roundb-stamps.patch`),
# then on a GPU machine: bash docs/perf-logs/2026-12-06-session31/next.sh (about 3 minutes on a
# fresh 16-core machine: the library and one tool).
set -u
S=$OUT/summary.txt
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
(cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j16 --target gv_probe_path) > $OUT/build.log 2>&1
echo "build exit $? at ${SECONDS} s" >> $S
for r in 1 2 3; do
  echo "== round $r: gv_probe_path --commit" >> $OUT/probe.txt
  timeout 60 build/tools/gv_probe_path --commit >> $OUT/probe.txt 2>&1
done
cuobjdump -sass -fun path_kernel build/tools/gv_probe_path > $OUT/path_kernel.sass 2>&1 ||
  cuobjdump -sass build/tools/gv_probe_path > $OUT/path_kernel.sass 2>&1
gzip $OUT/build.log $OUT/path_kernel.sass
cat $S $OUT/probe.txt
