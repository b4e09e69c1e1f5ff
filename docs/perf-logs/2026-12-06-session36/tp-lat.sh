#!/bin/bash
# Two-process gv_write_bw --lat for several builds, interleaved: tp-lat.sh OUT REPS NAME=DIR...
set -uo pipefail
OUT=$1; REPS=$2; shift 2
mkdir -p "$OUT"
PORT=18600; LIMIT=60; LOGS=$OUT/logs; mkdir -p "$LOGS"; n=0; failed=0
source bench/pair.sh
PAIR_SERVER_ARGS=(); PAIR_CLIENT_ARGS=()
for r in $(seq 1 "$REPS"); do
  for nd in "$@"; do
    name=${nd%%=*}; BIN=${nd#*=}
    for s in 8 64; do
      PORT=$((PORT + 1))
      run_pair "$OUT/$name.jsonl" gv_write_bw --lat -s $s -n 10000
    done
  done
done
echo "tp-lat: $n cases, $failed failed"
for nd in "$@"; do name=${nd%%=*}; echo "== $name"; grep -o '"bytes":[0-9]*\|"t_typical":[0-9.]*' "$OUT/$name.jsonl" | paste -sd" " ; done
echo quit | timeout 10 nvidia-cuda-mps-control 2>/dev/null
