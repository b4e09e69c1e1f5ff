#!/bin/bash
# Session 37's diagnosis, for the next call (about 60 s): does the warp take the benchmark's runs?
# s37d/gv_write_bw: branch warp-fast with warp-debug.patch built with -DGV_WARP_RUN_DEBUG (device
# printf at the hand-off and at warp_run's end, the first 12 of each); s37d/gv_probe_costs: the
# branch's probe with stores where a drain stores. Then M against W at other block sizes.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
for f in s35m s37w s37d; do tar xJf .devcarry/$f.tar.xz -C .devcarry; done
timeout 30 .devcarry/s37d/gv_write_bw -s 8 -q 1 -t 64 -n 256 2>&1 | head -40 | tee $OUT/dbg1.txt
timeout 30 .devcarry/s37d/gv_probe_costs 2>&1 | tee $OUT/probe-costs.txt
printf '%s\n' "gv_write_bw -s 8 -q 1 -t 32 -n 4096 --reps 3" "gv_write_bw -s 8 -q 1 -t 512 -n 4096 --reps 3" \
  "gv_write_bw -s 8 -q 1 -t 64 -n 512 --reps 3" > /tmp/cases-d.txt
timeout 60 bash bench/compare.sh --out $OUT/cmp --reps 2 --cases /tmp/cases-d.txt M=.devcarry/s35m W=.devcarry/s37w 2>&1 | tail -5
