#!/usr/bin/env bash
# What scripts/run_tests.sh and scripts/run_demo.sh tell a newcomer while they build
# (scripts/common.sh), checked without building anything (cmake is stood in for):
#   - before a build, a line saying what it builds and roughly how long a fresh build takes on
#     this machine; for a CUDA tree on a machine without a GPU, that its tests will skip and
#     how to build a CPU-only tree instead (GV_CMAKE_ARGS=-DGV_ENABLE_CUDA=OFF);
#   - while a build prints nothing, a line every GV_HEARTBEAT_S seconds that it still runs,
#     its output passed through and its exit status kept;
#   - the README says how to make the quick CPU-only try.
set -u
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
# shellcheck source=scripts/common.sh
source "$root/scripts/common.sh"
# (after common.sh, whose fail() exits)
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
set -o pipefail

# 1. The heartbeat: lines pass through, silence is reported, the status is kept.
out=$( (echo first; sleep 2.6; echo last) | GV_HEARTBEAT_S=1 heartbeat "building x")
n=$(grep -c "building x: still running" <<<"$out")
[ "$n" -ge 2 ] || fail "heartbeat: $n 'still running' lines in 2.6 s of silence (expected 2): $out"
[ "$(head -n 1 <<<"$out")" = first ] || fail "heartbeat: the first line did not pass through: $out"
[ "$(tail -n 1 <<<"$out")" = last ] || fail "heartbeat: the last line did not pass through: $out"
out=$( (echo quick) | GV_HEARTBEAT_S=5 heartbeat x)
[ "$out" = quick ] || fail "heartbeat: a quick command got extra lines: $out"
if (false | heartbeat x); then fail "heartbeat: a failed command's status was lost"; fi
printf 'no newline' | heartbeat x >"$tmp/nl"
[ "$(cat "$tmp/nl")" = "no newline" ] || fail "heartbeat: a last line without a newline was lost"

# 1b. skip_reason (run_tests.sh, after each ctest stage): the reason a script test printed
# before it exited 77 is shown, and nothing ends the run (under set -e a grep that found no
# gtest "Skipped" line ended run_tests.sh after every test had passed, where the VM tier skips).
if command -v ctest >/dev/null; then
    mkdir -p "$tmp/skip"
    # The stand-in test skips (status 77, in SKIP: this script itself never skips, and
    # tests/skip_guard.py looks for scripts that do).
    SKIP=77
    cat >"$tmp/skip/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.16)
project(skip NONE)
enable_testing()
add_test(NAME Vm.image COMMAND bash -c "echo 'SKIP: qemu-system-x86_64 is missing'; echo '(a hint)'; exit $SKIP")
set_tests_properties(Vm.image PROPERTIES SKIP_RETURN_CODE $SKIP)
CM
    if command cmake -S "$tmp/skip" -B "$tmp/skip/b" >/dev/null 2>&1; then
        ctest --test-dir "$tmp/skip/b" >"$tmp/skip/b/ctest-last.log" 2>&1
        out=$(set -e; skip_reason "$tmp/skip/b"; echo "returned")
        grep -q "why they skipped (test 1): SKIP: qemu-system-x86_64 is missing" <<<"$out" ||
            fail "skip_reason: the script test's reason is missing: $out"
        grep -q returned <<<"$out" || fail "skip_reason: it ended the shell (set -e): $out"
    else
        fail "skip_reason: could not configure the stand-in ctest project"
    fi
fi

# 2. The line before a build: stand-ins for cmake, nvidia-smi and the tree's cache.
cmake() { echo "cmake $*"; }
mkdir -p "$tmp/cuda" "$tmp/cpu" "$tmp/off" "$tmp/asan"
printf 'GV_ENABLE_CUDA:BOOL=ON\nCMAKE_CUDA_FLAGS:STRING=\n' >"$tmp/cuda/CMakeCache.txt"
printf 'GV_ENABLE_CUDA:BOOL=ON\nCMAKE_CXX_FLAGS:STRING=\n' >"$tmp/cpu/CMakeCache.txt"  # no nvcc found
printf 'GV_ENABLE_CUDA:BOOL=OFF\nCMAKE_CUDA_FLAGS:STRING=\n' >"$tmp/off/CMakeCache.txt"
gpu_visible() { return 1; }
# shellcheck disable=SC2034  # read by build_tree
GV_JOBS=2
out=$(build_tree "$tmp/cuda")
[[ "$out" == *"with the GPU code (CUDA)"* ]] || fail "build_tree: a CUDA tree not announced as such: $out"
[[ "$out" == *"about 23 min on 2 cores"* ]] || fail "build_tree: no time estimate for 2 cores: $out"
[[ "$out" == *"its tests will skip"*"GV_CMAKE_ARGS=-DGV_ENABLE_CUDA=OFF"* ]] ||
    fail "build_tree: without a GPU, no hint of the CPU-only tree: $out"
[ "$(grep -n "cmake --build $tmp/cuda -j2" <<<"$out" | cut -d: -f1)" = 3 ] ||
    fail "build_tree: the plan is not printed before the build: $out"
# shellcheck disable=SC2034
GV_JOBS=16
out=$(build_tree "$tmp/cuda")
[[ "$out" == *"about 6 min on 16 cores"* ]] || fail "build_tree: no time estimate for 16 cores: $out"
gpu_visible() { return 0; }
out=$(build_tree "$tmp/cuda")
[[ "$out" == *GV_ENABLE_CUDA* ]] && fail "build_tree: the CPU-only hint where a GPU runs the tests: $out"
printf 'GV_ENABLE_CUDA:BOOL=OFF\nGV_SANITIZE:STRING=address,undefined\n' >"$tmp/asan/CMakeCache.txt"
# shellcheck disable=SC2034
GV_JOBS=2
out=$(build_tree "$tmp/asan")
[[ "$out" == *"with sanitizers"*"about 4 min on 2 cores"* ]] || fail "build_tree: the sanitizer tree's estimate: $out"
for t in cpu off; do
    out=$(build_tree "$tmp/$t")
    [[ "$out" == *"the CPU-only library"* ]] || fail "build_tree: the $t tree not announced as CPU-only: $out"
done
cmake() { echo "error"; return 3; }
if build_tree "$tmp/cpu" >/dev/null; then fail "build_tree: a failed build returned success"; fi
unset -f cmake

# 3. The README: the quick CPU-only try.
grep -q "GV_CMAKE_ARGS=-DGV_ENABLE_CUDA=OFF scripts/run_tests.sh" "$root/README.md" ||
    fail "README.md does not show GV_CMAKE_ARGS=-DGV_ENABLE_CUDA=OFF scripts/run_tests.sh"

if [ "$failures" -gt 0 ]; then
    echo "$failures checks failed"
    exit 1
fi
echo "all checks passed"
