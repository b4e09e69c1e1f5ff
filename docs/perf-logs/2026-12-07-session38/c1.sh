#!/bin/bash
# Session 38, call 1: where one QP's small WRITEs spend their time (main's tools, built on the
# development machine, carried in .devcarry/t). gv_probe_costs' new rows (a drain's stores and
# fences alone), gv_probe_path --batch, then Nsight Compute's per-instruction stall samples of
# the bandwidth kernel with one QP x 64 threads (ncu --clock-control none).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
T=.devcarry/t
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv | tee $OUT/gpu.txt
timeout 60 $T/gv_probe_costs 2>&1 | tee $OUT/probe-costs.txt
for b in 64 256; do timeout 60 $T/gv_probe_path --batch $b 2>&1; done > $OUT/probe-path.txt
for i in 1 2; do timeout 30 $T/gv_write_bw -s 8 -q 1 -t 64 -n 4096 --reps 3 2>&1 | tail -2; done | tee $OUT/bw1q.txt
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
if [ -n "$NCU" ]; then
  timeout 300 $NCU --clock-control none --set full --import-source no -k regex:bw_kernel -c 1 -f -o $OUT/bw1q \
    $T/gv_write_bw -s 8 -q 1 -t 64 -n 4096 > $OUT/ncu-run.txt 2>&1; echo "ncu rc $?"
  tail -5 $OUT/ncu-run.txt
  $NCU -i $OUT/bw1q.ncu-rep --page source --csv --print-source sass > $OUT/bw1q-sass.csv 2>&1
  $NCU -i $OUT/bw1q.ncu-rep --page details > $OUT/bw1q-details.txt 2>&1
  ls -la $OUT
fi
