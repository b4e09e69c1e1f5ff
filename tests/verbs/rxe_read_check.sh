#!/bin/bash
# RdmaVm.rxe_read_check, inside the Soft-RoCE VM as root: gv_rxe_read_check (plain libibverbs)
# between the two rxe "hosts" of rxe_hosts.sh, and a check that the guest's network dropped no
# packet on its way out. Linux 6.1's rxe can complete a READ whose data never landed when its
# packets are dropped there (docs/verbs.md); the VM's init raises net.core.netdev_max_backlog so
# that they are not (tools/rdma-vm/run.sh), and this test fails if that stops holding.
#   rxe_read_check.sh BIN [SIZE [ROUNDS]]
# With GV_RXE_NETEM set (rxe_hosts.sh: a netem qdisc on both ends, e.g. "delay 1ms limit 40"),
# drops are expected and only the program's verdict counts: that is how to see the kernel's fault.
set -u
bin=${1:?usage: rxe_read_check.sh BIN [SIZE [ROUNDS]]}
size=${2:-1048576} rounds=${3:-20}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/rxe_hosts.sh"
rxe_hosts_up || exit 1

# Packets dropped on the way out: the softnet backlog's drops (second column of
# /proc/net/softnet_stat, hex, one line per CPU) and the veth ends' TX drops.
local_drops() {
    local n=0 d
    for d in $(awk '{print $2}' /proc/net/softnet_stat); do n=$((n + 16#$d)); done
    for d in gvh0 gvh1; do n=$((n + $(cat /sys/class/net/$d/statistics/tx_dropped))); done
    echo $n
}
send_failures() { dmesg | grep -c 'rdma_rxe: Failed sending'; }

d0=$(local_drops) f0=$(send_failures)
echo "net.core.netdev_max_backlog = $(cat /proc/sys/net/core/netdev_max_backlog)"
"$bin" "$size" "$rounds"
rc=$?
drops=$(( $(local_drops) - d0 )) fails=$(( $(send_failures) - f0 ))
echo "packets dropped on the way out: $drops; rxe's 'Failed sending' messages: $fails"
if [ $rc != 0 ]; then
    echo "FAIL: rxe delivered wrong data or failed a completion (gv_rxe_read_check rc $rc)"
    [ $drops -gt 0 ] || [ $fails -gt 0 ] &&
        echo "      after local packet drops: the Linux 6.1 rxe fault docs/verbs.md describes"
    exit 1
fi
if [ -z "${GV_RXE_NETEM:-}" ] && { [ $drops -gt 0 ] || [ $fails -gt 0 ]; }; then
    echo "FAIL: the VM's network dropped packets on their way out, which the real-verbs tier relies on"
    echo "      not happening (rxe of Linux 6.1 may then complete a READ whose data never landed):"
    echo "      is net.core.netdev_max_backlog still raised by tools/rdma-vm/run.sh's init?"
    exit 1
fi
echo "PASS"
