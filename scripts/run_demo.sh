#!/usr/bin/env bash
# Installs the dependencies, builds gpuverbs (Release) and runs the main job, tools/gv_demo:
# RDMA writes and reads on the software RDMA device, from a CUDA kernel where a GPU exists and
# from CPU threads elsewhere, every byte verified. Arguments are passed to gv_demo.
#
# Env: see scripts/common.sh (GV_BUILD_DIR, GV_BUILD_TYPE, GV_CMAKE_ARGS, GV_SETUP_SKIP).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$GV_ROOT"

section "setup: dependencies (scripts/setup.sh)"
"$GV_ROOT/scripts/setup.sh"
describe_gpu

section "configure: $GV_BUILD_DIR ($GV_BUILD_TYPE)"
configure "$GV_BUILD_DIR"

section "build: gv_demo (-j$GV_JOBS)"
# Only the demo and what it needs: the test binaries are left to scripts/run_tests.sh.
if ! cmake --build "$GV_BUILD_DIR" --target help | grep -w gv_demo >/dev/null; then
    fail "this checkout has no gv_demo target (tools/CMakeLists.txt defines none yet), so there is no demo to run"
fi
echo "building gv_demo and the library in $GV_BUILD_DIR (about a minute; a little more with CUDA)"
cmake --build "$GV_BUILD_DIR" --target gv_demo -j"$GV_JOBS" 2>&1 | heartbeat "building gv_demo" ||
    fail "build of gv_demo failed"
demo=$GV_BUILD_DIR/tools/gv_demo
[ -x "$demo" ] || fail "the build finished but $demo does not exist"

section "run: $demo $*"
"$demo" "$@"
