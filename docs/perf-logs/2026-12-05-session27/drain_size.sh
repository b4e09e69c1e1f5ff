#!/bin/bash
# The executor's code size and spills, alone (no benchmark around it): compiles drain_probe.cu
# (hold() of a BlockGroup and of a ThreadGroup) for sm_90 against the include/ of the tree given
# (default: this checkout) and prints ptxas's stack/spill lines and each kernel's instruction
# count (.text bytes / 16, read from the cubin by size.py). About 12 s on one core.
#   docs/perf-logs/2026-12-05-session27/drain_size.sh [TREE] [extra nvcc flags, e.g. -DGV_SOFT_SEND_RUNS=0]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tree=${1:-$(cd "$here/../../.." && pwd)}
shift || true
out=$(mktemp -d)
nvcc -O3 -DNDEBUG -DGV_HAVE_CUDA=1 -arch=sm_90 -std=c++17 -I"$tree/include" "$@" -Xptxas -v -cubin \
  "$here/drain_probe.cu" -o "$out/probe.cubin" 2>&1 | grep -E "error|Compiling|spill"
python3 "$here/size.py" "$out/probe.cubin"
rm -rf "$out"
