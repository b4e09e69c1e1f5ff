# shellcheck shell=bash
# shellcheck disable=SC2034  # GV_* variables are used by the scripts that source this one
# Shared by run_demo.sh and run_tests.sh (sourced, not run).
#
# Env: GV_BUILD_DIR (default build), GV_BUILD_TYPE (default Release),
#      GV_CMAKE_ARGS (extra configure arguments, split on spaces, e.g.
#      "-DCMAKE_CUDA_ARCHITECTURES=80", or "-DGV_ENABLE_CUDA=OFF" for a quick CPU-only tree),
#      GV_SETUP_SKIP=1 (skip scripts/setup.sh), GV_HEARTBEAT_S (seconds of silence before a
#      build says it still runs, default 30).

GV_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GV_BUILD_DIR=${GV_BUILD_DIR:-build}
GV_BUILD_TYPE=${GV_BUILD_TYPE:-Release}
GV_JOBS=$(nproc)
GV_T0=$SECONDS

# section TITLE: a header that stands out in long CI logs, with the time since the start.
section() {
    printf '\n==== %s  [%s +%ds]\n' "$*" "$(date +%H:%M:%S)" $((SECONDS - GV_T0))
}

fail() {
    printf '\nerror: %s\n' "$*" >&2
    exit 1
}

# configure DIR [CMAKE_ARGS...]: configures DIR with the build type and GV_CMAKE_ARGS.
configure() {
    local dir=$1
    shift
    # shellcheck disable=SC2086  # GV_CMAKE_ARGS is a list of words
    cmake -S "$GV_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE="$GV_BUILD_TYPE" "$@" ${GV_CMAKE_ARGS:-} ||
        fail "cmake could not configure $dir"
}

# describe_gpu: what the machine offers the GPU parts, for the log.
describe_gpu() {
    if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
        echo "GPUs: $(nvidia-smi -L | wc -l) ($(nvidia-smi -L | head -1 | sed 's/ (UUID.*//'))"
    else
        echo "GPUs: none visible (GPU tests skip themselves; the demo runs on CPU threads)"
    fi
}

# gpu_visible: true when nvidia-smi lists a GPU.
gpu_visible() { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }

# cuda_tree DIR: true when DIR was configured with the GPU parts (CUDA enabled, which leaves
# CMAKE_CUDA_FLAGS in the cache, and GV_ENABLE_CUDA not OFF).
cuda_tree() {
    local cache=$1/CMakeCache.txt
    [ -f "$cache" ] || return 1
    grep -q '^GV_ENABLE_CUDA:BOOL=OFF' "$cache" && return 1
    grep -q '^CMAKE_CUDA_FLAGS:STRING=' "$cache"
}

# about CORE_MINUTES MAX_PARALLEL: roughly how long work of CORE_MINUTES takes on GV_JOBS
# cores, when at most MAX_PARALLEL compilations can run at once.
about() {
    local cores=$GV_JOBS
    [ "$cores" -gt "$2" ] && cores=$2
    local m=$((($1 + cores - 1) / cores))
    [ "$m" -le 1 ] && echo "about a minute" || echo "about $m min"
}

# heartbeat LABEL: copies its input through; after GV_HEARTBEAT_S (30) seconds without a line
# (nvcc compiles a large file in silence for up to two minutes), says that LABEL still runs.
heartbeat() {
    local label=$1 quiet=${GV_HEARTBEAT_S:-30} t0=$SECONDS line st
    while :; do
        line=""
        IFS= read -r -t "$quiet" line && st=0 || st=$?
        if [ $st = 0 ]; then
            printf '%s\n' "$line"
        elif [ $st -gt 128 ]; then
            [ -n "$line" ] && printf '%s' "$line"
            printf '  ... %s: still running (%d s so far)\n' "$label" $((SECONDS - t0))
        else
            [ -n "$line" ] && printf '%s\n' "$line"  # a last line without a newline
            return 0
        fi
    done
}

# build_tree DIR: builds DIR (-jGV_JOBS), saying first what it builds and roughly how long a
# fresh build of it takes on this machine, and while the build is silent that it still runs.
# Returns the build's exit status.
build_tree() {
    local dir=$1 what time
    if cuda_tree "$dir"; then
        # Measured: 1407 s on 2 cores of the development machine (2026-12-06: about 46
        # core-minutes there, most of it nvcc on the GPU tests and tools; tools/gv_bench.cu alone
        # 3.5 minutes); on many cores the longest compilations decide (327 s on 16 cores of an
        # H200 machine, 2026-12-05; 217-301 s, then 293 and 395 s on 16 cores of H100 machines,
        # 2026-12-05 and 2026-12-06): as if at most 8 ran at once.
        what="the library, samples, tools and tests, with the GPU code (CUDA)"
        time=$(about 46 8)
        if ! gpu_visible; then
            what="$what; no GPU here, so its tests will skip (CI keeps compiling it);"
            what="$what GV_CMAKE_ARGS=-DGV_ENABLE_CUDA=OFF builds a CPU-only tree instead"
        fi
    elif grep -q '^GV_SANITIZE:STRING=.' "$dir/CMakeCache.txt" 2>/dev/null; then
        what="the CPU-only library, samples, tools and tests, with sanitizers (slower to compile)"
        time=$(about 8 8)
    else
        what="the CPU-only library, samples, tools and tests"
        time=$(about 4 8)
    fi
    echo "building $dir: $what"
    echo "  a fresh build takes $time on $GV_JOBS cores (an up-to-date tree: seconds)"
    cmake --build "$dir" -j"$GV_JOBS" 2>&1 | heartbeat "building $dir"
}

# skip_reason DIR: ctest does not show why a test skipped itself: print what the first
# skipped test of the last run said.
skip_reason() {
    local dir=$1 n why out
    n=$(awk '/\(Skipped\)$/ {print $1; exit}' "$dir/ctest-last.log")
    [ -n "$n" ] || return 0
    out=$(ctest --test-dir "$dir" -I "$n,$n" -V 2>&1 || true)
    # A gtest skip prints "file:line: Skipped" and the reason on the next line; a script that
    # exits 77 prints a line that starts "SKIP" or "tool: SKIP" (else its last line is taken).
    # (Under set -e a grep that finds nothing must not end the run: it did, after every test
    # had passed, where the VM tier skips.)
    why=$(printf '%s\n' "$out" | grep -A1 ': Skipped$' | tail -n 1 | sed 's/^[0-9]*: //' || true)
    [ -n "$why" ] || why=$(printf '%s\n' "$out" | grep -E '^[0-9]+: ([A-Za-z0-9_.-]+: )?SKIP' | head -n 1 | sed 's/^[0-9]*: //' || true)
    [ -n "$why" ] || why=$(printf '%s\n' "$out" | grep -E '^[0-9]+: ' | tail -n 1 | sed 's/^[0-9]*: //' || true)
    printf 'why they skipped (test %s): %s\n' "$n" "${why:-the test printed no reason}"
}
