#!/bin/bash
# One VM boot: bench/verbs_vs_perftest.sh (all rows; ours in two processes) with the tools'
# proxy sleep bound (100 ms: "new") and with the library's (100 us, GV_PT_OURS_ARGS: "old"),
# in the order given (default: new old). Run from the checkout's root:
#   LAB=build-cpu/rdma-vm tools/rdma-vm/run.sh exec "$PWD" -- bash docs/perf-logs/2026-12-05-session22/vs-sleep.sh NAME [new old ...]
set -u
name=$1
shift
[ $# = 0 ] && set -- new old
k=0
for v in "$@"; do
    k=$((k + 1))
    out=docs/perf-logs/2026-12-05-session22/$name/$k-$v
    if [ "$v" = old ]; then
        GV_PT_OURS_ARGS="--proxy-idle-sleep-us 100" bench/verbs_vs_perftest.sh build-cpu/tools "$out" 2>&1 | grep '^#'
    else
        bench/verbs_vs_perftest.sh build-cpu/tools "$out" 2>&1 | grep '^#'
    fi
done
