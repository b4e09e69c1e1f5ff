# shellcheck shell=bash
# shellcheck disable=SC2034  # GV_* variables are used by the scripts that source this one
# Shared by run_demo.sh and run_tests.sh (sourced, not run).
#
# Env: GV_BUILD_DIR (default build), GV_BUILD_TYPE (default Release),
#      GV_CMAKE_ARGS (extra configure arguments, split on spaces, e.g.
#      "-DCMAKE_CUDA_ARCHITECTURES=80"), GV_SETUP_SKIP=1 (skip scripts/setup.sh).

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
