#!/usr/bin/env bash
# Installs what gpuverbs needs to build and test on Debian or Ubuntu, as root (or through sudo).
# Idempotent: packages already present are skipped, and when nothing is missing no package
# registry is contacted, so it also runs on machines without network access.
#
# CUDA is not installed here: it is optional and found when gpuverbs is configured (nvcc in
# PATH or /usr/local/cuda/bin/nvcc).
#
# The real-verbs tier (tests/verbs/rdma_vm_test.sh, ctest label rdma-vm) boots a Soft-RoCE VM
# (tools/rdma-vm): its host packages are installed too, and the package lists are refreshed when
# they cannot name the Debian kernel package the VM image is made from (the image itself is
# built by the test RdmaVm.image under the build tree).
#
# Env: GV_SETUP_SKIP=1 skips everything (for machines set up by other means);
#      GV_RDMA_VM=0 leaves out the VM's packages (the rdma-vm tier then skips, or fails in CI).
set -euo pipefail

log() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

if [ "${GV_SETUP_SKIP:-0}" = 1 ]; then
    log "GV_SETUP_SKIP=1: skipped"
    exit 0
fi

lib() { compgen -G "/usr/lib/*/$1" >/dev/null || compgen -G "/usr/lib*/$1" >/dev/null; }

# have PACKAGE: the Debian package is installed, or what it provides is already on the machine
# (some machines carry a toolchain or library installed by other means than dpkg).
have() {
    local status
    status=$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] && return 0
    case $1 in
        cmake | make | pkg-config | python3) command -v "$1" >/dev/null ;;
        g++) command -v g++ >/dev/null ;;
        libibverbs-dev) [ -f /usr/include/infiniband/mlx5dv.h ] && lib libmlx5.so && lib libibverbs.so ;;
        ibverbs-providers) lib libmlx5.so.1 ;;
        rdma-core) [ -x /usr/sbin/rdma-ndd ] ;;
        libgtest-dev) [ -f /usr/include/gtest/gtest.h ] || [ -f /usr/local/include/gtest/gtest.h ] ;;
        qemu-system-x86) command -v qemu-system-x86_64 >/dev/null ;;
        cpio) command -v cpio >/dev/null ;;
        kmod) [ -x /sbin/depmod ] && [ -x /sbin/modprobe ] ;;
        xz-utils) command -v xz >/dev/null ;;
        iproute2) [ -x /usr/sbin/ip ] && [ -x /usr/bin/rdma ] ;;
        python3-matplotlib) python3 -c 'import matplotlib' >/dev/null 2>&1 ;;
        *) return 1 ;;
    esac
}

# Needed to build and test; then wanted but not needed: rdma-core's daemons and udev rules
# (for real RDMA devices) and matplotlib (for the benchmark plots).
REQUIRED=(cmake g++ make pkg-config python3 libibverbs-dev ibverbs-providers libgtest-dev)
OPTIONAL=(rdma-core python3-matplotlib)
# The Soft-RoCE VM of the real-verbs tier (tools/rdma-vm/run.sh deps names the same). Installed
# like the optional ones (one by one, a warning when one cannot be): the tier itself says what
# is missing, and fails in CI.
if [ "${GV_RDMA_VM:-1}" != 0 ]; then
    OPTIONAL+=(qemu-system-x86 busybox-static cpio kmod xz-utils iproute2)
fi

missing=()
for p in "${REQUIRED[@]}" "${OPTIONAL[@]}"; do have "$p" || missing+=("$p"); done

if [ ${#missing[@]} -eq 0 ]; then
    log "all packages present (${REQUIRED[*]} ${OPTIONAL[*]})"
else
    command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get: install them by hand"
    SUDO=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || die "missing ${missing[*]}: run as root or install sudo"
        SUDO=(sudo)
    fi
    export DEBIAN_FRONTEND=noninteractive
    log "installing: ${missing[*]}"
    aptlog=$(mktemp)
    trap 'rm -f "$aptlog"' EXIT
    # apt's output goes to a log, shown when a step fails.
    quiet() { "$@" >"$aptlog" 2>&1 || { tail -n 30 "$aptlog" >&2; return 1; }; }
    apt_install() { quiet "${SUDO[@]}" apt-get install -y --no-install-recommends "$@"; }
    req=() opt=()
    for p in "${missing[@]}"; do
        case " ${OPTIONAL[*]} " in *" $p "*) opt+=("$p") ;; *) req+=("$p") ;; esac
    done
    # Short timeouts: a machine without a registry should not wait long to find out.
    if ! quiet "${SUDO[@]}" apt-get -o Acquire::Retries=0 -o Acquire::http::Timeout=15 update; then
        log "warning: apt-get update failed; trying the cached package lists"
        if [ ${#req[@]} -eq 0 ]; then  # only optional packages missing: do not insist
            log "warning: ${opt[*]} not installed (the build and tests do not need it)"
            opt=()
        fi
    fi
    if [ ${#req[@]} -gt 0 ]; then
        apt_install "${req[@]}" || die "could not install ${req[*]} (is a package registry reachable?)"
    fi
    if [ ${#opt[@]} -gt 0 ]; then
        # One by one, quietly: any that cannot be installed is only worth a warning.
        for p in "${opt[@]}"; do
            "${SUDO[@]}" apt-get install -y --no-install-recommends "$p" >"$aptlog" 2>&1 ||
                log "warning: $p not installed (the build and tests do not need it)"
        done
    fi
fi

# The VM image is made from the kernel package linux-image-amd64 names: the package lists must
# know it (a machine whose lists were emptied needs an update, once).
if [ "${GV_RDMA_VM:-1}" != 0 ] && command -v apt-cache >/dev/null &&
    ! apt-cache depends linux-image-amd64 2>/dev/null | grep -q 'Depends: linux-image-[0-9]'; then
    if [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null; then
        log "refreshing the package lists (the rdma-vm tier needs the kernel package's name)"
        SUDO=(); [ "$(id -u)" -eq 0 ] || SUDO=(sudo)
        "${SUDO[@]}" apt-get -o Acquire::Retries=0 -o Acquire::http::Timeout=15 update >/dev/null 2>&1 ||
            log "warning: apt-get update failed; the rdma-vm tier cannot build its VM image"
    fi
fi

# CMakeLists.txt needs CMake 3.25 (Debian 12, Ubuntu 24.04 and later have it).
cmake_version=$(cmake --version | awk 'NR == 1 {print $3}')
if [ "$(printf '%s\n3.25\n' "$cmake_version" | sort -V | head -1)" != 3.25 ]; then
    die "CMake $cmake_version is too old: gpuverbs needs 3.25 or later"
fi

nvcc=$(command -v nvcc || true)
if [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ]; then nvcc=/usr/local/cuda/bin/nvcc; fi
if [ -n "$nvcc" ]; then
    log "CUDA: $nvcc ($("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"
else
    log "CUDA: no nvcc found; the CPU-only library and tests will be built"
fi
log "done"
