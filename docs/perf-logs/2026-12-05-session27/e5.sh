#!/bin/bash
# Session 27, device call E (fresh machine, the session's last ~250 s): R7A (main at d7791fb)
# against V2 (R7A with plan_send_run and complete_send_run out of line, __noinline__: the
# benchmark kernel's spills back to 420 / 556 bytes from 512 / 724), 3 rounds; then one run of
# each tool of the bench-one-object build (B1: gv_bench.cu compiled once, four small mains), to
# see each tool's default operation on a GPU.
set -u
S=$OUT/summary.txt
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
timeout 60 bench/compare.sh --out $OUT/cmp --reps 3 --cases docs/perf-logs/2026-12-05-session27/e5-cases.txt \
  R7A=.devcarry/R7A V2=.devcarry/V2 >> $S 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
for t in "gv_write_bw -s 4096 -q 8 -t 64 -n 256" "gv_read_bw -s 4096 -q 8 -t 64 -n 256" \
         "gv_send_bw -s 4096 -q 8 -t 64 -n 256" "gv_write_lat -n 2000"; do
  echo "[B1] $t: $(timeout 20 .devcarry/B1/$t --reps 1 --json 2>&1 | tail -n 1 | cut -c1-200)" >> $S
done
echo "done at ${SECONDS} s" >> $S
