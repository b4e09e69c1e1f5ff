#!/bin/bash
# The WRITE latency alone, perftest's ib_write_lat and gv_write_lat variants alternating in
# rounds, in one boot of the Soft-RoCE VM: one line per round with every typical (median)
# one-way latency, then the medians over the rounds and the median of each variant's ratio
# to perftest round by round. For finding where the latency goes
# (docs/performance.md, "WRITE latency on the verbs backend"); bench/verbs_vs_perftest.sh is
# the comparison of record.
#
#   tools/rdma-vm/run.sh exec "$PWD" -- bench/verbs_lat_rounds.sh BIN_DIR OUT_FILE ROUNDS 'LABEL:ARGS' ...
#
# Each 'LABEL:ARGS' is one variant of ours: gv_write_lat -d DEV -x GID -s 8 -n ITERS ARGS
# (e.g. 'one-process:' and 'proxy-only:--proxy-only'; leading NAME=VALUE words of ARGS are put
# in the run's environment, then a word @PATH runs the gv_write_lat at PATH instead, e.g. a
# build of the code before a change, then a word 2p runs it in two processes as perftest
# runs: a server (--server, the same ARGS) in the background and the client against
# 127.0.0.1, e.g. 'two-process:2p' and 'two-process-inline:2p -I 8'). Environment:
# RDMA_DEVICE (rxe0), RDMA_GID_INDEX (1), RDMA_IPV4 (10.0.0.1), GV_PT_ITERS_LAT (1000, as
# verbs_vs_perftest.sh), GV_LAT_PORT (18520, the two-process runs' TCP port), GV_LAT_PT_ARGS
# (more options of both ib_write_lat processes, e.g. "-I 8"; default none).
# Every run's full output is appended to OUT_FILE.log.
set -uo pipefail
BIN=$1 OUT=$2 ROUNDS=$3
shift 3
DEV=${RDMA_DEVICE:-rxe0}
GID=${RDMA_GID_INDEX:-1}
ADDR=${RDMA_IPV4:-10.0.0.1}
N=${GV_PT_ITERS_LAT:-1000}
PORT=${GV_LAT_PORT:-18520}
read -r -a PT_ARGS <<< "${GV_LAT_PT_ARGS:-}"
LOG=$OUT.log
: > "$LOG"
: > "$OUT"
value() { awk -v col="$2" 'f && NF >= col { print $col; exit } /#bytes/ { f = 1 }' "$1"; }
tmp=$(mktemp -d)
pt() {
    local a
    for a in 1 2 3 4; do
        timeout 120 ib_write_lat -d "$DEV" -x "$GID" -F -s 8 -n "$N" "${PT_ARGS[@]}" > "$tmp/srv" 2>&1 &
        local sp=$!
        sleep 1
        timeout 110 ib_write_lat -d "$DEV" -x "$GID" -F -s 8 -n "$N" "${PT_ARGS[@]}" "$ADDR" > "$tmp/cli" 2>&1
        local rc=$?
        wait $sp
        { echo "== ib_write_lat (rc $rc, attempt $a)"; cat "$tmp/cli"; } >> "$LOG"
        [ $rc = 0 ] || { echo FAIL; return; }
        grep -q "Correlation coefficient" "$tmp/cli" "$tmp/srv" || break
    done
    value "$tmp/cli" 5
}
ours() {
    local envs=() args=() w
    for w in $1; do  # leading NAME=VALUE words: the run's environment
        if [ ${#args[@]} = 0 ] && [[ $w =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; then envs+=("$w"); else args+=("$w"); fi
    done
    local bin=$BIN/gv_write_lat two=0
    if [ ${#args[@]} != 0 ] && [ "${args[0]:0:1}" = @ ]; then bin=${args[0]:1}; args=("${args[@]:1}"); fi
    if [ ${#args[@]} != 0 ] && [ "${args[0]}" = 2p ]; then two=1; args=("${args[@]:1}"); fi
    local rc src=0
    if [ $two = 1 ]; then
        # As perftest: the server in the background (it prints its line once it listens), then
        # the client; both must exit 0.
        timeout 120 env "${envs[@]}" "$bin" -d "$DEV" -x "$GID" --port "$PORT" --server "${args[@]}" \
            > "$tmp/srv" 2>&1 &
        local sp=$! w
        for w in $(seq 100); do grep -q "waiting up to" "$tmp/srv" 2>/dev/null && break; sleep 0.05; done
        timeout 110 env "${envs[@]}" "$bin" -d "$DEV" -x "$GID" -s 8 -n "$N" --port "$PORT" "${args[@]}" \
            127.0.0.1 > "$tmp/ours" 2>&1
        rc=$?
        wait $sp
        src=$?
    else
        timeout 120 env "${envs[@]}" "$bin" -d "$DEV" -x "$GID" -s 8 -n "$N" "${args[@]}" > "$tmp/ours" 2>&1
        rc=$?
    fi
    { echo "== gv_write_lat $1 (rc $rc$([ $two = 1 ] && echo ", server rc $src"))"; cat "$tmp/ours"; } >> "$LOG"
    [ $two = 1 ] && { echo "-- its server:"; cat "$tmp/srv"; } >> "$LOG"
    [ $rc = 0 ] && [ $src = 0 ] || { echo FAIL; return; }
    value "$tmp/ours" 5
}
declare -A all
for ((r = 1; r <= ROUNDS; r++)); do
    line="round $r: perftest $(pt)"
    all[perftest]+=" ${line##* }"
    for v in "$@"; do
        label=${v%%:*}
        x=$(ours "${v#*:}")
        all[$label]+=" $x"
        line+=" $label $x"
    done
    echo "$line" | tee -a "$OUT"
done
median() { printf '%s\n' "$@" | grep -v FAIL | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# ratio PERFTEST OURS DIGITS: perftest's latency / ours (above 1: ours is faster).
ratio() { awk -v p="$1" -v o="$2" -v d="$3" 'BEGIN { printf "%.*f", d, p / o }'; }
p=$(median ${all[perftest]})
for k in perftest "$@"; do
    k=${k%%:*}
    # shellcheck disable=SC2086
    m=$(median ${all[$k]})
    echo "median $k: $m (runs:${all[$k]}) ratio $(ratio "$p" "$m" 2)" | tee -a "$OUT"
done
# Rounds are not alike (emulation has a fast and a slow mode, by round and by boot, for every
# program), so each variant's ratio is also taken round by round (perftest's latency in that
# round / the variant's) and the median of those printed: the estimate the modes disturb least.
read -r -a ptr <<< "${all[perftest]}"
for v in "$@"; do
    k=${v%%:*}
    read -r -a xs <<< "${all[$k]}"
    rs=()
    for ((i = 0; i < ${#xs[@]}; i++)); do
        [ "${xs[$i]}" = FAIL ] || [ "${ptr[$i]}" = FAIL ] && continue
        rs+=("$(ratio "${ptr[$i]}" "${xs[$i]}" 3)")
    done
    echo "paired $k: median of the rounds' ratios $(median "${rs[@]}") (rounds: ${rs[*]})" | tee -a "$OUT"
done
rm -rf "$tmp"
