#!/bin/bash
# One VM boot: the SEND rows of bench/verbs_vs_perftest.sh with our bandwidth tools in two
# processes (as perftest), then in one process (loopback), then two processes again; REPEAT
# alternating runs each. Run from the checkout's root:
#   LAB=build-cpu/rdma-vm tools/rdma-vm/run.sh exec "$PWD" -- bash docs/perf-logs/2026-12-05-session22/send-modes.sh OUT_NAME
set -u
out=docs/perf-logs/2026-12-05-session22/${1:-send-modes}
export GV_PT_CASES=${GV_PT_CASES:-send} GV_PT_REPEAT=${GV_PT_REPEAT:-5}
GV_PT_BW_MODE=2p bench/verbs_vs_perftest.sh build-cpu/tools "$out/2p-a" 2>&1 | grep '^#'
GV_PT_BW_MODE=loopback bench/verbs_vs_perftest.sh build-cpu/tools "$out/loopback" 2>&1 | grep '^#'
GV_PT_BW_MODE=2p bench/verbs_vs_perftest.sh build-cpu/tools "$out/2p-b" 2>&1 | grep '^#'
