#!/bin/bash
# The differential check, inside the Soft-RoCE VM (ctest RdmaVm.differential): the same cases
# on the software device (CPU threads) and on rxe0 through the verbs backend, recorded as JSON
# lines in OUTDIR (soft.jsonl, rxe.jsonl), then compared (differential.py: the table, and a
# failure for any difference not explained by rxe's known deviations).
#
#   differential.sh GV_DIFFERENTIAL DIFFERENTIAL_PY OUTDIR
set -uo pipefail
[ $# = 3 ] || { echo "usage: $0 GV_DIFFERENTIAL DIFFERENTIAL_PY OUTDIR" >&2; exit 2; }
bin=$1 py=$2 out=$3
mkdir -p "$out" || exit 1
[ -n "${RDMA_DEVICE:-}" ] || { echo "FAIL: RDMA_DEVICE is unset: run this inside the Soft-RoCE VM"; exit 1; }
"$bin" --backend soft --out "$out/soft.jsonl" || { echo "FAIL: the software device's run"; exit 1; }
"$bin" --backend verbs --out "$out/rxe.jsonl" || { echo "FAIL: the verbs backend's run on $RDMA_DEVICE"; exit 1; }
python3 "$py" "$out/soft.jsonl" "$out/rxe.jsonl" --markdown
