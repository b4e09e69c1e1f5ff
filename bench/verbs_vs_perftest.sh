#!/bin/bash
# gpuverbs' benchmarks on the verbs backend (CPU initiators, the proxy thread posting to the
# device) beside perftest's on the same RDMA device, in the same run, as ratios: WRITE, READ
# and SEND bandwidth at 8 B (message rate) and 64 KiB (bandwidth), WRITE latency at 8 B.
# perftest runs as it always does on one device: a server in the background and a client
# connecting to the device's own address (loopback through the device). Ours in perftest's
# set-up too: gv_write_bw / gv_read_bw / gv_send_bw and gv_write_lat in two processes (a
# server in the background, a client against 127.0.0.1), one QP each, the latency's WRITEs not
# inline as perftest's on rxe (perftest inlines only on devices it knows: its header says "Max
# inline data : 0[B]" on rxe). GV_PT_BW_MODE=loopback runs the bandwidth rows in one process
# instead (both QPs of the pair in it, as these rows ran until 2026-12-05).
#
# Inside the Soft-RoCE VM (emulation: absolute numbers mean nothing, ratios within one run do):
#   tools/rdma-vm/run.sh exec "$PWD" -- bench/verbs_vs_perftest.sh [BIN_DIR=build-cpu/tools] [OUT_DIR]
# Anywhere with an RDMA device: RDMA_DEVICE=mlx5_0 RDMA_GID_INDEX=3 RDMA_IPV4=... bench/verbs_vs_perftest.sh
#
# Environment: RDMA_DEVICE (default rxe0), RDMA_GID_INDEX (1), RDMA_IPV4 (10.0.0.1, the
# device's address: where perftest's client connects), GV_PT_REPEAT (runs of every case, the
# median kept; default 3), GV_PT_ITERS_SMALL / GV_PT_ITERS_BIG / GV_PT_ITERS_LAT (5000 / 500 /
# 1000), GV_PT_TX_DEPTH (perftest's -t and our post list x lists in flight; default 128),
# GV_PT_CASES (which rows: "all" (default), or words among bw (the six bandwidth rows), lat
# (the latency row), write, read and send (that operation's rows), e.g. GV_PT_CASES=lat for the
# latency alone, GV_PT_CASES=send for the two SEND rows), GV_PT_LAT_ARGS (more
# options of both gv_write_lat processes, e.g. "-I 8" for inline WRITEs; default none),
# GV_LAT_PORT (18520: the TCP port of our two processes), GV_PT_BW_MODE (2p, the default: our
# bandwidth rows in two processes; loopback: in one), GV_PT_OURS_ARGS (more options of every
# run of ours, both processes, e.g. "--proxy-idle-sleep-us 100" for the library's default
# proxy sleep instead of the tools' 100 ms).
# Counts, per row, the runs of each side that the device's own retransmissions or RNR NAKs
# stalled (rxe's hw_counters), and gives the ratio without them beside the ratio of all runs.
# Prints one table (markdown) and writes OUT_DIR/verbs_vs_perftest.{md,log} (OUT_DIR default
# bench/results). Exits 1 when a run failed (its output is in the log).
set -uo pipefail
BIN=${1:-build-cpu/tools}
OUT=${2:-bench/results}
DEV=${RDMA_DEVICE:-rxe0}
GID=${RDMA_GID_INDEX:-1}
ADDR=${RDMA_IPV4:-10.0.0.1}
REPEAT=${GV_PT_REPEAT:-3}
N_SMALL=${GV_PT_ITERS_SMALL:-5000}
N_BIG=${GV_PT_ITERS_BIG:-500}
N_LAT=${GV_PT_ITERS_LAT:-1000}
DEPTH=${GV_PT_TX_DEPTH:-128}
CASES=${GV_PT_CASES:-all}
for w in $CASES; do
    case $w in
        all | bw | lat | write | read | send) ;;
        *) echo "GV_PT_CASES: unknown word '$w' (expected words among all, bw, lat, write, read, send)"; exit 1 ;;
    esac
