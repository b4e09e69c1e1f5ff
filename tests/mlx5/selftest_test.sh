#!/bin/bash
# gv_selftest as users run it.
#
#   selftest_test.sh real GV_SELFTEST GPUVERBS_INFO   (label cpu) on this machine: the command line's
#       exit statuses; without a ConnectX, a GPU or CUDA it must say why on one SKIP line and exit
#       77; with both it must pass (exit 0)
#   selftest_test.sh standin GV_SELFTEST_STANDIN      (label gpu) the same program over the stand-in
#       NIC: every operation passes under both handlers; a UAR the GPU cannot map makes Auto take
#       the CPU proxy (said once on stderr, with PeerMappingOverride) and Gpu fail with the fix.
#       Exit 77 (skipped) without a GPU.
set -uo pipefail
mode=$1
prog=$2
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$prog" --help > "$tmp/help" 2>&1; rc=$?
[ $rc = 0 ] || fail "--help exited $rc"
grep -q '^usage: gv_selftest' "$tmp/help" || fail "--help printed no usage"
"$prog" --handler maybe > /dev/null 2> "$tmp/err"; rc=$?
[ $rc = 2 ] || fail "--handler maybe exited $rc, expected 2"
grep -q -- '--handler maybe: expected auto, gpu, cpu-proxy or all' "$tmp/err" || fail "bad --handler: $(cat "$tmp/err")"
"$prog" --size 1 > /dev/null 2>&1; rc=$?
[ $rc = 2 ] || fail "--size 1 exited $rc, expected 2"

case $mode in
real)
    info=$3
    "$prog" > "$tmp/out" 2>&1; rc=$?
    cat "$tmp/out"
    # What this machine has, as gpuverbs_info sees it: a run needs CUDA, a GPU and a ConnectX.
    read -r cuda gpus connectx < <("$info" --json | python3 -c "import json,sys; r=json.load(sys.stdin); s=r['system']; print(int(s['cuda_built']), s['gpu_count'], sum(d['connectx'] for d in r['rdma_devices']))")
    if [ "$cuda" = 1 ] && [ "$gpus" -gt 0 ] && [ "$connectx" -gt 0 ]; then
        [ $rc = 0 ] || fail "CUDA, a GPU and a ConnectX are here, and gv_selftest exited $rc"
    else
        [ $rc = 77 ] || fail "no ConnectX, GPU or CUDA here (cuda $cuda, $gpus GPU(s), $connectx ConnectX), yet gv_selftest exited $rc (expected 77)"
        [ "$(grep -c 'SKIP' "$tmp/out")" = 1 ] || fail "expected exactly one SKIP line"
        grep -q '^gv_selftest: SKIP: ' "$tmp/out" || fail "the SKIP line does not start with 'gv_selftest: SKIP: '"
        if [ "$cuda" = 0 ]; then
            grep -q 'without CUDA' "$tmp/out" || fail "the SKIP line does not say CUDA is missing"
        elif [ "$gpus" = 0 ]; then
            grep -q 'no GPU' "$tmp/out" || fail "the SKIP line does not say there is no GPU"
        else
            grep -q 'no ConnectX' "$tmp/out" || fail "the SKIP line does not say there is no ConnectX"
            grep -q 'PeerMappingOverride=1' "$tmp/out" || fail "the SKIP line does not say what a run needs"
        fi
    fi
    ;;
standin)
    "$prog" --handler all > "$tmp/out" 2> "$tmp/err"; rc=$?
    cat "$tmp/out" "$tmp/err"
    [ $rc = 77 ] && { echo "SKIP: $(grep SKIP "$tmp/out")"; exit 77; }
    [ $rc = 0 ] || fail "gv_selftest_standin --handler all exited $rc"
    [ "$(grep -c '^  PASS' "$tmp/out")" = 12 ] || fail "expected 12 PASS lines (6 operations x 2 handlers)"
    grep -q 'FAIL' "$tmp/out" && fail "a FAIL line"
    # An unmappable UAR: Auto falls back to the CPU proxy, saying why once.
    "$prog" --handler auto --uar-unmappable > "$tmp/out2" 2> "$tmp/err2"; rc=$?
    cat "$tmp/out2" "$tmp/err2"
    [ $rc = 0 ] || fail "--handler auto with an unmappable UAR exited $rc"
    grep -q 'doorbell: cpu-proxy' "$tmp/out2" || fail "Auto did not take the CPU proxy"
    [ "$(grep -c 'PeerMappingOverride=1' "$tmp/err2")" = 1 ] || fail "the fallback was not said exactly once on stderr"
    # Gpu asked for with an unmappable UAR: FAIL with the fix, exit 1.
    "$prog" --handler gpu --uar-unmappable > "$tmp/out3" 2>&1; rc=$?
    cat "$tmp/out3"
    [ $rc = 1 ] || fail "--handler gpu with an unmappable UAR exited $rc, expected 1"
    grep -q 'FAIL gpu handler: .*PeerMappingOverride=1' "$tmp/out3" || fail "the gpu handler's failure does not give the fix"
    # all with an unmappable UAR: gpu SKIP, cpu-proxy passes.
    "$prog" --handler all --uar-unmappable > "$tmp/out4" 2>&1; rc=$?
    cat "$tmp/out4"
    [ $rc = 0 ] || fail "--handler all with an unmappable UAR exited $rc"
    grep -q 'SKIP gpu handler' "$tmp/out4" || fail "no SKIP line for the gpu handler"
    [ "$(grep -c '^  PASS' "$tmp/out4")" = 6 ] || fail "expected 6 PASS lines (cpu-proxy)"
    ;;
esac
echo PASS
