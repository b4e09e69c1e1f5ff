#!/bin/bash
# Two "hosts" inside the Soft-RoCE VM (run as root in the guest by RdmaVm.two_hosts):
#   host A: veth end gvh0, 10.1.0.1, rxe device rxe_a     host B: gvh1, 10.1.0.2, rxe_b
# joined by the veth pair, so every RoCE packet crosses the "wire" between two devices
# (tests/verbs/rxe_hosts.sh makes them, and says why that way).
#
# usage: two_hosts.sh GV_VERBS_TWO_HOSTS_BINARY
set -euo pipefail
bin=$1
[ "$(id -u)" = 0 ] || { echo "two_hosts.sh: needs root (it runs inside the VM)" >&2; exit 2; }
log() { printf 'two_hosts: %s\n' "$*"; }

. "$(dirname "${BASH_SOURCE[0]}")/rxe_hosts.sh"
rxe_hosts_up || exit 1

counters() {
    for d in rxe_a rxe_b; do
        c=/sys/class/infiniband/$d/ports/1/hw_counters
        printf '%s sent_pkts=%s rcvd_pkts=%s  ' "$d" "$(cat $c/sent_pkts)" "$(cat $c/rcvd_pkts)"
    done
    echo
}

# Twice: with the verbs control layer directly, then with gpuverbs QPs of Backend::Verbs driven
# through the gv::dev calls (the proxy thread posts them).
port=18515
for api in control gpuverbs; do
    a0=$(rxe_rcvd rxe_a) b0=$(rxe_rcvd rxe_b)
    "$bin" --api $api --role server --device rxe_b --address 10.1.0.2 --port $port --timeout-ms 30000 &
    server=$!
    "$bin" --api $api --role client --device rxe_a --address 10.1.0.2 --port $port --timeout-ms 30000 && crc=0 || crc=$?
    wait "$server" && src=0 || src=$?
    log "$api: client rc=$crc, server rc=$src; $(counters)"
    # The traffic went over the wire: each device received packets from the other.
    [ "$(rxe_rcvd rxe_a)" -gt "$a0" ] || { log "$api: rxe_a received no packets"; exit 1; }
    [ "$(rxe_rcvd rxe_b)" -gt "$b0" ] || { log "$api: rxe_b received no packets"; exit 1; }
    [ "$crc" = 0 ] && [ "$src" = 0 ] || exit 1
    port=$((port + 1))
done
log "PASS"
