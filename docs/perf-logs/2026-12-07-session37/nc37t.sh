#!/bin/bash
# Session 37, last short call: M against W (compare.sh, 2 runs of cases7.txt), then W's GPU test
# binaries (built on the development machine by the fresh-clone CI of warp-fast 1903ef7) within
# LIMIT seconds in all.
set -u
LIMIT=${1:-230}
S=$OUT/summary.txt
for f in s35m s37w s37wt; do tar xJf .devcarry/$f.tar.xz -C .devcarry || echo "untar $f failed" >> $S; done
echo "start $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader)" >> $S
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
timeout 60 bash bench/compare.sh --out $OUT/cmp --reps 2 --cases .devcarry/cases7.txt M=.devcarry/s35m W=.devcarry/s37w > $OUT/cmp.txt 2>&1
echo "compare exit $? at ${SECONDS} s" >> $S
tail -8 $OUT/cmp.txt | cut -c1-200 >> $S
cp $OUT/cmp/*.jsonl $OUT/ 2>/dev/null; tar czf $OUT/cmp.tgz -C $OUT cmp && rm -rf $OUT/cmp
run() {  # run NAME FILTER TAG
  local left=$((LIMIT - 3 - SECONDS)) log=$OUT/$1-$3.log
  (( left > 5 )) || { echo "no time left for $1 $2" >> $S; return; }
  timeout $left .devcarry/s37wt/$1 --gtest_brief=1 --gtest_filter="$2" > $log 2>&1
  echo "$1 ($2) exit $? at ${SECONDS} s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $log | tr '\n' ' ')" >> $S
  grep -E '^\[  FAILED' $log | head -20 >> $S
}
run gv_gpu_tests 'GpuProperties.RcOrderingSameShape*:GpuPlanAhead.LostCompletionEndsAWarpRun' new
run gv_gpu_traffic_tests '*' all
run gv_gpu_tests '-GpuProperties.RcOrderingSameShape*:GpuPlanAhead.LostCompletionEndsAWarpRun' rest
run gv_mlx5_gpu_tests '*' all
cat $S