done
LAT_ARGS=${GV_PT_LAT_ARGS:-}
case ${GV_PT_BW_MODE:-2p} in
    2p) BW2P=2p ;;
    loopback) BW2P= ;;
    *) echo "GV_PT_BW_MODE: '${GV_PT_BW_MODE}' (expected 2p or loopback)"; exit 1 ;;
esac
PORT=${GV_LAT_PORT:-18520}
LIST=$((DEPTH / 4))  # our CPU initiator keeps 4 post lists in flight (kCpuLists)
mkdir -p "$OUT" || exit 1
LOG=$OUT/verbs_vs_perftest.log
: > "$LOG"
fails=0

for t in ib_write_bw ib_read_bw ib_send_bw ib_write_lat; do
    command -v $t > /dev/null || { echo "no $t: install perftest (tools/rdma-vm/run.sh deps installs it)"; exit 1; }
done
for t in gv_write_bw gv_read_bw gv_send_bw gv_write_lat; do
    [ -x "$BIN/$t" ] || { echo "no $BIN/$t: build the tree first (BIN_DIR is the first argument)"; exit 1; }
done

# The value in column COL of the line after the header line that holds "#bytes" (perftest's
# and ours print the same shape: MsgRate[Mpps] is column 5 of a bandwidth row, t_typical
# column 5 of a latency row).
value() { awk -v col="$2" 'f && NF >= col { print $col; exit } /#bytes/ { f = 1 }' "$1"; }

# perftest TOOL ARGS...: one server+client run, prints the client's value (column 5).
# perftest converts its cycle counts with a CPU clock rate it estimates by sampling; under
# emulation the estimate sometimes fails ("Correlation coefficient r^2 ... < 0.9") and the
# result is 0 or meaningless: such a run is repeated (up to 4 attempts).
perftest() {
    local t=$1 attempt rc src
    shift
    for attempt in 1 2 3 4; do
        timeout 120 "$t" -d "$DEV" -x "$GID" -F "$@" > "$OUT/srv.out" 2>&1 &
        local sp=$!
        sleep 1
        timeout 110 "$t" -d "$DEV" -x "$GID" -F "$@" "$ADDR" > "$OUT/cli.out" 2>&1
        rc=$?
        wait $sp
        src=$?
        { echo "== $t $* (client rc $rc, server rc $src, attempt $attempt)"; cat "$OUT/cli.out"; } >> "$LOG"
        if [ $rc != 0 ] || [ $src != 0 ]; then
            cat "$OUT/srv.out" >> "$LOG"
            echo FAIL
            return
        fi
        grep -q "Correlation coefficient" "$OUT/cli.out" "$OUT/srv.out" || break
        echo "(perftest's clock-rate estimate failed: run again)" >> "$LOG"
    done
    value "$OUT/cli.out" 5
}

