#!/bin/bash
# One VM boot: SEND 64 KiB, perftest's ib_send_bw (-t 128) against gv_send_bw in two processes
# with post lists of 32, 8 and 1 (4 lists in flight: 128, 32 and 4 SENDs), ROUNDS alternating
# rounds; rxe0's hw_counters that moved during each run. Run from the checkout's root:
#   LAB=build-cpu/rdma-vm tools/rdma-vm/run.sh exec "$PWD" -- bash docs/perf-logs/2026-12-05-session22/send64-lists.sh
set -u
BIN=build-cpu/tools DEV=rxe0 GID=1 ADDR=10.0.0.1 N=${N:-500} ROUNDS=${ROUNDS:-4}
HW=/sys/class/infiniband/$DEV/ports/1/hw_counters
snap() { for f in "$HW"/*; do echo "$(basename "$f")=$(cat "$f")"; done; }
moved() { # BEFORE AFTER: the counters that changed, name+delta (temporary files: the VM has no /dev/fd)
    echo "$1" | sort > /tmp/c0
    echo "$2" | sort > /tmp/c1
    join -t= /tmp/c0 /tmp/c1 | awk -F= '$3 != $2 { printf "%s+%d ", $1, $3 - $2 }'
}
echo "counters: $(ls $HW | tr '\n' ' ')"
val() { awk 'f && NF >= 5 { print $5; exit } /#bytes/ { f = 1 }' "$1"; }
for r in $(seq "$ROUNDS"); do
    b=$(snap)
    timeout 60 ib_send_bw -d $DEV -x $GID -F -s 65536 -n "$N" -t 128 > /tmp/ps.out 2>&1 &
    sleep 1
    timeout 60 ib_send_bw -d $DEV -x $GID -F -s 65536 -n "$N" -t 128 $ADDR > /tmp/pc.out 2>&1
    wait
    a=$(snap)
    echo "round $r perftest: $(val /tmp/pc.out) Mpps; $(moved "$b" "$a")"
    for l in 32 8 1; do
        b=$(snap)
        timeout 60 $BIN/gv_send_bw -d $DEV -x $GID --port 18530 --server -s 65536 -n "$N" -l $l --reps 1 > /tmp/gs.out 2>&1 &
        for w in $(seq 100); do grep -q "waiting up to" /tmp/gs.out 2>/dev/null && break; sleep 0.05; done
        timeout 60 $BIN/gv_send_bw -d $DEV -x $GID --port 18530 -s 65536 -n "$N" -l $l --reps 1 127.0.0.1 > /tmp/gc.out 2>&1
        rc=$?
        wait
        a=$(snap)
        echo "round $r ours -l $l: $(val /tmp/gc.out) Mpps (rc $rc); $(moved "$b" "$a")"
    done
done
