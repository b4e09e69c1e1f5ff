#!/bin/bash
# One VM boot: bench/verbs_vs_perftest.sh's bandwidth rows (GV_PT_CASES=bw) for each tools
# directory given, in the order given, each into OUT/<name>, with rxe0's RNR NAK count over each.
#   full_bw.sh OUT NAME=BIN_DIR ...
OUT=$1; shift
HW=/sys/class/infiniband/rxe0/ports/1/hw_counters
for v in "$@"; do
  name=${v%%=*}; bin=${v#*=}
  a=$(cat $HW/send_rnr_err); b=$(cat $HW/completer_retry_err)
  echo "## $name ($bin) $(date -u +%T)"
  GV_PT_CASES=bw bench/verbs_vs_perftest.sh "$bin" "$OUT/$name" 2>&1 | grep -E "^# |^\|"
  echo "## $name: over the whole run (perftest's and ours), RNR NAKs sent $(( $(cat $HW/send_rnr_err) - a )), completer retries $(( $(cat $HW/completer_retry_err) - b ))"
done
