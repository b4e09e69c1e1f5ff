#!/bin/bash
# Session 26's last device call, not run (no device time left); for the next session: R5 = 8c28822
# (runs, the group's RNR wait with the act fix, --rx-rounds), R6 = d7e8d37 (R5 + no run offer after
# a small SEND) against B0x: SEND 4 KiB with late receivers (--rx-rounds 1) and receivers a round
# ahead (2), then SEND 64 B. Each run bounded (a hang shows as "no result" after 15 s).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib
pick() { grep -o '"bw_peak_GBps":[0-9.]*,"bw_avg_GBps":[0-9.]*' || echo "no result"; }
nvidia-smi --query-gpu=name --format=csv,noheader
for rx in 1 2; do
  for a in "-q 64 -t 256 -n 4096" "-q 66 -t 512 -n 4096"; do
    for b in B0x R5 R6; do
      echo "[$b rx$rx] $a: $(timeout 15 .devcarry/$b/gv_write_bw --op send -s 4096 $a --rx-rounds $rx --json 2>&1 | pick) ($SECONDS s)"
    done
  done
done
for b in B0x R5 R6 B0x R5 R6; do
  echo "[$b] SEND 64 B 64 x 256: $(timeout 15 .devcarry/$b/gv_write_bw --op send -s 64 -q 64 -t 256 -n 4096 --json 2>&1 | grep -o '"msg_rate_Mpps":[0-9.]*' || echo "no result") ($SECONDS s)"
done
