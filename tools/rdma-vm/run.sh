#!/bin/bash
# Soft-RoCE (rdma_rxe) inside a small qemu/TCG VM, for running real libibverbs code (and CI's
# real-verbs tier, tests/verbs/rdma_vm_test.sh) on machines without an RDMA NIC. README.md.
#
#   run.sh setup                 deps + image (as root, once per machine)
#   run.sh deps                  install the host packages (apt, root): qemu-system-x86, busybox-static,
#                                cpio, kmod, xz-utils, iproute2, ibverbs-providers (+ perftest, ibverbs-utils)
#   run.sh image                 download and unpack the Debian kernel package (nothing is installed in
#                                /boot), build vmlinux + initramfs under $LAB/out (~15-30 s; no root needed;
#                                skipped when already built for this kernel and this script)
#                                SIW=1: also build siw.ko out of tree (Soft-iWARP, device siw0 on
#                                dummy1 10.0.1.1; rdma_cm only); needs linux-headers + linux-source (~30 s)
#   run.sh check                 say what is missing to boot the VM (exit 1 if anything is)
#   run.sh perftest              boot, create rxe0, run ibv_devices + perftest suite, power off (~1 min)
#   run.sh exec DIR -- CMD...    boot; in the guest chroot into the host's / (9p, read-only) with DIR
#                                mounted read-write at the same path, run CMD in DIR as root; exit with
#                                CMD's rc. Inside: RDMA device rxe0 on dummy0, IPv4 10.0.0.1 (GID index 1).
#                                DIR must hold everything the command needs besides the host's / (the
#                                guest's /tmp and /run are empty tmpfs). rc 125: guest died / timed out.
# Env: LAB (default $TMPDIR/gpuverbs-rdma-vm), RXE_TIMEOUT (s, default 300), MEM (1G), SMP (2), VERBOSE=1,
#      QEMU (default qemu-system-x86_64)
set -euo pipefail
LAB=${LAB:-${TMPDIR:-/tmp}/gpuverbs-rdma-vm}
OUT=$LAB/out
MEM=${MEM:-1G}; SMP=${SMP:-2}; RXE_TIMEOUT=${RXE_TIMEOUT:-300}; QEMU=${QEMU:-qemu-system-x86_64}
SELF=$(readlink -f "${BASH_SOURCE[0]}")

die() { echo "run.sh: $*" >&2; exit 2; }

# Host packages: what boots the VM and builds its initramfs; then what the perftest mode uses.
DEPS=(qemu-system-x86 busybox-static cpio kmod xz-utils iproute2 ibverbs-providers)
DEPS_OPTIONAL=(perftest ibverbs-utils)

