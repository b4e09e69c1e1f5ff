#!/bin/bash
# The README test command, then the figures quoted in docs/performance.md from its build.
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
GV_SKIP_SANITIZERS=1 scripts/run_tests.sh > $OUT/run_tests.log 2>&1; rc=$?
el "run_tests rc=$rc"
grep -E "tests passed|tests failed|all tests passed|FAILED|SKIP|Failed|\(Timeout\)" $OUT/run_tests.log | tail -25
T=build/tools
if [ -x $T/gv_probe_path ]; then
  $T/gv_probe_path > $OUT/probe.txt 2>&1; grep -iE "total|cqe" $OUT/probe.txt | head -6
  for i in 1 2 3; do $T/gv_write_lat -s 8 -n 10000 --json 2>&1 | grep '^{'; done > $OUT/lat.jsonl; cat $OUT/lat.jsonl | cut -c1-200
  $T/gv_post_rate --mem host -q 264 --json > $OUT/post_host.jsonl 2>&1; cat $OUT/post_host.jsonl
  $T/gv_post_rate --mem device -q 528 --json > $OUT/post_dev.jsonl 2>&1
  timeout 60 $T/gv_proxy_rate --posters gpu --proxy-threads 1 --qps 32 > $OUT/proxy_rate.txt 2>&1; tail -3 $OUT/proxy_rate.txt
  for c in "gv_write_bw -s 8 -q 1 -t 64 -n 4096" "gv_write_bw -s 65536 -q 264 -t 512 -n 64" "gv_send_bw -s 4096 -q 64 -t 256 -n 1024"; do
    timeout 60 $T/$c --json 2>&1 | grep '^{' >> $OUT/bw.jsonl; done; cat $OUT/bw.jsonl | cut -c1-220
fi
el "done"
# The CPU doorbells' board (branch cpulaunch, built on the dev machine): its GPU tests and rate.
CL=.devcarry/cl
timeout 90 $CL/gv_gpu_tests --gtest_filter='CpuDoorbells.*:GpuDataPath.Cpu*:GpuDataPath.QueuesInHostMemory:GpuProperties.DeviceSynchronizeReturnsPromptly' > $OUT/cl_gpu_tests.log 2>&1
echo "cl gv_gpu_tests rc=$?: $(grep -E '^\[  (PASSED|FAILED) \]' $OUT/cl_gpu_tests.log | tr '\n' ' ')"; grep -E "^\[  FAILED  \]" $OUT/cl_gpu_tests.log | head
timeout 90 $CL/gv_gpu_traffic_tests --gtest_filter='*soft_gpu_cpu_initiator*' > $OUT/cl_traffic.log 2>&1
echo "cl traffic rc=$?: $(grep -E '^\[  (PASSED|FAILED) \]' $OUT/cl_traffic.log | tr '\n' ' ')"; grep -E "^\[  FAILED  \]" $OUT/cl_traffic.log | head
for c in "-s 8 -q 4 -t 64 -n 4096" "-s 4096 -q 4 -t 64 -n 4096"; do for r in 1 2; do
  timeout 40 .devcarry/bin/gv_write_bw_main --initiator cpu $c --json 2>&1 | grep '^{' | sed 's/^{/{"side":"main",/' >> $OUT/cl_bw.jsonl
  timeout 40 $CL/gv_write_bw --initiator cpu $c --json 2>&1 | grep '^{' | sed 's/^{/{"side":"board",/' >> $OUT/cl_bw.jsonl
done; done
cut -c1-200 $OUT/cl_bw.jsonl
el "all done"
