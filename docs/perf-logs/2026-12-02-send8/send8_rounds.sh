#!/bin/bash
# SEND 8 B rounds inside the Soft-RoCE VM: per round, perftest's ib_send_bw (server + client,
# as bench/verbs_vs_perftest.sh runs it), then each gv_send_bw variant given, alternating.
# Every run prints its MsgRate and the deltas of rxe0's hardware counters over the run
# (send_rnr_err: RNR NAKs the responder sent, rcvd_rnr_err: RNR NAKs the requester got,
# sent_pkts, rdma_sends, rdma_recvs ...).
#   send8_rounds.sh ROUNDS OUT_LOG NAME=BINARY[:ARGS] ...
# Env: ITERS (5000), DEPTH (128: perftest's -t; ours -l DEPTH/4), SIZE (8), PT=0 skips perftest.
set -uo pipefail
ROUNDS=$1; LOG=$2; shift 2
ITERS=${ITERS:-5000}; DEPTH=${DEPTH:-128}; SIZE=${SIZE:-8}; PT=${PT:-1}
HW=/sys/class/infiniband/rxe0/ports/1/hw_counters
CNT="send_rnr_err rcvd_rnr_err sent_pkts rcvd_pkts rdma_sends rdma_recvs duplicate_request out_of_seq_request rcvd_seq_err completer_retry_err ack_deferred"
snap() { for c in $CNT; do cat $HW/$c; done | paste -sd' '; }
# (no process substitution: the guest's chroot has no /dev/fd)
delta() { echo "$1 | $2 | $CNT" | awk -F'|' '{ n = split($1, a, " "); split($2, b, " "); split($3, c, " ");
  for (i = 1; i <= n; i++) if (b[i] - a[i]) printf "%s=%d ", c[i], b[i] - a[i] }'; }
val() { awk -v col=5 'f && NF >= col { print $col; exit } /#bytes/ { f = 1 }' "$1"; }
T=$(mktemp -d)
echo "# $(date -u) uname $(uname -r) nproc $(nproc) ITERS=$ITERS DEPTH=$DEPTH SIZE=$SIZE" | tee -a "$LOG"
for ((r = 1; r <= ROUNDS; r++)); do
  if [ "$PT" = 1 ]; then
    a=$(snap)
    timeout 120 ib_send_bw -d rxe0 -x 1 -F -s $SIZE -n $ITERS -t $DEPTH > $T/srv 2>&1 &
    sp=$!; sleep 1
    timeout 110 ib_send_bw -d rxe0 -x 1 -F -s $SIZE -n $ITERS -t $DEPTH 10.0.0.1 > $T/cli 2>&1; rc=$?
    wait $sp
    b=$(snap)
    grep -q Correlation $T/cli $T/srv && note=" (clock estimate failed)" || note=""
    echo "round $r perftest rc=$rc rate=$(val $T/cli)$note $(delta "$a" "$b")" | tee -a "$LOG"
  fi
  for v in "$@"; do
    name=${v%%=*}; rest=${v#*=}; bin=${rest%%:*}; args=""; [ "$rest" != "$bin" ] && args=${rest#*:}
    a=$(snap)
    # shellcheck disable=SC2086
    timeout 120 $bin -d rxe0 -x 1 -s $SIZE -n $ITERS -l $((DEPTH / 4)) --reps 1 $args > $T/ours 2>&1; rc=$?
    b=$(snap)
    echo "round $r $name rc=$rc rate=$(val $T/ours) $(delta "$a" "$b")" | tee -a "$LOG"
    [ $rc = 0 ] || cat $T/ours >> "$LOG"
    grep '^# trace' $T/ours | sed "s/^/  $name /" | tee -a "$LOG"  # GV_EXP_TRACE's lines, if any
  done
done
rm -rf $T
