#!/bin/bash
# Session 37, diagnosis: W's gv_write_bw built with GV_WARP_RUN_DEBUG (device printf at the hand-off
# and at warp_run's end, the first 12 of each).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
tar xJf .devcarry/s37d.tar.xz -C .devcarry
timeout 30 .devcarry/s37d/gv_write_bw -s 8 -q 1 -t 64 -n 256 2>&1 | head -40 | tee $OUT/dbg1.txt
timeout 30 .devcarry/s37d/gv_write_bw -s 8 -q 1 -t 64 -n 4096 --reps 3 2>&1 | tail -4 | tee $OUT/dbg2.txt