# ours [2p] TOOL ARGS...: one run, prints its value (column 5). 2p: in two processes as
# perftest runs, a server (--server ARGS: what the client sends must agree) in the background
# and the client against 127.0.0.1; both must exit 0.
ours() {
    local two=0 src=0
    [ "$1" = 2p ] && { two=1; shift; }
    local t=$1
    shift
    # shellcheck disable=SC2206  # a list of words
    set -- "$@" ${GV_PT_OURS_ARGS:-}
    if [ $two = 1 ]; then
        timeout 120 "$BIN/$t" -d "$DEV" -x "$GID" --port "$PORT" --server "$@" > "$OUT/srv.out" 2>&1 &
        local sp=$! w
        for w in $(seq 100); do grep -q "waiting up to" "$OUT/srv.out" 2>/dev/null && break; sleep 0.05; done
        timeout 110 "$BIN/$t" -d "$DEV" -x "$GID" --port "$PORT" "$@" 127.0.0.1 > "$OUT/ours.out" 2>&1
        local rc=$?
        wait $sp
        src=$?
    else
        timeout 120 "$BIN/$t" -d "$DEV" -x "$GID" "$@" > "$OUT/ours.out" 2>&1
        local rc=$?
    fi
    { echo "== $t $* (rc $rc$([ $two = 1 ] && echo ", two processes, server rc $src"))"; cat "$OUT/ours.out"; } >> "$LOG"
    [ $two = 1 ] && { echo "-- its server:"; cat "$OUT/srv.out"; } >> "$LOG"
    [ $rc = 0 ] && [ $src = 0 ] || { echo FAIL; return; }
    value "$OUT/ours.out" 5
}

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# Stalls of the device's own transport over a run: retransmissions after the requester's
# timer (rxe's completer_retry_err) and RNR NAKs received (rcvd_rnr_err). On rxe under
# emulation one retry stalls a run for about 60 ms and halves its rate, whichever tool runs
# (docs/performance.md, "SEND 8 B against perftest"), so the table counts the runs that had
# one and gives the ratio of the runs without. Empty where the device has no such counters.
HW=/sys/class/infiniband/$DEV/ports/1/hw_counters
stall_count() {
    local s=0 c found=0
    for c in completer_retry_err rcvd_rnr_err; do
        [ -r "$HW/$c" ] && { s=$((s + $(cat "$HW/$c"))); found=1; }
    done
    [ $found = 1 ] && echo $s
}

# ratio_of KINDS PERFTEST OURS: for the latency row (KINDS "lat", lower is better) perftest /
# ours, else (message rates) ours / perftest; 1.00 = as fast as perftest.
ratio_of() {
    if [ "$1" = lat ]; then
        awk -v p="$2" -v o="$3" 'BEGIN { printf "%.2f", p / o }'
    else
        awk -v p="$2" -v o="$3" 'BEGIN { printf "%.2f", o / p }'
    fi
}

