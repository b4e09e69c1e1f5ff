#!/bin/bash
# Session 38's device call: the leader's warp executing runs of same-shape WQEs (W: branch
# warp-run2; its patch is ../2026-12-07-session39/warp-run2.patch) against main (M), both built on the development machine (CMake
# Release, sm_90) and carried as .devcarry/m.tar.xz (gv_write_bw, gv_probe_costs, gv_probe_path)
# and .devcarry/w.tar.xz (gv_write_bw, gv_read_bw, gv_probe_costs with the drain rows, gv_gpu_tests). Usage: bash call.sh MODE
#   measure  gv_probe_costs' drain rows (W's: the rows are in the patch), W's new GPU tests, bench/compare.sh of M and W
#            (two interleaved runs), W's other gv_gpu_tests (about 250 s)
#   full     measure, then the README's test command on the tree (W checked out), the sanitizer
#            tree left to CI (about 500 s)
#   quick    measure with three cases (latency, one QP, 66 QPs) and no other tests (about 100 s)
#   ncu      Nsight Compute's per-instruction stall samples of the bandwidth kernel (M's; W's with NCU_BUILD=w), one QP x 64
#            threads (ncu --clock-control none; the CSV of the source page)
set -u
MODE=${1:?usage: call.sh measure|full|quick|ncu}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for f in m w; do [ -f .devcarry/$f.tar.xz ] && mkdir -p .devcarry/$f && tar xJf .devcarry/$f.tar.xz -C .devcarry/$f; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv | tee $OUT/gpu.txt
if [ "$MODE" = ncu ]; then
  NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  echo "ncu: $NCU"
  timeout 300 $NCU --clock-control none --set full --import-source no -k regex:bw_kernel -c 1 -f -o $OUT/bw1q-${NCU_BUILD:-m} \
    .devcarry/${NCU_BUILD:-m}/gv_write_bw -s 8 -q 1 -t 64 -n 2048 > $OUT/ncu-run.txt 2>&1; echo "ncu rc $?"
  $NCU -i $OUT/bw1q-${NCU_BUILD:-m}.ncu-rep --page source --csv --print-source sass > $OUT/bw1q-${NCU_BUILD:-m}-sass.csv 2>&1
  exit 0
fi
timeout 60 .devcarry/w/gv_probe_costs 2>&1 | tee $OUT/probe-costs.txt
timeout 120 .devcarry/w/gv_gpu_tests --gtest_filter='GpuWarpRun.*' 2>&1 | tail -25 | tee $OUT/w-tests-new.txt
cat > /tmp/cases.txt <<'C'
gv_write_bw --lat -s 8 -n 10000
gv_write_bw -s 8 -q 1 -t 64 -n 4096 --reps 3
gv_write_bw -s 32 -q 1 -t 256 -n 4096 --reps 3
gv_write_bw -s 8 -q 66 -t 64 -n 4096 --reps 3
gv_write_bw -s 8 -q 264 -t 64 -n 4096 --reps 3
gv_write_bw -s 4096 -q 264 -t 512 -n 64 --reps 3
C
[ "$MODE" = quick ] && sed -i '/-s 32 -q 1\|-q 264/d' /tmp/cases.txt
timeout 200 bash bench/compare.sh --out $OUT/cmp --reps 2 --cases /tmp/cases.txt M=.devcarry/m W=.devcarry/w 2>&1 | tail -14 | tee $OUT/cmp.txt
if [ "$MODE" = full ]; then
  rm -rf .devcarry/m .devcarry/w
  GV_SKIP_SANITIZERS=1 timeout 420 scripts/run_tests.sh > $OUT/run_tests.log 2>&1; echo "run_tests rc $?"
  grep -E "tests passed|tests failed|Total Test time|FAILED|\*\*\*" $OUT/run_tests.log | tail -30
elif [ "$MODE" = measure ]; then
  timeout 150 .devcarry/w/gv_gpu_tests --gtest_filter='-GpuWarpRun.*' 2>&1 | tail -8 | tee $OUT/w-tests-rest.txt
fi
