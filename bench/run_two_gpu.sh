#!/bin/bash
# The benchmarks across two GPUs of one host (docs/two-gpus.md, docs/performance.md "Two GPUs"):
# in loopback with --peer-gpu (responder QPs and target buffers on GPU 1, the initiators'
# kernels on GPU 0), and as two processes, one per GPU (server --gpu 1, client --gpu 0
# --peer-gpu 1), both off MPS (not needed: each process has its own GPU). Same-GPU loopback
# rows of the same run are the reference for the latency target. Every row of a peer-GPU run
# carries the same-run cudaMemcpyPeer ceiling between the two GPUs (memcpy_peer_GBps).
#   bench/run_two_gpu.sh [BIN_DIR=build/tools] [OUT_DIR=bench/results]
# Writes OUT_DIR/results-two-gpu-loopback.jsonl, OUT_DIR/results-two-gpu-two-process.jsonl
# and OUT_DIR/two-gpu/NN-BENCH*.log. Exit 77 (a skip) with fewer than two GPUs; non-zero when
# any case failed. Environment: GV_BENCH_PORT (default 18525), GV_BENCH_LIMIT (seconds per
# process, default 120).
set -uo pipefail
BIN=${1:-build/tools}
OUT=${2:-bench/results}
PORT=${GV_BENCH_PORT:-18525}
LIMIT=${GV_BENCH_LIMIT:-120}
LOGS="$OUT/two-gpu"
mkdir -p "$LOGS"
JL="$OUT/results-two-gpu-loopback.jsonl"
JP="$OUT/results-two-gpu-two-process.jsonl"
: > "$JL"
: > "$JP"
ngpu=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU ' || true)
if [ "${ngpu:-0}" -lt 2 ]; then
    echo "SKIP: needs two GPUs of one host (nvidia-smi lists ${ngpu:-0})"
    exit 77
fi
# An empty MPS control directory: no daemon answers there, so every process is a plain CUDA
# process (and --no-mps keeps the tools from starting one).
NOMPS=$(mktemp -d /tmp/gv-two-gpu-no-mps.XXXXXX)
export CUDA_MPS_PIPE_DIRECTORY="$NOMPS"
trap 'rmdir "$NOMPS" 2> /dev/null' EXIT

n=0
failed=0
one() {  # one BENCH ARGS...: a loopback case
    n=$((n + 1))
    local tag log
    tag=$(printf '%02d-%s' "$n" "$1")
    log="$LOGS/$tag.log"
    echo "+ $* --json" > "$log"
    if timeout -k 10 "$LIMIT" "$BIN/$1" "${@:2}" --json >> "$log" 2>&1; then
        echo "ok: $tag $*"
    else
        echo "FAILED: $tag $* (see $log)"
        failed=$((failed + 1))
    fi
    grep '^{' "$log" >> "$JL"
}
# pair BENCH ARGS...: server on GPU 1 in the background, client on GPU 0 with ARGS
# shellcheck source=bench/pair.sh
source "$(dirname "${BASH_SOURCE[0]}")/pair.sh"
PAIR_SERVER_ARGS=(--gpu 1 --no-mps)
PAIR_CLIENT_ARGS=(--gpu 0 --peer-gpu 1 --no-mps)
pair() { run_pair "$JP" "$@"; }

its() { local it=$(( (1 << 30) / ($1 * $2) )); (( it < 32 )) && it=32; (( it > 8192 )) && it=8192; echo $it; }

# The cases that answer the targets first (1 MiB bandwidth against the ceiling, 8-byte
# latency against the same-GPU figure), then two processes, then the other sizes.
one gv_write_bw -s 1048576 -q 264 -t 512 -n "$(its 1048576 264)" --reps 3
one gv_write_lat -s 8 -n 10000
one gv_write_bw -s 1048576 -q 264 -t 512 -n "$(its 1048576 264)" --reps 3 --peer-gpu 1
one gv_read_bw -s 1048576 -q 264 -t 512 -n "$(its 1048576 264)" --reps 3 --peer-gpu 1
one gv_send_bw -s 1048576 -q 64 -t 256 -n "$(its 1048576 64)" --reps 3 --peer-gpu 1
one gv_write_lat -s 8 -n 10000 --peer-gpu 1
# Two processes, one GPU each.
pair gv_write_bw -s 1048576 -q 264 -t 512 -n "$(its 1048576 264)" --reps 3
pair gv_read_bw -s 1048576 -q 264 -t 512 -n "$(its 1048576 264)" --reps 3
pair gv_send_bw -s 1048576 -q 64 -t 256 -n "$(its 1048576 64)" --reps 3
pair gv_write_lat -s 8 -n 10000
# Other sizes, loopback.
for s in 4096 65536; do
    one gv_write_bw -s $s -q 264 -t 512 -n "$(its $s 264)" --reps 3 --peer-gpu 1
done
one gv_read_bw -s 65536 -q 264 -t 512 -n "$(its 65536 264)" --reps 3 --peer-gpu 1
one gv_send_bw -s 65536 -q 64 -t 256 -n "$(its 65536 64)" --reps 3 --peer-gpu 1
for s in 64 1024; do
    one gv_write_lat -s $s -n 10000 --peer-gpu 1
done

echo "two-gpu: $n cases, $failed failed; results: $JL ($(wc -l < "$JL")), $JP ($(wc -l < "$JP")); logs in $LOGS"
(( failed == 0 ))