deps() {
  [ "$(id -u)" = 0 ] || die "deps: run as root (apt-get install ${DEPS[*]})"
  export DEBIAN_FRONTEND=noninteractive
  [ -n "$(find /var/lib/apt/lists -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ] || apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${DEPS[@]}" >/dev/null
  apt-get install -y -q --no-install-recommends "${DEPS_OPTIONAL[@]}" >/dev/null 2>&1 ||
    echo "run.sh: warning: ${DEPS_OPTIONAL[*]} not installed (only the perftest mode needs them)" >&2
}

# missing: what the image build or a boot lacks, one line each (nothing: all there).
missing() {
  command -v "$QEMU" >/dev/null || echo "$QEMU (package qemu-system-x86)"
  [ -x /bin/busybox ] && /bin/busybox --list >/dev/null 2>&1 || echo "/bin/busybox (package busybox-static)"
  command -v cpio >/dev/null || echo "cpio (package cpio)"
  [ -x /sbin/depmod ] && [ -x /sbin/modprobe ] || echo "depmod/modprobe (package kmod)"
  command -v xz >/dev/null || echo "xz (package xz-utils)"
  [ -x /usr/sbin/ip ] && [ -x /usr/bin/rdma ] || echo "ip and rdma (package iproute2)"
  compgen -G "/usr/lib/*/libibverbs/librxe-rdmav*.so" >/dev/null || echo "the rxe provider librxe (package ibverbs-providers)"
  [ -f /etc/libibverbs.d/rxe.driver ] || echo "/etc/libibverbs.d/rxe.driver (package ibverbs-providers)"
}

check() {
  local m; m=$(missing)
  if [ -n "$m" ]; then
    echo "run.sh: missing to build and boot the VM (as root: tools/rdma-vm/run.sh deps, or scripts/setup.sh):"
    echo "$m" | sed 's/^/  /'
    return 1
  fi
  [ -f $OUT/vmlinux ] && [ -f $OUT/initramfs.cpio ] || { echo "run.sh: no VM image in $OUT (run.sh image builds it)"; return 1; }
  echo "run.sh: ready (image in $OUT, kernel $(cat $OUT/kver 2>/dev/null))"
}

image() {
  local m; m=$(missing)
  [ -z "$m" ] || die "cannot build the image, missing: $(echo "$m" | paste -sd ';' -) (as root: $0 deps)"
  mkdir -p $LAB/debs $OUT
  # Kernel: the package linux-image-amd64 points at, downloaded and unpacked (nothing is installed)
  local pkg; pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  [ -n "$pkg" ] || die "cannot resolve the kernel package (apt-cache depends linux-image-amd64 found none: run apt-get update as root)"
  local kv=${pkg#linux-image-}
  local stamp; stamp="$kv $(sha256sum "$SELF" | cut -c1-16) ${SIW:-}"
  if [ -f $OUT/vmlinux ] && [ -f $OUT/initramfs.cpio ] && [ "$(cat $OUT/stamp 2>/dev/null)" = "$stamp" ]; then
    echo "image: up to date in $OUT (kernel $kv)"
    return 0
  fi
  if [ ! -f $LAB/kpkg/boot/vmlinuz-$kv ]; then
    if ! ls $LAB/debs/${pkg}_*.deb >/dev/null 2>&1 && ! (cd $LAB/debs && apt-get download -q "$pkg" >/dev/null 2>&1); then
      # Stale package lists name a kernel the registry no longer has: refresh them once (root).
      [ "$(id -u)" = 0 ] && apt-get update -q >/dev/null 2>&1 || die "apt-get download $pkg failed (is a Debian package registry reachable? are the package lists current?)"
      pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
      kv=${pkg#linux-image-}
      stamp="$kv $(sha256sum "$SELF" | cut -c1-16) ${SIW:-}"
      (cd $LAB/debs && apt-get download -q "$pkg" >/dev/null 2>&1) || die "apt-get download $pkg failed after apt-get update"
    fi
    rm -rf $LAB/kpkg; dpkg-deb -x $LAB/debs/${pkg}_*.deb $LAB/kpkg
    /sbin/depmod -b $LAB/kpkg $kv
  fi
  echo $kv > $OUT/kver
  [ -z "${SIW:-}" ] || build_siw $kv
  # Uncompressed ELF vmlinux: qemu boots it via PVH, skipping the ~5 s the xz decompressor takes under TCG
  local off; off=$(grep -abo $'\xfd7zXZ\x00' $LAB/kpkg/boot/vmlinuz-$kv | head -1 | cut -d: -f1)
  tail -c +$((off+1)) $LAB/kpkg/boot/vmlinuz-$kv | xz -dc 2>/dev/null > $OUT/vmlinux || true
  [ "$(head -c 4 $OUT/vmlinux | od -An -c | tr -d ' ')" = '177ELF' ] || die "vmlinux extraction failed"
  build_initramfs $kv
  echo "$stamp" > $OUT/stamp
}

setup() { deps; image; }

build_siw() {  # Debian's kernels have CONFIG_RDMA_SIW unset: build siw.ko out of tree from linux-source
  local kv=$1 src; src=linux-source-${kv%%.*}.$(echo $kv | cut -d. -f2 | cut -d- -f1)
  [ -f $LAB/siw-src/build/siw.ko ] && return 0
  apt-get install -y -q --no-install-recommends linux-headers-$kv >/dev/null
  mkdir -p $LAB/siw-src && cd $LAB/siw-src
  ls $LAB/debs/${src}_*.deb >/dev/null 2>&1 || (cd $LAB/debs && apt-get download -q $src >/dev/null 2>&1)
  dpkg-deb --fsys-tarfile $LAB/debs/${src}_*.deb | tar -x --wildcards "./usr/src/$src.tar.xz" -O |
    tar -xJ --wildcards "$src/drivers/infiniband/sw/siw/*"
  rm -rf build; cp -r $src/drivers/infiniband/sw/siw build
  make -s -C /usr/src/linux-headers-$kv M=$LAB/siw-src/build CONFIG_RDMA_SIW=m modules
  strip --strip-debug $LAB/siw-src/build/siw.ko
  cd - >/dev/null
}

build_initramfs() {
  local kv=$1 K=$LAB/kpkg R=$OUT/root
  rm -rf $R; mkdir -p $R/{bin,usr/bin,lib/modules,etc/libibverbs.d,proc,sys,dev,tmp,run,share,host}
  cp /bin/busybox $R/bin/busybox
  for a in $(/bin/busybox --list); do [ -e $R/bin/$a ] || ln -s busybox $R/bin/$a; done
  # Modules + dependencies in load order. crc32_generic is not a modules.dep dependency of rdma_rxe,
  # but rxe needs the "crc32" crypto shash (without it: "rdma_rxe: failed to add dummy0", ENOENT).
  : > $R/modules.load
  local libs; libs="$(echo /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so) /usr/lib/x86_64-linux-gnu/libstdc++.so.6"
  local extra=""; [ -f $LAB/siw-src/build/siw.ko ] && extra="libcrc32c crc32c_generic"
  { for m in crc32_generic crc32-pclmul rdma_rxe rdma_ucm 9pnet_virtio 9p virtio_pci dummy veth virtio_net $extra; do
      /sbin/modprobe -d $K -S $kv --show-depends $m | awk '{print $2}'
    done
    # Optional: the netem qdisc (GV_RXE_NETEM of tests/verbs/rxe_hosts.sh); a kernel without it as a
    # module builds an image that cannot use that, nothing else.
    /sbin/modprobe -d $K -S $kv --show-depends sch_netem 2>/dev/null | awk '$1 == "insmod" {print $2}' || true
  } | awk '!seen[$0]++' | while read -r p; do cp $p $R/lib/modules/; basename $p >> $R/modules.load; done
  if [ -n "$extra" ]; then cp $LAB/siw-src/build/siw.ko $R/lib/modules/; echo siw.ko >> $R/modules.load
    cp /etc/libibverbs.d/siw.driver $R/etc/libibverbs.d/; libs="$libs /usr/lib/x86_64-linux-gnu/libibverbs/libsiw-rdmav34.so"; fi
  local bins="/usr/bin/ibv_devices /usr/bin/ibv_devinfo /usr/bin/ibv_rc_pingpong /usr/bin/ib_write_bw
    /usr/bin/ib_read_bw /usr/bin/ib_send_bw /usr/bin/ib_write_lat /usr/bin/ib_read_lat /usr/bin/ib_send_lat
    /usr/bin/rdma /usr/sbin/ip /usr/sbin/tc"
  local have=""   # perftest and ibverbs-utils are optional: only the perftest mode runs them
  for b in $bins; do [ -x $b ] && { cp $b $R/usr/bin/; have="$have $b"; }; done; bins=$have
  cp /etc/libibverbs.d/rxe.driver $R/etc/libibverbs.d/
  for f in $bins $libs; do ldd $f | awk '/=>/ {print $3} /ld-linux/ {print $1}'; echo $f; done |
    grep '^/' | grep -v '^/usr/s\?bin' | sort -u | while read -r l; do
      local real; real=$(readlink -f $l); mkdir -p $R$(dirname $l) $R$(dirname $real)
      cp -n $real $R$real; [ "$real" = "$l" ] || ln -sf $real $R$l
    done
  write_init > $R/init; chmod +x $R/init
  write_perftest > $R/guest-test.sh; chmod +x $R/guest-test.sh
  (cd $R && find . | cpio -o -H newc --quiet) > $OUT/initramfs.cpio
  echo "initramfs: $(du -h $OUT/initramfs.cpio | cut -f1), kernel $kv"
}

write_init() { cat <<'EOF'
#!/bin/sh
# PID 1 (busybox): modules, rxe0 on dummy0, optional 9p mounts, run the job, power off.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mkdir -p /dev/pts; mount -t devpts devpts /dev/pts; mount -t tmpfs tmpfs /tmp
up() { cut -d' ' -f1 /proc/uptime; }
echo "@@ init uptime=$(up)"
for m in $(cat /modules.load); do insmod /lib/modules/$m 2>/dev/null || echo "(insmod $m failed)"; done
IP=/usr/bin/ip   # full path: busybox sh prefers its own 'ip' applet, which lacks some link types
$IP link set lo up
# Packets between two rxe devices of this guest (and to rxe0's own address) pass the per-CPU
# backlog of received packets; at its default of 1000 a burst of READ responses overflows it, the
# send fails ("rdma_rxe: Failed sending ...") and Linux 6.1's rxe may then complete a READ whose
# data never landed (docs/verbs.md). A backlog this long drops nothing; RdmaVm.rxe_read_check
# checks that.
echo 100000 > /proc/sys/net/core/netdev_max_backlog
[ -e /sys/class/net/dummy0 ] || $IP link add dummy0 type dummy   # dummy.ko creates dummy0 itself
$IP addr add 10.0.0.1/24 dev dummy0; $IP link set dummy0 up
rdma link add rxe0 type rxe netdev dummy0 || echo "@@ rdma link add rxe0 FAILED"
echo "@@ rxe0 ready uptime=$(up)"
if [ -e /sys/module/siw ]; then   # only when built with SIW=1: Soft-iWARP (needs rdma_cm) on its own
  $IP link add dummy1 type dummy; $IP addr add 10.0.1.1/24 dev dummy1; $IP link set dummy1 up   # netdev:
  rdma link add siw0 type siw netdev dummy1 && echo "@@ siw0 ready uptime=$(up)" || echo "@@ siw0 FAILED"
fi                                # (siw on lo + 127.0.0.1 failed: rdma_resolve_route)
if grep -q share9p /proc/cmdline; then
  mount -t 9p -o trans=virtio,version=9p2000.L share /share || echo "@@ 9p share mount FAILED"
fi
if grep -q hostroot /proc/cmdline; then   # the host's / read-only at /host, for chroot
  mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /host &&
  mount -o bind /proc /host/proc && mount -o bind /sys /host/sys && mount -o bind /dev /host/dev &&
  mount -t devpts devpts /host/dev/pts 2>/dev/null; mount -t tmpfs tmpfs /host/tmp && mount -t tmpfs tmpfs /host/run &&
  mkdir -p /host/run/rxe-ctl && mount -o bind /share /host/run/rxe-ctl || echo "@@ host root mount FAILED"
  for a in $(cat /proc/cmdline); do case $a in workdir=*) WD=${a#workdir=};; esac; done
  if [ -n "$WD" ]; then   # the host's work dir, read-write, at the same path inside the chroot
    mkdir -p /host$WD 2>/dev/null; mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 work /host$WD ||
      echo "@@ workdir mount FAILED"
  fi
  echo "@@ host root mounted uptime=$(up)"
fi
T=/guest-test.sh; [ -x /share/guest-test.sh ] && T=/share/guest-test.sh
sh $T
echo "@@ guest mem: $(free -m | awk '/Mem:/ {print "used=" $3 "MiB total=" $2 "MiB"}') uptime=$(up)"
sync; poweroff -f
EOF
}

write_perftest() { cat <<'EOF'
#!/bin/sh
up() { cut -d' ' -f1 /proc/uptime; }
ibv_devices; rdma link show
ibv_devinfo -d rxe0 | grep -E 'hca_id|transport|state|active_mtu|link_layer'
fails=0
D=rxe0
pt() {  # pt SERVERADDR TOOL ARGS...: server in background, client, both bounded
  a=$1; n=$2; shift 2; t0=$(up)
  timeout 90 $n -d $D "$@" > /tmp/srv.log 2>&1 & sp=$!
  sleep 1
  timeout 85 $n -d $D "$@" $a > /tmp/cli.log 2>&1; rc=$?
  wait $sp; src=$?
  echo "@@ $D $n $* -> $a rc=$rc/$src secs=$(echo "$(up) $t0" | awk '{print $1-$2}')"
  grep -A1 -E '#bytes' /tmp/cli.log | tail -1
  [ $rc -eq 0 ] && [ $src -eq 0 ] || { fails=$((fails+1)); cat /tmp/srv.log /tmp/cli.log; }
}
pt 10.0.0.1 ib_write_bw
pt 10.0.0.1 ib_read_bw
pt 10.0.0.1 ib_send_bw
pt 10.0.0.1 ib_write_lat
pt 10.0.0.1 ib_read_lat
pt 10.0.0.1 ib_send_lat
pt 127.0.0.1 ib_write_bw -s 4096 -n 2000
pt 10.0.0.1 ib_write_bw -R
if [ -e /sys/class/infiniband/siw0 ]; then
  D=siw0
  for t in ib_write_bw ib_read_bw ib_send_bw ib_write_lat ib_read_lat ib_send_lat; do pt 10.0.1.1 $t -R; done
fi
echo "@@ perftest failures: $fails"
EOF
}

secs_since() { awk -v a="$EPOCHREALTIME" -v b="$1" 'BEGIN { printf "%.2f", a - b }'; }

qemu_boot() {  # qemu_boot APPEND_EXTRA [qemu args...]; streams the console; returns qemu's rc
  local extra=$1; shift
  [ -f $OUT/vmlinux ] && [ -f $OUT/initramfs.cpio ] || die "no VM image in $OUT: run '$0 image' (or '$0 setup' as root) first"
  command -v "$QEMU" >/dev/null || die "$QEMU not found (package qemu-system-x86; as root: $0 deps)"
  local t0=$EPOCHREALTIME rc=0 timecmd=()
  [ -x /usr/bin/time ] && timecmd=(/usr/bin/time -f "qemu maxrss_kb=%M" -o $OUT/qemu.time)
  rm -f $OUT/qemu.time
  set +e
  # KVM is not used: this host's /dev/kvm (kvm_pvm) boots a stock kernel only very slowly and then
  # stops with "KVM internal error ... emulation failure"; TCG works.
  timeout -k 5 $RXE_TIMEOUT "${timecmd[@]}" \
    "$QEMU" -accel tcg,thread=multi${TCG_OPTS:+,$TCG_OPTS} -cpu max -m $MEM -smp $SMP -nographic -no-reboot \
      -nic none -vga none -kernel $OUT/vmlinux -initrd $OUT/initramfs.cpio \
      -append "console=ttyS0 quiet panic=-1 $extra" "$@" </dev/null 2>&1 |
    while IFS= read -r l; do
      l=${l%$'\r'}
      if [ -n "${VERBOSE:-}" ]; then printf '%7s %s\n' "$(secs_since $t0)" "$l"; else printf '%s\n' "$l"; fi
    done
  rc=${PIPESTATUS[0]}
  set -e
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || echo "@@ host: qemu killed after RXE_TIMEOUT=${RXE_TIMEOUT}s"
  echo "@@ host: qemu rc=$rc wall=$(secs_since $t0)s $(cat $OUT/qemu.time 2>/dev/null | tail -1)"
  return $rc
}

cmd=${1:-}; shift || true
case $cmd in
  setup) setup ;;
  deps) deps ;;
  image) image ;;
  check) check ;;
  perftest) qemu_boot "" ;;
  exec)
    [ $# -ge 3 ] && [ "$2" = "--" ] || die "usage: $0 exec DIR -- CMD..."
    wd=$(readlink -f "$1"); shift 2
    [ -d "$wd" ] || die "no such dir $wd"
    case "$wd" in *[[:space:]]*) die "DIR must not contain spaces";; esac
    mkdir -p $LAB
    ctl=$(mktemp -d $LAB/ctl.XXXXXX)
    trap 'rm -rf "$ctl"' EXIT
    printf '%q ' "$@" > $ctl/cmd
    cat > $ctl/guest-test.sh <<EOF
#!/bin/sh
chroot /host /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp \
  TERM=dumb RDMA_DEVICE=rxe0 RDMA_GID_INDEX=1 RDMA_IPV4=10.0.0.1 /bin/bash -c 'cd $wd && . /run/rxe-ctl/cmd'
echo \$? > /share/rc
echo "@@ command rc=\$(cat /share/rc) uptime=\$(cut -d' ' -f1 /proc/uptime)"
EOF
    chmod +x $ctl/guest-test.sh
    qemu_boot "share9p hostroot workdir=$wd" \
      -virtfs local,path=$ctl,mount_tag=share,security_model=none \
      -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
      -virtfs local,path=$wd,mount_tag=work,security_model=none || true
    rc=125; [ -s $ctl/rc ] && rc=$(cat $ctl/rc)
    exit $rc ;;
  *) sed -n '2,23p' "$0"; exit 2 ;;
esac
