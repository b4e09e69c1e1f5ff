#!/bin/bash
# One VM boot: the SEND rows of bench/verbs_vs_perftest.sh (GV_PT_CASES=send) for
# each tools directory given, in the order given, each into OUT/<name>.
#   ab_send.sh OUT NAME=BIN_DIR ...
OUT=$1; shift
for v in "$@"; do
  name=${v%%=*}; bin=${v#*=}
  HW=/sys/class/infiniband/rxe0/ports/1/hw_counters
  a=$(cat $HW/send_rnr_err)
  echo "## $name ($bin) $(date -u +%T)"
  GV_PT_CASES=send bench/verbs_vs_perftest.sh "$bin" "$OUT/$name" 2>&1 | grep -E "^# |^\| SEND"
  echo "## $name: RNR NAKs sent by rxe0 over the whole run (perftest's and ours): $(( $(cat $HW/send_rnr_err) - a ))"
done