# row NAME KINDS PERFTEST_CMD... -- OURS_CMD...: REPEAT alternating runs of each, the medians.
# KINDS: the words of GV_PT_CASES that select the row.
rows=()
row() {
    local name=$1 kinds=$2 k wanted=0
    shift 2
    for k in $kinds; do
        case " $CASES " in *" all "* | *" $k "*) wanted=1 ;; esac
    done
    (( wanted )) || return
    local pt=() us=() a
    while [ "$1" != -- ]; do pt+=("$1"); shift; done
    shift
    local pv=() ov=() pc=() oc=() pd=() od=() r v c0 c1 pst=0 ost=0 counted=1
    for ((r = 0; r < REPEAT; r++)); do
        c0=$(stall_count)
        v=$(perftest "${pt[@]}")
        c1=$(stall_count)
        [ -n "$c0" ] || counted=0
        if [ "$v" = FAIL ]; then
            fails=$((fails + 1))
        else
            pv+=("$v")
            [ $counted = 1 ] && pd+=($((c1 - c0)))
            if [ $counted = 1 ] && [ "$c1" != "$c0" ]; then pst=$((pst + 1)); else pc+=("$v"); fi
        fi
        c0=$(stall_count)
        v=$(ours "$@")
        c1=$(stall_count)
        if [ "$v" = FAIL ]; then
            fails=$((fails + 1))
        else
            ov+=("$v")
            [ $counted = 1 ] && od+=($((c1 - c0)))
            if [ $counted = 1 ] && [ "$c1" != "$c0" ]; then ost=$((ost + 1)); else oc+=("$v"); fi
        fi
    done
    if [ ${#pv[@]} = 0 ] || [ ${#ov[@]} = 0 ]; then
        rows+=("| $name | failed | failed | - | - | - | - |")
        return
    fi
    local p o ratio clean=- stalled=- verdict
    p=$(median "${pv[@]}")
    o=$(median "${ov[@]}")
    ratio=$(ratio_of "$kinds" "$p" "$o")
    if [ $counted = 1 ]; then
        stalled="$pst of ${#pv[@]} / $ost of ${#ov[@]}"
        if [ ${#pc[@]} -gt 0 ] && [ ${#oc[@]} -gt 0 ]; then
            clean=$(ratio_of "$kinds" "$(median "${pc[@]}")" "$(median "${oc[@]}")")
        fi
    fi
    if [ "$kinds" = lat ]; then p="$p us"; o="$o us"; else p="$p Mpps"; o="$o Mpps"; fi
    verdict=$(awk -v r="$ratio" 'BEGIN { print (r >= 0.9 ? "yes" : "no") }')
    rows+=("| $name | $p | $o | $ratio | $verdict | $stalled | $clean |")
    echo "# $name: perftest $p (runs: ${pv[*]}), ours $o (runs: ${ov[*]}), ratio $ratio; retransmissions + RNR NAKs per run (perftest: ${pd[*]:--}; ours: ${od[*]:--}), ratio without them: $clean" >&2
}

# shellcheck disable=SC2086  # BW2P and LAT_ARGS are lists of words (BW2P may be none)
row "WRITE 8 B" "bw write" ib_write_bw -s 8 -n "$N_SMALL" -t "$DEPTH" -- $BW2P gv_write_bw -s 8 -n "$N_SMALL" -l "$LIST" --reps 1
row "WRITE 64 KiB" "bw write" ib_write_bw -s 65536 -n "$N_BIG" -t "$DEPTH" -- $BW2P gv_write_bw -s 65536 -n "$N_BIG" -l "$LIST" --reps 1
row "READ 8 B" "bw read" ib_read_bw -s 8 -n "$N_SMALL" -t "$DEPTH" -- $BW2P gv_read_bw -s 8 -n "$N_SMALL" -l "$LIST" --reps 1
row "READ 64 KiB" "bw read" ib_read_bw -s 65536 -n "$N_BIG" -t "$DEPTH" -- $BW2P gv_read_bw -s 65536 -n "$N_BIG" -l "$LIST" --reps 1
row "SEND 8 B" "bw send" ib_send_bw -s 8 -n "$N_SMALL" -t "$DEPTH" -- $BW2P gv_send_bw -s 8 -n "$N_SMALL" -l "$LIST" --reps 1
row "SEND 64 KiB" "bw send" ib_send_bw -s 65536 -n "$N_BIG" -t "$DEPTH" -- $BW2P gv_send_bw -s 65536 -n "$N_BIG" -l "$LIST" --reps 1
row "WRITE latency 8 B (two processes)" "lat" ib_write_lat -s 8 -n "$N_LAT" -- 2p gv_write_lat -s 8 -n "$N_LAT" $LAT_ARGS

{
    echo "$DEV, $(uname -r), $REPEAT runs each (median), perftest and gpuverbs alternating"
    echo
    echo "| test | perftest | gpuverbs (verbs backend, CPU initiator) | ratio | within 10%? | runs with transport stalls (perftest / ours) | ratio of the runs without |"
    echo "|---|---|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
    echo
    echo "ratio: ours / perftest for message rates (bandwidth = rate x size), perftest / ours for the"
    echo "typical (median) one-way latency; 1.00 = as fast as perftest. Latency: both in two processes"
    echo "(a server and a client), ours with gv_write_lat ${LAT_ARGS:-(WRITEs not inline, as perftest posts them on rxe)}."
    echo "Bandwidth: perftest in two processes; ours ${BW2P:+in two processes as well}${BW2P:-in one process (GV_PT_BW_MODE=loopback)}."
    echo "Transport stalls: runs in which the device retransmitted after its timer or received an RNR"
    echo "NAK (counters completer_retry_err, rcvd_rnr_err); the last column is the ratio of the medians"
    echo "of the runs without any ('-' where either side had none, or the device has no such counters)."
    echo "The verdict is on all runs."
} | tee "$OUT/verbs_vs_perftest.md"
rm -f "$OUT/srv.out" "$OUT/cli.out" "$OUT/ours.out"
[ $fails = 0 ] || { echo "$fails run(s) failed: see $LOG"; exit 1; }
