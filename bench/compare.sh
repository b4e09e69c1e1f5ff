#!/bin/bash
# Before/after check of a change on one machine in one session: runs the same short list of
# benchmarks with two builds' tools, interleaved (A, B, A, B, ...) so that drift of the
# machine hits both alike, and prints one line per case with both medians.
#   bench/compare.sh A_BIN_DIR B_BIN_DIR [OUT_DIR=bench/compare] [REPS=3]
# A_BIN_DIR / B_BIN_DIR: the build/tools folders of the two builds (e.g. the parent commit's
# and this one's). Writes OUT_DIR/a.jsonl, OUT_DIR/b.jsonl, OUT_DIR/compare.log and prints the
# table (also to OUT_DIR/compare.txt). Needs a GPU; about 3 minutes on an H200 with REPS=3.
set -uo pipefail
A=${1:?usage: bench/compare.sh A_BIN_DIR B_BIN_DIR [OUT_DIR] [REPS]}
B=${2:?usage: bench/compare.sh A_BIN_DIR B_BIN_DIR [OUT_DIR] [REPS]}
OUT=${3:-bench/compare}
REPS=${4:-3}
mkdir -p "$OUT"
: > "$OUT/a.jsonl"
: > "$OUT/b.jsonl"
LOG="$OUT/compare.log"
: > "$LOG"
failed=0

# The cases: what each issue's targets name (latency, small-message rate on one and many
# QPs, large-message bandwidth against the memcpy ceiling, SEND, CPU-initiated on a GPU).
CASES=(
    "gv_write_lat -s 8 -n 10000"
    "gv_write_bw -s 8 -q 1 -t 64 -n 4096 --reps 3"
    "gv_write_bw -s 8 -q 66 -t 64 -n 4096 --reps 3"
    "gv_write_bw -s 8 -q 264 -t 64 -n 4096 --reps 3"
    "gv_send_bw -s 4096 -q 64 -t 256 -n 1024 --reps 3"
    "gv_write_bw -s 65536 -q 264 -t 512 -n 64 --reps 3"
    "gv_write_bw -s 1048576 -q 264 -t 512 -n 32 --reps 3"
    "gv_read_bw -s 1048576 -q 264 -t 512 -n 32 --reps 3"
    "gv_write_bw --initiator cpu -s 8 -q 4 -t 64 -n 4096 --reps 2"
)

run() {  # run SIDE BIN_DIR CASE: one JSON line to SIDE.jsonl, tagged with the case
    local side=$1 dir=$2 c=$3
    echo "+ [$side] $c" >> "$LOG"
    # shellcheck disable=SC2086  # the case is a list of words
    local line
    line=$(timeout 120 "$dir"/$c --json 2>>"$LOG" | tee -a "$LOG" | grep '^{' | tail -n 1)
    local rc=${PIPESTATUS[0]}
    if (( rc != 0 )) || [ -z "$line" ]; then
        echo "FAILED (exit $rc): [$side] $c" | tee -a "$LOG"
        failed=$((failed + 1))
        return
    fi
    printf '{"case":"%s","rep":%d,"result":%s}\n' "$c" "$rep" "$line" >> "$OUT/$side.jsonl"
}

for ((rep = 0; rep < REPS; ++rep)); do
    for c in "${CASES[@]}"; do
        run a "$A" "$c"
        run b "$B" "$c"
    done
done

python3 - "$OUT/a.jsonl" "$OUT/b.jsonl" <<'EOF' | tee "$OUT/compare.txt"
import json, statistics, sys
def load(p):
    d = {}
    for line in open(p):
        r = json.loads(line)
        res = r["result"]
        if "t_typical" in res:
            v, unit = res["t_typical"], "us t_typical"
        elif res.get("bytes", 0) <= 64:
            v, unit = res["msg_rate_Mpps"], "M msg/s"
        else:
            v, unit = res["bw_avg_GBps"], "GB/s"
        d.setdefault(r["case"], (unit, []))[1].append(v)
    return d
a, b = load(sys.argv[1]), load(sys.argv[2])
print(f"{'case':<58} {'unit':<13} {'A median':>10} {'B median':>10} {'B/A':>7}   (A, B runs)")
for c in a:
    if c not in b:
        continue
    unit, va = a[c]
    vb = b[c][1]
    ma, mb = statistics.median(va), statistics.median(vb)
    ratio = mb / ma if ma else float("nan")
    print(f"{c:<58} {unit:<13} {ma:>10.3f} {mb:>10.3f} {ratio:>7.3f}   {va} {vb}")
EOF
echo "$failed failed"
(( failed == 0 ))
