#!/bin/bash
# Session 26, device call 3 (carried builds, cmake Release, nvcc 13.0, sm_90, built on the
# development machine): B0x = main 5dd3664 + gv_write_bw --rx-rounds; R3 = the send-runs branch
# (3458a62: receivers repost after each round, as --rx-rounds 1); R4 = R3 + the group's RNR wait
# (await_receive) + --rx-rounds. T = R4's GPU test binaries.
#  1. T: gv_gpu_tests, gv_gpu_traffic_tests, each whole in one process (failures again alone).
#  2. late receivers (--rx-rounds 1): SEND 4 KiB, B0x / R3 / R4 alternating, 3 rounds.
#  3. bench/compare.sh B0x against R4 (receivers a round ahead), 3 rounds, d4-cases.txt.
set -u
S=$OUT/summary.txt
D=docs/perf-logs/2026-12-05-session26
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S 2>&1
if [ -d .devcarry/T ]; then
  for t in gv_gpu_tests gv_gpu_traffic_tests; do
    timeout ${GV_TEST_LIMIT:-200} .devcarry/T/$t > $OUT/$t.log 2>&1
    echo "$t exit $? at ${SECONDS} s" >> $S
    grep -E '^\[  PASSED|^\[  FAILED|tests ran|^\[  SKIPPED' $OUT/$t.log | head -20 >> $S
    for f in $(grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/$t.log | grep -v ' listed below' | awk '{print $4}' | sort -u); do
      timeout 60 .devcarry/T/$t --gtest_filter="$f" > $OUT/$t-alone-$f.log 2>&1
      echo "  alone: $f exit $?" >> $S
    done
  done
fi
pick() { grep -o '"bw_peak_GBps":[0-9.]*,"bw_avg_GBps":[0-9.]*,"msg_rate_Mpps":[0-9.]*'; }
for args in "--op send -s 4096 -q 64 -t 256 -n 4096" "--op send -s 4096 -q 66 -t 512 -n 4096"; do
  for r in 1 2 3; do
    echo "[B0x rx1] $args: $(timeout 60 .devcarry/B0x/gv_write_bw $args --rx-rounds 1 --json 2>&1 | pick)" >> $S
    echo "[R3  old] $args: $(timeout 60 .devcarry/R3/gv_write_bw $args --json 2>&1 | pick)" >> $S
    echo "[R4  rx1] $args: $(timeout 60 .devcarry/R4/gv_write_bw $args --rx-rounds 1 --json 2>&1 | pick)" >> $S
  done
  echo "late receivers done at ${SECONDS} s" >> $S
done
left=$((${GV_DEADLINE:-560} - SECONDS))
if [ $left -gt 30 ]; then
  timeout $left bench/compare.sh --out $OUT/cmp --reps 3 --cases $D/d4-cases.txt B0x=.devcarry/B0x R4=.devcarry/R4 >> $S 2>&1
  echo "compare exit $? at ${SECONDS} s" >> $S
fi
