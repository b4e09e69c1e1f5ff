#!/bin/bash
# Two "hosts" inside the Soft-RoCE VM (run as root in the guest by RdmaVm.two_hosts):
#   host A: veth end gvh0, 10.1.0.1, rxe device rxe_a     host B: gvh1, 10.1.0.2, rxe_b
# joined by the veth pair, so every RoCE packet crosses the "wire" between two devices.
#
# Why not two rxe devices on dummy netdevs, nor two network namespaces (docs in
# tools/rdma-vm/README.md): a packet to an address of the same kernel is routed through lo, and
# rxe drops what arrives on a netdev it is not bound to; and rxe in Linux 6.1 keeps its UDP
# socket and route lookups in the initial namespace, so a device on a namespaced netdev sends
# nothing (its first send completes with LOC_QP_OP_ERR). So both ends stay in the initial
# namespace and policy routing sends A's packets for B out of gvh0 (and back out of gvh1):
# rules on the output interface ahead of the local table, accept_local for the source checks,
# and static neighbours (veth answers ARP, but a static entry avoids the wait).
#
# usage: two_hosts.sh GV_VERBS_TWO_HOSTS_BINARY
set -euo pipefail
bin=$1
[ "$(id -u)" = 0 ] || { echo "two_hosts.sh: needs root (it runs inside the VM)" >&2; exit 2; }
log() { printf 'two_hosts: %s\n' "$*"; }

ip link add gvh0 type veth peer name gvh1
ip addr add 10.1.0.1/24 dev gvh0
ip addr add 10.1.0.2/24 dev gvh1
ip link set gvh0 up
ip link set gvh1 up
for i in all default gvh0 gvh1; do
    echo 1 > /proc/sys/net/ipv4/conf/$i/accept_local
    echo 0 > /proc/sys/net/ipv4/conf/$i/rp_filter
done
ip rule add pref 10 oif gvh0 to 10.1.0.2 lookup 100
ip route add 10.1.0.2 dev gvh0 src 10.1.0.1 table 100
ip rule add pref 11 oif gvh1 to 10.1.0.1 lookup 101
ip route add 10.1.0.1 dev gvh1 src 10.1.0.2 table 101
ip rule del pref 0 lookup local
ip rule add pref 100 lookup local
ip neigh replace 10.1.0.2 lladdr "$(cat /sys/class/net/gvh1/address)" dev gvh0 nud permanent
ip neigh replace 10.1.0.1 lladdr "$(cat /sys/class/net/gvh0/address)" dev gvh1 nud permanent
rdma link add rxe_a type rxe netdev gvh0
rdma link add rxe_b type rxe netdev gvh1

# The IPv4 GIDs appear shortly after the devices: wait for both (bounded).
gid_ready() { grep -q "ffff:0a01:000$2" /sys/class/infiniband/"$1"/ports/1/gids/* 2>/dev/null; }
for _ in $(seq 100); do
    gid_ready rxe_a 1 && gid_ready rxe_b 2 && break
    sleep 0.1
done
gid_ready rxe_a 1 && gid_ready rxe_b 2 || { log "the IPv4 GIDs of rxe_a/rxe_b did not appear"; exit 1; }
log "rxe_a on gvh0 (10.1.0.1), rxe_b on gvh1 (10.1.0.2)"

counters() {
    for d in rxe_a rxe_b; do
        c=/sys/class/infiniband/$d/ports/1/hw_counters
        printf '%s sent_pkts=%s rcvd_pkts=%s  ' "$d" "$(cat $c/sent_pkts)" "$(cat $c/rcvd_pkts)"
    done
    echo
}

rcvd() { cat /sys/class/infiniband/"$1"/ports/1/hw_counters/rcvd_pkts; }

# Twice: with the verbs control layer directly, then with gpuverbs QPs of Backend::Verbs driven
# through the gv::dev calls (the proxy thread posts them).
port=18515
for api in control gpuverbs; do
    a0=$(rcvd rxe_a) b0=$(rcvd rxe_b)
    "$bin" --api $api --role server --device rxe_b --address 10.1.0.2 --port $port --timeout-ms 30000 &
    server=$!
    "$bin" --api $api --role client --device rxe_a --address 10.1.0.2 --port $port --timeout-ms 30000 && crc=0 || crc=$?
    wait "$server" && src=0 || src=$?
    log "$api: client rc=$crc, server rc=$src; $(counters)"
    # The traffic went over the wire: each device received packets from the other.
    [ "$(rcvd rxe_a)" -gt "$a0" ] || { log "$api: rxe_a received no packets"; exit 1; }
    [ "$(rcvd rxe_b)" -gt "$b0" ] || { log "$api: rxe_b received no packets"; exit 1; }
    [ "$crc" = 0 ] && [ "$src" = 0 ] || exit 1
    port=$((port + 1))
done
log "PASS"
