#!/bin/bash
# Session 26, device call 5 (the last of the session's device time): R5 = 8c28822 (runs, the
# group's RNR wait with the act fix, --rx-rounds) against B0x, SEND 4 KiB, late receivers
# (--rx-rounds 1) and receivers a round ahead (2). Each run bounded (a hang shows as exit 124).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib
pick() { grep -o '"bw_peak_GBps":[0-9.]*,"bw_avg_GBps":[0-9.]*' || echo "no result"; }
nvidia-smi --query-gpu=name --format=csv,noheader
for rx in 1 2; do
  for a in "-q 64 -t 256 -n 4096" "-q 66 -t 512 -n 4096"; do
    for b in B0x R5 R5; do
      echo "[$b rx$rx] $a: $(timeout 15 .devcarry/$b/gv_write_bw --op send -s 4096 $a --rx-rounds $rx --json 2>&1 | pick) ($SECONDS s)"
    done
  done
done
