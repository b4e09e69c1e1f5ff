#!/bin/bash
# gpuverbs_info as users run it: the exit statuses of its command-line convention, the text
# and JSON reports, and what it says about the RDMA devices present:
#
#   info_test.sh GPUVERBS_INFO                    any machine (label cpu): checks whatever devices
#                                                 libibverbs lists, none included
#   info_test.sh GPUVERBS_INFO --expect rxe0      inside the Soft-RoCE VM (label rdma-vm): rxe0 must
#                                                 be listed, with a port, a GID and "not a ConnectX"
set -uo pipefail
info=$1
shift
expect=""
[ "${1:-}" = --expect ] && expect=$2
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# --help: usage on stdout, exit 0.
"$info" --help > "$tmp/help" 2> "$tmp/help.err"; rc=$?
[ $rc = 0 ] || fail "--help exited $rc"
grep -q '^usage: gpuverbs_info' "$tmp/help" || fail "--help printed no usage on stdout"
[ -s "$tmp/help.err" ] && fail "--help wrote to stderr"
# A bad option: named on stderr, exit 2. A missing value: the same.
"$info" --frobnicate > "$tmp/out" 2> "$tmp/err"; rc=$?
[ $rc = 2 ] || fail "an unknown option exited $rc, expected 2"
grep -q -- 'unknown option --frobnicate' "$tmp/err" || fail "the unknown option is not named: $(cat "$tmp/err")"
"$info" --gpu > /dev/null 2> "$tmp/err"; rc=$?
[ $rc = 2 ] || fail "--gpu without a value exited $rc, expected 2"
grep -q -- '--gpu needs a value' "$tmp/err" || fail "--gpu without a value: $(cat "$tmp/err")"
"$info" --gpu x > /dev/null 2> "$tmp/err"; rc=$?
[ $rc = 2 ] || fail "--gpu x exited $rc, expected 2"

# The text report: exit 0 whatever the machine has, and the sections.
"$info" > "$tmp/text" 2> "$tmp/text.err"; rc=$?
cat "$tmp/text"
[ $rc = 0 ] || fail "gpuverbs_info exited $rc: $(cat "$tmp/text.err")"
for section in System 'RDMA devices' GPUs 'ConnectX with GPU'; do
    grep -q "^$section\$" "$tmp/text" || fail "no '$section' section"
done
grep -q 'Backend::Auto would choose' "$tmp/text" || fail "no Backend::Auto line"
grep -q 'has not run on a ConnectX yet' "$tmp/text" || fail "the report does not say the mlx5 backend is untested on hardware"

# The JSON report: one object, parsed by python3; the devices it lists are libibverbs' own.
"$info" --json > "$tmp/json" 2> "$tmp/json.err"; rc=$?
[ $rc = 0 ] || fail "--json exited $rc: $(cat "$tmp/json.err")"
python3 - "$tmp/json" "$tmp/text" "$expect" <<'PY' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
expect = sys.argv[3]
def fail(m):
    print("FAIL:", m); sys.exit(1)
assert r["tool"] == "gpuverbs_info"
if r["mlx5_backend_ran_on_hardware"] is not False: fail("claims the mlx5 backend ran on hardware")
devs = r["rdma_devices"]
if not devs:
    if "none: libibverbs lists no RDMA device" not in text: fail("no device, but the text does not say so")
    if not any(m["what"] == "an RDMA device" for m in r["missing"]): fail("no device, but nothing says it is missing")
    if "Backend::Auto would choose soft" not in r["auto"]: fail("no device, yet Auto would not choose soft: " + r["auto"])
for d in devs:
    if d["name"] not in text: fail(d["name"] + " is in the JSON but not in the text")
    if not d["connectx"] and (d["name"] + "  not a ConnectX") not in text:
        fail(d["name"] + " is not a ConnectX, and the text does not say so")
    for p in d["ports"]:
        if p["link_layer"] not in ("InfiniBand", "Ethernet", "Unspecified"): fail("odd link layer " + p["link_layer"])
        for g in p["gids"]:
            if g["type"] not in ("IB", "RoCE v1", "RoCE v2"): fail("odd GID type " + g["type"])
            if ("GID %-3u %s" % (g["index"], g["gid"])).split()[0] not in text: fail("GID not in the text")
if expect:
    names = [d["name"] for d in devs]
    if expect not in names: fail(expect + " is not listed: " + ", ".join(names))
    d = devs[names.index(expect)]
    if d["connectx"]: fail(expect + " reported as a ConnectX")
    if not d["ports"]: fail(expect + " has no port")
    if not any(p["gids"] for p in d["ports"]): fail(expect + " lists no GID")
    if "verbs" not in r["auto"] and "soft" not in r["auto"]: fail("Auto: " + r["auto"])
print("gpuverbs_info: %d RDMA device(s), %d GPU(s), %d ConnectX/GPU pair(s): checks passed"
      % (len(devs), len(r["gpus"]), len(r["connectx_gpu_pairs"])))
PY
"$info" --device no_such_device --json > "$tmp/json2" 2> /dev/null; rc=$?
[ $rc = 0 ] || fail "--device no_such_device exited $rc"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if any('no_such_device' in m['what'] for m in r['missing']) else 1)" "$tmp/json2" ||
    fail "--device no_such_device: the report does not say the device is missing"
echo "PASS"
