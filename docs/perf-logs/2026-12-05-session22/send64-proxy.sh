#!/bin/bash
# One VM boot: SEND 64 KiB, perftest's ib_send_bw (-t 128) against gv_send_bw in two processes
# (-l 32), its proxy threads three ways (opt below); the switch build of send64-idle.sh (GV_IDLE: 0 = spin 64, yield to 1024, then 20 us
# sleeps, the tool's; 1 = pure spin as perftest; 2 = spin 64 then yield), ROUNDS alternating
# rounds; rxe0's counters that moved. BIN: the switch build (.scratch/gv_send_bw_idle).
set -u
BIN=${BIN:-.scratch/gv_send_bw_idle} DEV=rxe0 GID=1 ADDR=10.0.0.1 N=${N:-500} ROUNDS=${ROUNDS:-4}
HW=/sys/class/infiniband/$DEV/ports/1/hw_counters
snap() { for f in "$HW"/*; do echo "$(basename "$f")=$(cat "$f")"; done; }
moved() {
    echo "$1" | sort > /tmp/c0
    echo "$2" | sort > /tmp/c1
    join -t= /tmp/c0 /tmp/c1 | awk -F= '$3 != $2 && $1 ~ /retry|rnr|dupl/ { printf "%s+%d ", $1, $3 - $2 }'
}
# 0: the tool as built; P: its proxy threads' idle sleep bound 100 ms (--proxy-idle-sleep-us);
# Q: every WQE through the proxy threads (--proxy-only), which then sleep up to the default.
opt() { case $1 in P) echo "--proxy-idle-sleep-us 100000" ;; Q) echo "--proxy-only" ;; esac; }
val() { awk 'f && NF >= 5 { print $5; exit } /#bytes/ { f = 1 }' "$1"; }
for r in $(seq "$ROUNDS"); do
    b=$(snap)
    timeout 60 ib_send_bw -d $DEV -x $GID -F -s 65536 -n "$N" -t 128 > /tmp/ps.out 2>&1 &
    sleep 1
    timeout 60 ib_send_bw -d $DEV -x $GID -F -s 65536 -n "$N" -t 128 $ADDR > /tmp/pc.out 2>&1
    wait
    a=$(snap)
    echo "round $r perftest: $(val /tmp/pc.out) Mpps; $(moved "$b" "$a")"
    for m in 0 P Q; do
        b=$(snap)
        GV_IDLE=${m/[PQ]/0} timeout 60 $BIN $(opt $m) -d $DEV -x $GID --port 18530 --server -s 65536 -n "$N" -l 32 --reps 1 > /tmp/gs.out 2>&1 &
        for w in $(seq 100); do grep -q "waiting up to" /tmp/gs.out 2>/dev/null && break; sleep 0.05; done
        GV_IDLE=${m/[PQ]/0} timeout 60 $BIN $(opt $m) -d $DEV -x $GID --port 18530 -s 65536 -n "$N" -l 32 --reps 1 127.0.0.1 > /tmp/gc.out 2>&1
        rc=$?
        wait
        a=$(snap)
        echo "round $r ours $m $(opt $m): $(val /tmp/gc.out) Mpps (rc $rc); $(moved "$b" "$a")"
    done
done
