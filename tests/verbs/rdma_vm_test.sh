#!/bin/bash
# The real-verbs tier of ctest (RdmaVm.*): builds the Soft-RoCE VM image of tools/rdma-vm, or
# runs a command inside that VM, as a test.
#
#   rdma_vm_test.sh image LAB                  build (or find up to date) the image under LAB
#   rdma_vm_test.sh exec LAB DIR -- CMD...     run CMD in DIR inside the VM; pass = CMD exits 0
#
# What the VM needs on the host (qemu-system-x86, busybox-static, ...) is installed by
# scripts/setup.sh (as root). Where it is missing, the test is skipped (exit 77, with the reason)
# on a developer's machine, and FAILS in CI (CI=true, or GV_RDMA_VM_REQUIRED=1): a real-verbs
# tier that skips itself in CI would test nothing. Anything else that goes wrong (the image
# cannot be built, the VM does not boot or runs past RXE_TIMEOUT, the command fails) fails.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
run=$here/../../tools/rdma-vm/run.sh
required=0
[ "${CI:-}" = true ] || [ "${GV_RDMA_VM_REQUIRED:-0}" = 1 ] && required=1

[ $# -ge 2 ] || { echo "usage: $0 image LAB | exec LAB DIR -- CMD..." >&2; exit 2; }
mode=$1 lab=$2
shift 2
export LAB=$lab
export RXE_TIMEOUT=${RXE_TIMEOUT:-240}

# A prerequisite is missing: skip on a developer's machine, fail in CI.
unavailable() {
    if [ $required = 1 ]; then
        echo "FAIL: the Soft-RoCE VM cannot run here and this is CI (CI=true): $*"
        echo "(scripts/setup.sh installs the host packages, as root; it is part of .ci/run)"
        exit 1
    fi
    echo "SKIP: the Soft-RoCE VM cannot run here: $*"
    echo "(as root: scripts/setup.sh, or tools/rdma-vm/run.sh deps; CI=true makes this a failure)"
    exit 77
}

miss=$(bash "$run" check 2>&1 | sed -n 's/^  //p')
[ -z "$miss" ] || unavailable "missing $(echo "$miss" | paste -sd ';' - | sed 's/;/; /g')"

case $mode in
image)
    t0=$SECONDS
    bash "$run" image || { echo "FAIL: tools/rdma-vm/run.sh image could not build the VM image in $lab"; exit 1; }
    echo "image ready in $((SECONDS - t0)) s"
    ;;
exec)
    [ $# -ge 3 ] && [ "$2" = -- ] || { echo "usage: $0 exec LAB DIR -- CMD..." >&2; exit 2; }
    [ -f "$lab/out/vmlinux" ] && [ -f "$lab/out/initramfs.cpio" ] ||
        { echo "FAIL: no VM image in $lab/out (the test RdmaVm.image builds it: did it fail?)"; exit 1; }
    t0=$SECONDS
    console=$(mktemp)
    trap 'rm -f "$console"' EXIT
    bash "$run" exec "$@" 2>&1 | tee "$console"
    rc=${PIPESTATUS[0]}
    echo "rdma_vm_test: command rc=$rc after $((SECONDS - t0)) s (VM boot included)"
    # rxe could not send some packets: Linux 6.1's rxe may then complete a READ whose data never
    # landed (docs/verbs.md). The VM's init makes that unlikely; say so when it happened anyway.
    sends=$(grep -c 'rdma_rxe: Failed sending' "$console")
    [ "$sends" = 0 ] || echo "NOTE: rxe failed to send $sends times in this run (dmesg above): wrong data" \
        "or a missing completion after that may well be the Linux 6.1 rxe fault of docs/verbs.md"
    if [ $rc = 125 ]; then
        echo "FAIL: the VM did not finish: it died or ran past RXE_TIMEOUT=${RXE_TIMEOUT}s (console above)"
        exit 1
    fi
    [ $rc = 0 ] || { echo "FAIL: the command failed in the VM (rc $rc)"; exit 1; }
    ;;
*)
    echo "usage: $0 image LAB | exec LAB DIR -- CMD..." >&2
    exit 2
    ;;
esac
