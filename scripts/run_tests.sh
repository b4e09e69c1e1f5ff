#!/usr/bin/env bash
# Installs the dependencies, builds gpuverbs and runs every test: the CPU tests, the GPU tests
# (label "gpu"; they skip themselves with the reason where no GPU exists), the install check
# (tests/install/install_test.sh: cmake --install, examples/consumer built against it with
# CMake and pkg-config and run, the .deb), the real-verbs tier
# (label "rdma-vm": the verbs tests inside a Soft-RoCE VM, tools/rdma-vm; skipped with the reason
# where qemu is missing, failed instead in CI), then the CPU tests again in a second tree built
# with AddressSanitizer and UndefinedBehaviorSanitizer.
#
# Env (see also scripts/common.sh): GV_SKIP_SANITIZERS=1 skips the sanitizer tree;
# GV_SKIP_RDMA_VM=1 skips the real-verbs tier;
# GV_ASAN_BUILD_DIR (default build-asan); GV_CTEST_JOBS (parallel CPU tests, default nproc).
# A quick CPU-only try on a machine with nvcc but no GPU: GV_CMAKE_ARGS=-DGV_ENABLE_CUDA=OFF.
# Exits non-zero when anything fails; every test stage runs even after an earlier one failed.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$GV_ROOT"

GV_ASAN_BUILD_DIR=${GV_ASAN_BUILD_DIR:-build-asan}
CTEST_JOBS=${GV_CTEST_JOBS:-$GV_JOBS}
failed=()

# run_ctest NAME DIR ARGS...: records a failure instead of stopping; the output stays in
# DIR/ctest-last.log. Then checks that no test said it skipped while ctest counted it as
# passed (tests/skip_guard.py, over ctest's JUnit report).
run_ctest() {
    local name=$1 dir=$2
    shift 2
    rm -f "$dir/ctest-junit.xml"
    if ! ctest --test-dir "$dir" --output-on-failure --no-tests=ignore --output-junit ctest-junit.xml "$@" 2>&1 |
        tee "$dir/ctest-last.log"; then
        failed+=("$name")
    fi
    if ! command -v python3 >/dev/null; then
        failed+=("$name: python3 is missing (scripts/setup.sh installs it), so skips were not checked")
    elif [ -f "$dir/ctest-junit.xml" ] && ! python3 "$GV_ROOT/tests/skip_guard.py" junit "$dir/ctest-junit.xml"; then
        failed+=("$name: a test said it skipped but ctest counted it as passed (listed above)")
    fi
}


section "setup: dependencies (scripts/setup.sh)"
"$GV_ROOT/scripts/setup.sh"
describe_gpu

section "configure: $GV_BUILD_DIR ($GV_BUILD_TYPE)"
configure "$GV_BUILD_DIR"

section "build: $GV_BUILD_DIR (-j$GV_JOBS)"
build_tree "$GV_BUILD_DIR" || fail "build of $GV_BUILD_DIR failed"

# GPU tests run one at a time (they share one GPU), the VM tier on its own (it keeps both cores
# busy); everything else in parallel.
section "test: CPU tests ($GV_BUILD_DIR, ctest -LE 'gpu|rdma-vm' -j$CTEST_JOBS)"
run_ctest "CPU tests" "$GV_BUILD_DIR" -LE 'gpu|rdma-vm' -j"$CTEST_JOBS"

section "test: GPU tests ($GV_BUILD_DIR, ctest -L gpu)"
n_gpu=$(ctest --test-dir "$GV_BUILD_DIR" -N -L gpu | awk '/Total Tests:/ {print $3}')
if [ "${n_gpu:-0}" -gt 0 ]; then
    run_ctest "GPU tests" "$GV_BUILD_DIR" -L gpu
    skip_reason "$GV_BUILD_DIR"
else
    echo "no GPU tests in this tree: it was built without CUDA (no nvcc found, or GV_ENABLE_CUDA=OFF)"
fi

# gpuverbs as another project uses it: installed into a temporary prefix, found by
# examples/consumer through its CMake package and through pkg-config, the consumer run, the
# .deb's contents and dependencies checked (tests/install/install_test.sh, docs/packaging.md).
section "test: install and consumer ($GV_BUILD_DIR: cmake --install into a temporary prefix, examples/consumer with CMake and pkg-config, cpack -G DEB)"
if ! "$GV_ROOT/tests/install/install_test.sh" "$GV_BUILD_DIR"; then
    failed+=("install and consumer (tests/install/install_test.sh)")
fi

if [ "${GV_SKIP_RDMA_VM:-0}" = 1 ]; then
    section "real-verbs tier: skipped (GV_SKIP_RDMA_VM=1)"
else
    section "test: real-verbs tier, Soft-RoCE VM ($GV_BUILD_DIR, ctest -L rdma-vm)"
    run_ctest "real-verbs tier (Soft-RoCE VM)" "$GV_BUILD_DIR" -L rdma-vm
    skip_reason "$GV_BUILD_DIR"
fi

if [ "${GV_SKIP_SANITIZERS:-0}" = 1 ]; then
    section "sanitizers: skipped (GV_SKIP_SANITIZERS=1)"
else
    section "configure: $GV_ASAN_BUILD_DIR (AddressSanitizer + UndefinedBehaviorSanitizer, CPU only)"
    GV_BUILD_TYPE=RelWithDebInfo configure "$GV_ASAN_BUILD_DIR" \
        -DGV_SANITIZE=address,undefined -DGV_ENABLE_CUDA=OFF

    section "build: $GV_ASAN_BUILD_DIR (-j$GV_JOBS)"
    build_tree "$GV_ASAN_BUILD_DIR" || fail "build of $GV_ASAN_BUILD_DIR failed"

    section "test: CPU tests under ASan + UBSan ($GV_ASAN_BUILD_DIR, ctest -L cpu -j$CTEST_JOBS)"
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
        run_ctest "CPU tests under sanitizers" "$GV_ASAN_BUILD_DIR" -L cpu -j"$CTEST_JOBS"
fi

section "summary"
if [ ${#failed[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "${failed[@]}"
    exit 1
fi
echo "all tests passed ($((SECONDS - GV_T0)) s)"
