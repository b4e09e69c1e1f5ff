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
pair() {  # pair BENCH ARGS...: the server of BENCH in the background, the client with ARGS in front
    n=$((n + 1))
    local tag slog clog spid crc src
    tag=$(printf '%02d-%s' "$n" "$1")
    slog="$LOGS/$tag.server.log"
    clog="$LOGS/$tag.client.log"
    echo "+ $1 --server --port $PORT --timeout 60" > "$slog"
    echo "+ $* --port $PORT --timeout 60 --json 127.0.0.1" > "$clog"
    timeout -k 10 "$LIMIT" "$BIN/$1" --server --port "$PORT" --timeout 60 >> "$slog" 2>&1 &
    spid=$!
    # The server listens (after gv::mps::ensure: MPS is up for the client) once it says so.
    for _ in $(seq 300); do
        grep -q 'waiting up to' "$slog" && break
        kill -0 "$spid" 2> /dev/null || break
        sleep 0.1
    done
    if ! grep -q 'waiting up to' "$slog"; then
        kill "$spid" 2> /dev/null
        wait "$spid"
        echo "FAILED: $tag: the server did not start (see $slog)"
        failed=$((failed + 1))
        return
    fi
    timeout -k 10 "$LIMIT" "$BIN/$1" "${@:2}" --port "$PORT" --timeout 60 --json 127.0.0.1 >> "$clog" 2>&1
    crc=$?
    wait "$spid"
    src=$?
    grep '^{' "$clog" >> "$J"
    if (( crc || src )); then
        echo "FAILED: $tag (client exit $crc, server exit $src): see $clog and $slog"
        failed=$((failed + 1))
    else
        echo "ok: $tag $*"
    fi
}

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
