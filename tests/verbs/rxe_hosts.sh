#!/bin/bash
# Sourced by the tests that run inside the Soft-RoCE VM as root and need two RDMA "hosts"
# (tests/verbs/two_hosts.sh, tests/client_server_test.sh's rxe-hosts case). rxe_hosts_up makes
#   host A: veth end gvh0, 10.1.0.1, rxe device rxe_a     host B: gvh1, 10.1.0.2, rxe_b
# joined by the veth pair, so every RoCE packet crosses the "wire" between two devices, and
# returns once both devices have their IPv4 GID (non-zero, with a message, when they do not).
#
# Why not two rxe devices on dummy netdevs, nor two network namespaces (docs in
# tools/rdma-vm/README.md): a packet to an address of the same kernel is routed through lo, and
# rxe drops what arrives on a netdev it is not bound to; and rxe in Linux 6.1 keeps its UDP
# socket and route lookups in the initial namespace, so a device on a namespaced netdev sends
# nothing (its first send completes with LOC_QP_OP_ERR). So both ends stay in the initial
# namespace and policy routing sends A's packets for B out of gvh0 (and back out of gvh1):
# rules on the output interface ahead of the local table, accept_local for the source checks,
# and static neighbours (veth answers ARP, but a static entry avoids the wait).
# rxe_step COMMAND...: one step of rxe_hosts_up; a failure says which and fails the function.
rxe_step() { "$@" || { echo "rxe_hosts: '$*' failed (status $?)" >&2; return 1; }; }

rxe_hosts_up() {
    rxe_step ip link add gvh0 type veth peer name gvh1 &&
        rxe_step ip addr add 10.1.0.1/24 dev gvh0 &&
        rxe_step ip addr add 10.1.0.2/24 dev gvh1 &&
        rxe_step ip link set gvh0 up &&
        rxe_step ip link set gvh1 up || return 1
    local i
    for i in all default gvh0 gvh1; do
        echo 1 > /proc/sys/net/ipv4/conf/$i/accept_local && echo 0 > /proc/sys/net/ipv4/conf/$i/rp_filter ||
            { echo "rxe_hosts: cannot set accept_local / rp_filter of $i" >&2; return 1; }
    done
    rxe_step ip rule add pref 10 oif gvh0 to 10.1.0.2 lookup 100 &&
        rxe_step ip route add 10.1.0.2 dev gvh0 src 10.1.0.1 table 100 &&
        rxe_step ip rule add pref 11 oif gvh1 to 10.1.0.1 lookup 101 &&
        rxe_step ip route add 10.1.0.1 dev gvh1 src 10.1.0.2 table 101 &&
        rxe_step ip rule del pref 0 lookup local &&
        rxe_step ip rule add pref 100 lookup local &&
        rxe_step ip neigh replace 10.1.0.2 lladdr "$(cat /sys/class/net/gvh1/address)" dev gvh0 nud permanent &&
        rxe_step ip neigh replace 10.1.0.1 lladdr "$(cat /sys/class/net/gvh0/address)" dev gvh1 nud permanent &&
        rxe_step rdma link add rxe_a type rxe netdev gvh0 &&
        rxe_step rdma link add rxe_b type rxe netdev gvh1 || return 1

    # The IPv4 GIDs appear shortly after the devices: wait for both (bounded).
    local n
    for n in $(seq 100); do
        rxe_gid_ready rxe_a 1 && rxe_gid_ready rxe_b 2 && break
        sleep 0.1
    done
    rxe_gid_ready rxe_a 1 && rxe_gid_ready rxe_b 2 ||
        { echo "rxe_hosts: the IPv4 GIDs of rxe_a/rxe_b did not appear within 10 s" >&2; return 1; }
    echo "rxe_hosts: rxe_a on gvh0 (10.1.0.1), rxe_b on gvh1 (10.1.0.2)"

    # GV_RXE_NETEM="delay 1ms limit 40" (netem's options): that qdisc on both ends, to make the
    # wire slow, lossy or, with a short queue, drop packets on their way out (docs/verbs.md).
    if [ -n "${GV_RXE_NETEM:-}" ]; then
        # shellcheck disable=SC2086  # the options are words
        rxe_step tc qdisc add dev gvh0 root netem $GV_RXE_NETEM &&
            rxe_step tc qdisc add dev gvh1 root netem $GV_RXE_NETEM || return 1
        echo "rxe_hosts: netem $GV_RXE_NETEM on gvh0 and gvh1"
    fi
}

# rxe_gid_ready DEV N: DEV lists the IPv4-mapped GID of 10.1.0.N.
rxe_gid_ready() { grep -q "ffff:0a01:000$2" /sys/class/infiniband/"$1"/ports/1/gids/* 2>/dev/null; }

# rxe_rcvd DEV: the packets DEV received so far.
rxe_rcvd() { cat /sys/class/infiniband/"$1"/ports/1/hw_counters/rcvd_pkts; }
