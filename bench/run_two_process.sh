#!/bin/bash
# Runs the benchmarks' two-process variant on a machine with a GPU: for each case a server
# (`--server`) in the background and a client (the initiator, which measures) in front, both
# on GPU 0 and bounded in time, every log kept. See docs/performance.md, "Two processes".
#   bench/run_two_process.sh [BIN_DIR=build/tools] [OUT_DIR=bench/results]
# Writes OUT_DIR/results-two-process.jsonl (the clients' JSON lines, "mode":"two-process") and
# OUT_DIR/two-process/NN-BENCH.{server,client}.log. Exits non-zero when any case failed.
# The tools start the MPS control daemon when it is not running (gv::mps::ensure); this script
# stops it again at the end in that case, so later single-process runs are not MPS clients.
# Environment: GV_BENCH_PORT (default 18515), GV_BENCH_LIMIT (seconds per process, default 300).
set -uo pipefail
BIN=${1:-build/tools}
OUT=${2:-bench/results}
PORT=${GV_BENCH_PORT:-18515}
LIMIT=${GV_BENCH_LIMIT:-300}
LOGS="$OUT/two-process"
mkdir -p "$LOGS"
J="$OUT/results-two-process.jsonl"
: > "$J"

mps_up() { echo get_server_list | timeout 5 nvidia-cuda-mps-control > /dev/null 2>&1; }
mps_before=0
command -v nvidia-cuda-mps-control > /dev/null && mps_up && mps_before=1
stop_mps() {
    if (( !mps_before )) && command -v nvidia-cuda-mps-control > /dev/null && mps_up; then
        echo quit | timeout 10 nvidia-cuda-mps-control && echo "stopped the MPS daemon the tools had started"
    fi
}
trap stop_mps EXIT

n=0
failed=0
# pair BENCH ARGS...: the server of BENCH in the background, the client with ARGS in front
# shellcheck source=bench/pair.sh
source "$(dirname "${BASH_SOURCE[0]}")/pair.sh"
PAIR_SERVER_ARGS=()
PAIR_CLIENT_ARGS=()
pair() { run_pair "$J" "$@"; }

# WRITE and READ bandwidth at the loopback suite's shape (264 QPs x 512 threads).
for s in 8 4096 65536 1048576; do
    it=$(( (1 << 30) / (s * 264) )); (( it < 32 )) && it=32; (( it > 8192 )) && it=8192
    pair gv_write_bw -s $s -q 264 -t 512 -n $it --reps 3
done
for s in 65536 1048576; do
    it=$(( (1 << 30) / (s * 264) )); (( it < 32 )) && it=32
    pair gv_read_bw -s $s -q 264 -t 512 -n $it --reps 3
done
# One QP, and the 8-byte message rate at a few QP counts.
pair gv_write_bw -s 1048576 -q 1 -t 512 -n 256 --reps 3
for q in 1 66 264; do
    pair gv_write_bw -s 8 -q $q -t 64 -n 4096 --reps 3
done
# SEND: the server posts and consumes the receives.
pair gv_send_bw -s 4096 -q 64 -t 256 -n 4096 --reps 3
# Latency: both processes ping-pong.
pair gv_write_lat -s 8 -n 10000
pair gv_write_lat -s 64 -n 10000
pair gv_write_lat -s 1024 -n 10000

echo "two-process: $n cases, $failed failed; results: $J ($(wc -l < "$J") measurements), logs in $LOGS"
(( failed == 0 ))
