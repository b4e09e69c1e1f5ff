#!/usr/bin/env bash
# gpuverbs as another project sees it (docs/packaging.md), from a built tree:
#
#   tests/install/install_test.sh BUILD_DIR
#
#   1. `cmake --install BUILD_DIR --prefix TMP/prefix`; the tree holds every public header
#      (the same list as include/gpuverbs/, nothing else), libgpuverbs.so with its SONAME and
#      links, libgpuverbs.a, the CMake package, gpuverbs.pc, the tools and the docs; an
#      installed tool runs.
#   2. find_package(gpuverbs) from a probe project: 0.2 found with its usage requirements
#      (C++17, rdma-core, CUDA::cudart exactly when built with CUDA, gpuverbs_WITH_CUDA);
#      0.1, 0.3 and 1.0 refused by the version file; COMPONENTS cuda found or refused as the
#      build has CUDA or not; an unknown component refused, naming it.
#   3. examples/consumer built with CMake against the prefix (nvcc and the kernel path in a
#      CUDA build) and run: on a GPU machine with a CUDA build it must run its kernel; then
#      with --cpu.
#   4. examples/consumer built with its Makefile through pkg-config, linked with the shared
#      and the static library, both run.
#   5. `cpack -G DEB` from BUILD_DIR: the .deb's Depends (libibverbs1, ibverbs-providers, and
#      the CUDA runtime's package in a CUDA build) and contents, with dpkg-deb (skipped, said
#      so, where dpkg-deb is missing).
#
# Env: GV_INSTALL_TEST_KEEP=1 keeps TMP (printed) for a look afterwards.
# Exit status: 0 all good, 1 something failed (each failure listed), 2 bad usage.
set -uo pipefail

if [ $# -ne 1 ] || [ ! -f "$1/CMakeCache.txt" ]; then
    echo "usage: install_test.sh BUILD_DIR (a configured and built gpuverbs tree)" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d)
if [ "${GV_INSTALL_TEST_KEEP:-0}" = 1 ]; then
    echo "keeping $tmp"
else
    trap 'rm -rf "$tmp"' EXIT
fi
prefix=$tmp/prefix
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
ok() { echo "ok: $*"; }
# quiet LOG CMD...: runs CMD with its output in LOG, shown when it fails.
quiet() {
    local log=$1
    shift
    if "$@" >"$log" 2>&1; then return 0; fi
    echo "--- $* (exit status $?):"
    tail -n 40 "$log"
    return 1
}
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" | head -n 1; }

# --- 1. cmake --install -------------------------------------------------------------------
if ! quiet "$tmp/install.log" cmake --install "$build" --prefix "$prefix"; then
    fail "cmake --install $build --prefix $prefix"
    echo "$failures checks failed"
    exit 1
