#!/bin/bash
# Before/after check of a change on one machine in one session: runs the same short list of
# benchmarks with two or more builds' tools, interleaved (A, B, ..., A, B, ...) so that drift of
# the machine hits every build alike, and prints one line per case with every build's median and
# its ratio to the first build's. One build alone gets its medians (and every run) only.
#   bench/compare.sh A_BIN_DIR B_BIN_DIR [OUT_DIR=bench/compare] [REPS=3]
#   bench/compare.sh [--out DIR] [--reps N] [--cases FILE] NAME=BIN_DIR [NAME=BIN_DIR...]
# BIN_DIR: a build's tools folder (build/tools), or any folder holding its gv_* binaries (the
# first form names the builds a and b). --cases FILE: one case per line (a tool and its options,
# as below; blank lines and lines starting with # are skipped) instead of the built-in list.
# Writes OUT_DIR/NAME.jsonl per build (each line: the case, the round, the tool's --json line),
# OUT_DIR/compare.log (everything the tools printed) and prints the table (also to
# OUT_DIR/compare.txt). Exits 1 when a run failed. The built-in cases need a GPU; about 3 minutes
# on an H200 with REPS=3.
set -uo pipefail
usage() {
    grep '^#   bench/compare.sh' "$0" | sed 's/^#   /usage: /' >&2
    exit 2
}
OUT=bench/compare
REPS=3
CASES_FILE=
NAMES=()
DIRS=()
if [[ $# -ge 2 && ${1:-} != --* && ${1:-} != *=* ]]; then  # the first form
    NAMES=(a b)
    DIRS=("$1" "$2")
    OUT=${3:-$OUT}
    REPS=${4:-$REPS}
else
    while (( $# )); do
        case $1 in
            --out) OUT=${2:?--out needs a folder}; shift 2 ;;
            --reps) REPS=${2:?--reps needs a count}; shift 2 ;;
            --cases) CASES_FILE=${2:?--cases needs a file}; shift 2 ;;
            *=*) NAMES+=("${1%%=*}"); DIRS+=("${1#*=}"); shift ;;
            *) echo "compare.sh: not understood: $1" >&2; usage ;;
        esac
    done
fi
(( ${#NAMES[@]} >= 1 )) || { echo "compare.sh: name at least one build (NAME=BIN_DIR)" >&2; usage; }
[[ $REPS =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: REPS must be a positive whole number, not '$REPS'" >&2; exit 2; }
for i in "${!NAMES[@]}"; do
    [[ ${NAMES[$i]} =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "compare.sh: a build's name may use letters, digits, _ . - only: '${NAMES[$i]}'" >&2; exit 2; }
    [ -d "${DIRS[$i]}" ] || { echo "compare.sh: ${NAMES[$i]}: no folder ${DIRS[$i]}" >&2; exit 2; }
    for ((j = 0; j < i; ++j)); do
        [[ ${NAMES[$j]} != "${NAMES[$i]}" ]] || { echo "compare.sh: two builds are named '${NAMES[$i]}' (each needs its own name: its runs go to NAME.jsonl)" >&2; exit 2; }
    done
done

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
if [ -n "$CASES_FILE" ]; then
    [ -r "$CASES_FILE" ] || { echo "compare.sh: cannot read $CASES_FILE" >&2; exit 2; }
    CASES=()
    while IFS= read -r line || [ -n "$line" ]; do
        [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
        CASES+=("$line")
    done < "$CASES_FILE"
    (( ${#CASES[@]} )) || { echo "compare.sh: $CASES_FILE lists no case" >&2; exit 2; }
fi

mkdir -p "$OUT"
for n in "${NAMES[@]}"; do : > "$OUT/$n.jsonl"; done
LOG="$OUT/compare.log"
: > "$LOG"
failed=0

run() {  # run NAME BIN_DIR CASE: one JSON line to NAME.jsonl, tagged with the case and round
    local side=$1 dir=$2 c=$3
    echo "+ [$side] $c" >> "$LOG"
    # The tool's own exit status (a pipeline's would be grep's when the tool printed no JSON).
    local rc out line
    # shellcheck disable=SC2086  # the case is a list of words
    out=$(timeout 120 "$dir"/$c --json 2>>"$LOG")
    rc=$?
    [ -n "$out" ] && printf '%s\n' "$out" >> "$LOG"
    line=$(grep '^{' <<< "$out" | tail -n 1)
    if (( rc != 0 )) || [ -z "$line" ]; then
        echo "FAILED (exit $rc): [$side] $c" | tee -a "$LOG"
        failed=$((failed + 1))
        return
    fi
    printf '{"case":"%s","rep":%d,"result":%s}\n' "$c" "$rep" "$line" >> "$OUT/$side.jsonl"
}

for ((rep = 0; rep < REPS; ++rep)); do
    for c in "${CASES[@]}"; do
        for i in "${!NAMES[@]}"; do run "${NAMES[$i]}" "${DIRS[$i]}" "$c"; done
    done
done

python3 - "$OUT" "${NAMES[@]}" <<'EOF' | tee "$OUT/compare.txt"
import json, statistics, sys
out, names = sys.argv[1], sys.argv[2:]
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
runs = {n: load(f"{out}/{n}.jsonl") for n in names}
cases = [c for c in runs[names[0]] if all(c in runs[n] for n in names[1:])]
head = f"{'case':<58} {'unit':<13}" + "".join(f" {n + ' median':>12}" for n in names)
head += "".join(f" {n + '/' + names[0]:>10}" for n in names[1:]) + "   (every run, by build)"
print(head)
for c in cases:
    unit = runs[names[0]][c][0]
    med = [statistics.median(runs[n][c][1]) for n in names]
    row = f"{c:<58} {unit:<13}" + "".join(f" {m:>12.3f}" for m in med)
    row += "".join(f" {(m / med[0] if med[0] else float('nan')):>10.3f}" for m in med[1:])
    print(row + "   " + " ".join(str(runs[n][c][1]) for n in names))
EOF
echo "$failed failed"
(( failed == 0 ))
