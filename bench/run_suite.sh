#!/bin/bash
# Runs the benchmark suite on a machine with a GPU and draws the plots.
#   bench/run_suite.sh [--two-process] [BIN_DIR=build/tools] [OUT_DIR=bench/results]
# Writes OUT_DIR/results.jsonl (one JSON object per measurement), OUT_DIR/suite.log and
# PNG plots (bench/plot.py). Takes under a minute on an H200 (29 s on 2026-12-06; the two-process half 7 s more).
# --two-process: afterwards, also the two-process variant (bench/run_two_process.sh: a server
# and a client process per case; OUT_DIR/results-two-process.jsonl, logs in OUT_DIR/two-process/).
# Last, bench/targets.py prints where the run stands against the speed targets (OUT_DIR/targets.txt).
set -uo pipefail
TWO_PROCESS=0
if [[ ${1:-} == --two-process ]]; then
    TWO_PROCESS=1
    shift
fi
BIN=${1:-build/tools}
OUT=${2:-bench/results}
mkdir -p "$OUT"
J="$OUT/results.jsonl"
LOG="$OUT/suite.log"
: > "$J"
: > "$LOG"
failed=0
run() {  # run BENCH ARGS...: JSON lines to results.jsonl, everything to the log
    echo "+ $*" >> "$LOG"
    timeout 120 "$BIN/$1" "${@:2}" --json 2>>"$LOG" | tee -a "$LOG" | grep '^{' >> "$J"
    local rc=${PIPESTATUS[0]}
    if (( rc != 0 )); then  # the tools exit non-zero (and print no numbers) when anything failed
        echo "FAILED (exit $rc): $*  (see $LOG)"
        failed=$((failed + 1))
    fi
}
# WRITE bandwidth by size, GPU-initiated (264 QPs = 2 blocks per SM) and CPU-initiated.
for s in 8 64 512 4096 32768 262144 1048576; do
    n=$(( (1 << 30) / (s * 264) )); (( n < 32 )) && n=32; (( n > 8192 )) && n=8192
    run gv_write_bw -s $s -q 264 -t 512 -n $n --reps 3
    run gv_read_bw -s $s -q 264 -t 512 -n $n --reps 3
done
run gv_write_bw -s 8388608 -q 66 -t 512 -n 16 --reps 3
# GPU- against CPU-initiated at the same QP count and post list.
for s in 8 512 4096 65536 1048576; do
    n=$(( (1 << 28) / (s * 4) )); (( n < 64 )) && n=64; (( n > 4096 )) && n=4096
    run gv_write_bw --initiator cpu -s $s -q 4 -t 64 -n $n --reps 2
    run gv_write_bw --initiator gpu -s $s -q 4 -t 64 -n $n --reps 2
done
run gv_write_bw -s 1048576 -q 1 -t 512 -n 256 --reps 3
# 8-byte message rate by QP count (one block per QP).
for q in 1 8 66 132 264 528 1056; do
    run gv_write_bw -s 8 -q $q -t 64 -n 4096 --reps 3
done
# Latency.
run gv_write_lat -s 8 -n 10000
run gv_write_lat -s 64 -n 10000
run gv_write_lat -s 1024 -n 10000
# Posting rate and compute-then-send.
run gv_post_rate
run gv_post_rate --mem host -q 132
run gv_compute_send -n 1000
# Last, since the two-process tools may start MPS (the script stops it again if they did).
if (( TWO_PROCESS )); then
    echo "+ two-process variant (bench/run_two_process.sh)" >> "$LOG"
    "$(dirname "$0")/run_two_process.sh" "$BIN" "$OUT" 2>&1 | tee -a "$LOG"
    (( PIPESTATUS[0] == 0 )) || failed=$((failed + 1))
fi
python3 "$(dirname "$0")/plot.py" "$J" "$OUT" >> "$LOG" 2>&1 || echo "plotting failed (see $LOG)"
# Where this run stands against the speed targets (docs/performance.md's table): targets.txt.
# The files named, not the folder: a results-two-process.jsonl left by an earlier run with
# --two-process must not count as this run's.
targets=("$J")
(( TWO_PROCESS )) && targets+=("$OUT/results-two-process.jsonl")
python3 "$(dirname "$0")/targets.py" "${targets[@]}" > "$OUT/targets.txt" 2>> "$LOG" && cat "$OUT/targets.txt" ||
    echo "targets.py failed (see $LOG)"
echo "results: $J ($(wc -l < "$J") measurements), plots in $OUT; $failed failed"
(( failed == 0 ))
