#!/usr/bin/env bash
# Installs what gpuverbs needs to build and test on Debian or Ubuntu, as root (or through sudo).
# Idempotent: packages already present are skipped, and when nothing is missing no package
# registry is contacted, so it also runs on machines without network access.
#
# CUDA is not installed here: it is optional and found when gpuverbs is configured (nvcc in
# PATH or /usr/local/cuda/bin/nvcc).
#
# Env: GV_SETUP_SKIP=1 skips everything (for machines set up by other means).
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
        python3-matplotlib) python3 -c 'import matplotlib' >/dev/null 2>&1 ;;
        *) return 1 ;;
    esac
}

# Needed to build and test; then wanted but not needed: rdma-core's daemons and udev rules
# (for real RDMA devices) and matplotlib (for the benchmark plots).
REQUIRED=(cmake g++ make pkg-config python3 libibverbs-dev ibverbs-providers libgtest-dev)
OPTIONAL=(rdma-core python3-matplotlib)

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