fi
libdir=$(cache CMAKE_INSTALL_LIBDIR)
libdir=${libdir:-lib}
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$build/CMakeCache.txt")
[ -n "$version" ] || version=$(sed -n 's/^project(gpuverbs VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
IFS=. read -r vmaj vmin _ <<<"$version"
with_cuda=0
grep -q '^set(gpuverbs_WITH_CUDA ON)' "$prefix/$libdir/cmake/gpuverbs/gpuverbs-config.cmake" 2>/dev/null && with_cuda=1
echo "installed gpuverbs $version into $prefix (libdir $libdir, built with CUDA: $with_cuda)"

# The headers: exactly include/gpuverbs/ of the source tree.
(cd "$root/include" && find gpuverbs -type f | sort) >"$tmp/src-headers"
(cd "$prefix/include" 2>/dev/null && find gpuverbs -type f | sort) >"$tmp/inst-headers"
if diff "$tmp/src-headers" "$tmp/inst-headers" >"$tmp/headers.diff"; then
    ok "$(wc -l <"$tmp/inst-headers") public headers installed under include/gpuverbs, nothing else"
else
    fail "the installed headers differ from include/gpuverbs (< source only, > installed only):"
    cat "$tmp/headers.diff"
fi
[ -z "$(find "$prefix/include" -type f ! -name '*.hpp' ! -name '*.cuh' ! -name '*.h')" ] ||
    fail "files other than headers under $prefix/include"

# The libraries: the shared one with its SONAME and links, the static one.
so=$prefix/$libdir/libgpuverbs.so
if [ "$vmaj" = 0 ]; then soname=libgpuverbs.so.$vmaj.$vmin; else soname=libgpuverbs.so.$vmaj; fi
[ -f "$so.$version" ] || fail "$so.$version missing"
[ "$(readlink "$so")" = "$soname" ] || fail "$so should link to $soname, links to '$(readlink "$so")'"
[ "$(readlink "$prefix/$libdir/$soname")" = "libgpuverbs.so.$version" ] ||
    fail "$prefix/$libdir/$soname should link to libgpuverbs.so.$version"
if command -v readelf >/dev/null; then
    dyn=$(readelf -d "$so.$version" 2>&1)
    grep -q "Library soname: \[$soname\]" <<<"$dyn" || fail "SONAME of libgpuverbs.so.$version is not $soname: $dyn"
    for need in libibverbs.so.1 libmlx5.so.1; do
        grep -q "Shared library: \[$need\]" <<<"$dyn" || fail "libgpuverbs.so does not need $need"
    done
    if [ $with_cuda = 1 ]; then
        grep -q 'Shared library: \[libcudart.so' <<<"$dyn" || fail "a CUDA build's libgpuverbs.so does not need libcudart"
    else
        grep -q 'libcudart\|libcuda\.' <<<"$dyn" && fail "a CPU-only libgpuverbs.so needs CUDA: $dyn"
    fi
    ok "libgpuverbs.so.$version, SONAME $soname, needs $(grep -o 'Shared library: \[[^]]*\]' <<<"$dyn" | sed 's/.*\[\(.*\)\]/\1/' | tr '\n' ' ')"
fi
[ -f "$prefix/$libdir/libgpuverbs.a" ] || fail "$prefix/$libdir/libgpuverbs.a missing"

# The package files, the tools, the docs.
for f in "$libdir/cmake/gpuverbs/gpuverbs-config.cmake" "$libdir/cmake/gpuverbs/gpuverbs-config-version.cmake" \
    "$libdir/cmake/gpuverbs/gpuverbs-targets.cmake" "$libdir/cmake/gpuverbs/gpuverbs-rdma.cmake" \
    "$libdir/pkgconfig/gpuverbs.pc" bin/gv_demo bin/gpuverbs_info bin/gv_selftest bin/gv_proxy_rate \
    libexec/gpuverbs/client_server share/doc/gpuverbs/README.md share/doc/gpuverbs/packaging.md \
    share/doc/gpuverbs/examples/consumer/CMakeLists.txt share/doc/gpuverbs/examples/consumer/Makefile; do
    [ -e "$prefix/$f" ] || fail "$f not installed"
done
if [ $with_cuda = 1 ]; then
    for f in gv_write_bw gv_read_bw gv_send_bw gv_write_lat gv_post_rate gv_compute_send; do
        [ -x "$prefix/bin/$f" ] || fail "bin/$f not installed (a CUDA build has it)"
    done
    [ -x "$prefix/libexec/gpuverbs/hello_rdma" ] || fail "libexec/gpuverbs/hello_rdma not installed"
fi
grep -rl "$root/src\|$build" "$prefix/$libdir/cmake" "$prefix/$libdir/pkgconfig" >"$tmp/leaks" &&
    fail "the installed package names the source or build tree: $(cat "$tmp/leaks")"
# An installed program runs from the prefix (nothing of the build tree needed): the demo on
# CPU threads, small.
if out=$("$prefix/bin/gv_demo" --cpu --qps 2 --iters 4 2>&1); then
    ok "installed bin/gv_demo --cpu runs"
else
    fail "installed bin/gv_demo --cpu --qps 2 --iters 4 failed: $out"
fi
ok "install tree: $(find "$prefix" -type f | wc -l) files ($(cd "$prefix" && find . -maxdepth 2 -mindepth 2 -type d | sed 's|^\./||' | sort | tr '\n' ' '))"

# --- 2. find_package ------------------------------------------------------------------------
mkdir -p "$tmp/probe"
cat >"$tmp/probe/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.25)
project(probe LANGUAGES CXX)
separate_arguments(comps UNIX_COMMAND "${COMPS}")
find_package(gpuverbs ${V} CONFIG REQUIRED ${comps})
foreach(t gpuverbs::gpuverbs gpuverbs::gpuverbs_static)
  foreach(p INTERFACE_INCLUDE_DIRECTORIES INTERFACE_COMPILE_FEATURES INTERFACE_LINK_LIBRARIES)
    get_target_property(v ${t} ${p})
    message(STATUS "probe: ${t} ${p}=${v}")
  endforeach()
endforeach()
message(STATUS "probe: gpuverbs_VERSION=${gpuverbs_VERSION} gpuverbs_WITH_CUDA=${gpuverbs_WITH_CUDA} gpuverbs_cuda_FOUND=${gpuverbs_cuda_FOUND}")
EOF
# probe VERSION COMPONENTS: configures the probe (one tree: the compiler is checked once).
probe() {
    cmake -S "$tmp/probe" -B "$tmp/probe/build" -DCMAKE_PREFIX_PATH="$prefix" -DV="$1" -DCOMPS="$2" \
        >"$tmp/probe.log" 2>&1
}
if probe "$vmaj.$vmin" ""; then
    p=$(cat "$tmp/probe.log")
    grep -q "probe: gpuverbs::gpuverbs INTERFACE_INCLUDE_DIRECTORIES=$prefix/include" <<<"$p" ||
        fail "gpuverbs::gpuverbs does not carry $prefix/include: $(grep probe: <<<"$p")"
    grep -q "probe: gpuverbs::gpuverbs INTERFACE_COMPILE_FEATURES=.*cxx_std_17" <<<"$p" || fail "no cxx_std_17 on gpuverbs::gpuverbs"
    grep -q "probe: gpuverbs::gpuverbs_static INTERFACE_LINK_LIBRARIES=.*gpuverbs::ibverbs.*gpuverbs::mlx5" <<<"$p" ||
        fail "gpuverbs::gpuverbs_static does not bring libibverbs and libmlx5: $(grep probe: <<<"$p")"
    if [ $with_cuda = 1 ]; then
        grep -q "probe: gpuverbs::gpuverbs INTERFACE_LINK_LIBRARIES=.*CUDA::cudart" <<<"$p" || fail "a CUDA build's target lacks CUDA::cudart"
    else
        grep -q "probe: gpuverbs::gpuverbs INTERFACE_LINK_LIBRARIES=.*CUDA::" <<<"$p" && fail "a CPU-only build's target needs CUDA"
    fi
    cuda_word=OFF
    [ $with_cuda = 1 ] && cuda_word=ON
    grep -q "gpuverbs_VERSION=$version gpuverbs_WITH_CUDA=$cuda_word" <<<"$p" ||
        fail "version or CUDA variable wrong: $(grep 'probe: gpuverbs_VERSION' <<<"$p")"
    ok "find_package(gpuverbs $vmaj.$vmin): $(grep -o 'gpuverbs_VERSION=.*' <<<"$p")"
else
    fail "find_package(gpuverbs $vmaj.$vmin) failed:"
    tail -n 20 "$tmp/probe.log"
fi
# Versions the policy refuses (0.x: the same minor version only), and one it accepts.
if [ "$vmaj" = 0 ]; then refused=("0.$((vmin + 1))" "1.0"); [ "$vmin" -gt 0 ] && refused+=("0.$((vmin - 1))")
else refused=("$((vmaj + 1)).0" "$((vmaj - 1)).0"); fi
for v in "${refused[@]}"; do
    if probe "$v" ""; then
        fail "find_package(gpuverbs $v) accepted $version"
    elif grep -q "version: $version" "$tmp/probe.log"; then
        ok "find_package(gpuverbs $v) refused (installed: $version)"
    else
        fail "find_package(gpuverbs $v) failed without naming the version found: $(tail -n 15 "$tmp/probe.log")"
    fi
done
probe "$vmaj.$vmin.0" "" || fail "find_package(gpuverbs $vmaj.$vmin.0) refused $version"
if [ $with_cuda = 1 ]; then
    if probe "$vmaj.$vmin" cuda; then
        ok "COMPONENTS cuda: found (a CUDA build)"
    else
        fail "COMPONENTS cuda refused by a CUDA build: $(tail -n 15 "$tmp/probe.log")"
    fi
else
    if probe "$vmaj.$vmin" cuda; then
        fail "COMPONENTS cuda accepted by a CPU-only build"
    elif grep -q "was built without CUDA" "$tmp/probe.log"; then
        ok "COMPONENTS cuda: refused, saying the build has no CUDA"
    else
        fail "COMPONENTS cuda refused without the reason: $(tail -n 15 "$tmp/probe.log")"
    fi
fi
if probe "$vmaj.$vmin" bogus; then
    fail "COMPONENTS bogus accepted"
elif grep -q "no component 'bogus'" "$tmp/probe.log"; then
    ok "COMPONENTS bogus: refused, naming it"
else
    fail "COMPONENTS bogus refused without naming it: $(tail -n 15 "$tmp/probe.log")"
fi

# --- 3. The consumer, CMake ---------------------------------------------------------------
gpu=0
command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && gpu=1
cargs=(-DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release)
if [ $with_cuda = 1 ]; then
    # The build tree's nvcc (the consumer's own search would find another, or none, off PATH).
    cargs+=(-DCMAKE_CUDA_COMPILER="$(cache CMAKE_CUDA_COMPILER)")
fi
if quiet "$tmp/consumer-cmake.log" cmake -S "$root/examples/consumer" -B "$tmp/consumer-cmake" "${cargs[@]}" &&
    quiet "$tmp/consumer-build.log" cmake --build "$tmp/consumer-cmake" -j"$(nproc)"; then
    grep -q "found in $prefix/$libdir/cmake/gpuverbs" "$tmp/consumer-cmake.log" ||
        fail "the consumer did not find the package in $prefix: $(grep 'gpuverbs' "$tmp/consumer-cmake.log")"
    if [ $with_cuda = 1 ] && ! grep -q "gv_consumer: CUDA kernel" "$tmp/consumer-cmake.log"; then
        fail "a CUDA build, but the consumer was compiled without its kernel: $(grep gv_consumer: "$tmp/consumer-cmake.log"); its configure log ends: $(tail -n 25 "$tmp/consumer-cmake.log")"
    fi
    if out=$("$tmp/consumer-cmake/gv_consumer" 2>&1); then
        echo "  (CMake) $out"
        if [ $with_cuda = 1 ] && [ $gpu = 1 ] && [[ "$out" != *"CUDA kernel on GPU 0"* ]]; then
            fail "CUDA build on a GPU machine, but the consumer did not run its kernel"
        fi
        ok "consumer built with CMake (find_package) runs"
    else
        fail "the consumer built with CMake failed: $out"
    fi
    if [ $with_cuda = 1 ]; then
        if out=$("$tmp/consumer-cmake/gv_consumer" --cpu 2>&1); then
            echo "  (CMake, --cpu) $out"
        else
            fail "the CMake consumer with --cpu failed: $out"
        fi
    fi
    out=$("$tmp/consumer-cmake/gv_consumer" --bogus 2>&1)
    rc=$?
    if [ $rc != 2 ] || [[ "$out" != *"--bogus"* ]]; then
        fail "gv_consumer --bogus: exit $rc (expected 2, naming it): $out"
    fi
else
    fail "the consumer does not build with CMake against $prefix"
fi

# --- 4. The consumer, Makefile + pkg-config -----------------------------------------------
if ! command -v pkg-config >/dev/null; then
    fail "pkg-config missing (scripts/setup.sh installs it)"
else
    export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    v=$(pkg-config --modversion gpuverbs 2>&1)
    [ "$v" = "$version" ] || fail "pkg-config --modversion gpuverbs: $v (expected $version)"
    [[ " $(pkg-config --cflags gpuverbs) " == *" -I$prefix/include "* ]] ||
        fail "pkg-config --cflags gpuverbs lacks -I$prefix/include: $(pkg-config --cflags gpuverbs)"
    [[ "$(pkg-config --libs gpuverbs) " == *"-L$prefix/$libdir -lgpuverbs "* ]] ||
        fail "pkg-config --libs gpuverbs: $(pkg-config --libs gpuverbs)"
    if quiet "$tmp/make.log" make -C "$root/examples/consumer" BUILD="$tmp/consumer-make" \
        "$tmp/consumer-make/gv_consumer" "$tmp/consumer-make/gv_consumer_static"; then
        if readelf -d "$tmp/consumer-make/gv_consumer_static" 2>/dev/null | grep -q libgpuverbs; then
            fail "gv_consumer_static needs libgpuverbs.so"
        fi
        for b in gv_consumer gv_consumer_static; do
            if out=$("$tmp/consumer-make/$b" 2>&1); then
                echo "  (make, $b) $out"
            else
                fail "the consumer built by make ($b) failed: $out"
            fi
        done
        ok "consumer built with make + pkg-config (shared and static) runs"
    else
        fail "the consumer does not build with make + pkg-config"
    fi
fi

# --- 5. cpack -G DEB ----------------------------------------------------------------------
if ! command -v dpkg-deb >/dev/null; then
    echo "skipped: the .deb check (no dpkg-deb here)"
elif quiet "$tmp/cpack.log" cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/deb"; then
    deb=$(find "$tmp/deb" -maxdepth 1 -name '*.deb' | head -n 1)
    depends=$(dpkg-deb -f "$deb" Depends)
    for d in libibverbs1 ibverbs-providers; do
        grep -qE "(^|, )$d( |,|$)" <<<"$depends" || fail "the .deb does not depend on $d: $depends"
    done
    if [ $with_cuda = 1 ]; then
        grep -q "cuda-cudart-" <<<"$depends" || fail "a CUDA build's .deb does not depend on the CUDA runtime: $depends"
    else
        grep -q "cuda" <<<"$depends" && fail "a CPU-only .deb depends on CUDA: $depends"
    fi
    dpkg-deb -c "$deb" | awk '{print $NF}' >"$tmp/deb-contents"
    for f in "./usr/include/gpuverbs/gpuverbs.hpp" "./usr/include/gpuverbs/device.cuh" \
        "./usr/$libdir/libgpuverbs.so.$version" "./usr/$libdir/libgpuverbs.a" \
        "./usr/$libdir/cmake/gpuverbs/gpuverbs-config.cmake" "./usr/$libdir/pkgconfig/gpuverbs.pc" \
        "./usr/bin/gv_demo" "./usr/share/doc/gpuverbs/packaging.md"; do
        grep -qx "$f" "$tmp/deb-contents" || fail "the .deb lacks $f"
    done
    # The package's gpuverbs.pc names /usr, the prefix it installs into.
    mkdir -p "$tmp/deb-x"
    dpkg-deb -x "$deb" "$tmp/deb-x"
    grep -q '^prefix=/usr$' "$tmp/deb-x/usr/$libdir/pkgconfig/gpuverbs.pc" ||
        fail "the .deb's gpuverbs.pc does not say prefix=/usr: $(grep prefix= "$tmp/deb-x/usr/$libdir/pkgconfig/gpuverbs.pc")"
    ok "$(basename "$deb"): $(wc -l <"$tmp/deb-contents") entries; Depends: $depends"
else
    fail "cpack -G DEB"
fi

if [ "$failures" -gt 0 ]; then
    echo "$failures checks failed"
    exit 1
fi
echo "all install checks passed"
