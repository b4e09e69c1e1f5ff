#!/bin/bash
# bench/compare.sh against a build's real tools (Bench.compare).
#
#   bench_compare_test.sh TOOLS_DIR
#
# The cases (gv_write_bw with CPU initiators, gv_send_bw and gv_write_lat with the build's own) run
# on CPU threads in a build without CUDA and on the GPU in a build with it; a build with CUDA on a
# machine without a GPU exits 77 (a skip, with the tool's reason). Checks:
#   one      one build alone (--reps 2): exit 0, "0 failed", a table of its medians with no
#            ratio column, one row per case (comments and blank lines of the cases file
#            skipped), NAME.jsonl with a line per case and round (rounds 0 and 1).
#   two      two builds (the same folder named twice, --reps 1): the ratio column b/a on every
#            row, the runs interleaved (a case's run by a, then by b, then the next case).
#   positional  the first form (A_DIR B_DIR OUT REPS) names its second folder b (a missing one
#            is refused as build b's).
#   failed   a case the tool refuses (an unknown option): exit 1, "FAILED (exit 2): [a] ...",
#            "1 failed"; the other cases still in the table.
#   usage    exit 2 and one line naming the mistake: no build; two builds of one name; a name
#            with a space; a folder that does not exist; --reps 0; a cases file that does not
#            exist; a cases file with no case.
# Every run has a deadline; past it the check fails.
set -u
tools=$1
here=$(cd "$(dirname "$0")" && pwd)
compare="$here/../bench/compare.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
checks=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
check() {  # check WHAT CONDITION...: counts the check, fails with WHAT when the command fails
    local what=$1
    shift
    checks=$((checks + 1))
    "$@" || fail "$what"
}

# The tools must run here at all (a build with CUDA needs a GPU for them).
if ! probe=$(timeout 60 "$tools/gv_write_bw" --initiator cpu -s 64 -q 1 -t 1 -n 8 2>&1); then
    echo "SKIP: the tools of $tools do not run here: $(echo "$probe" | tail -n 1)"
    exit 77
fi

cat > "$tmp/cases.txt" <<'EOF'
# three cases, one of each unit
gv_write_bw --initiator cpu -s 4096 -q 2 -t 4 -n 64

gv_send_bw -s 64 -q 2 -t 4 -n 64
   # an indented comment
gv_write_lat -s 8 -n 200
EOF

# one: a build alone.
timeout 120 bash "$compare" --out "$tmp/one" --reps 2 --cases "$tmp/cases.txt" only="$tools" > "$tmp/one.out" 2>&1
rc=$?
check "one: exit 0 (got $rc): $(tail -n 3 "$tmp/one.out")" test $rc -eq 0
check "one: ends with '0 failed'" test "$(tail -n 1 "$tmp/one.out")" = "0 failed"
check "one: the header names the build's median and no ratio" \
    bash -c "head -n 1 '$tmp/one/compare.txt' | grep -q 'only median' && ! head -n 1 '$tmp/one/compare.txt' | grep -q '/only'"
check "one: three rows, one per case" test "$(($(wc -l < "$tmp/one/compare.txt") - 1))" -eq 3
for c in "gv_write_bw --initiator cpu -s 4096" "gv_send_bw -s 64" "gv_write_lat -s 8"; do
    check "one: a row for '$c'" grep -q "^$c" "$tmp/one/compare.txt"
done
check "one: the units GB/s, M msg/s, us t_typical" \
    bash -c "grep -q ' GB/s ' '$tmp/one/compare.txt' && grep -q ' M msg/s ' '$tmp/one/compare.txt' && grep -q ' us t_typical ' '$tmp/one/compare.txt'"
check "one: only.jsonl has 6 lines (3 cases x 2 rounds)" test "$(wc -l < "$tmp/one/only.jsonl")" -eq 6
check "one: rounds 0 and 1, three of each" \
    bash -c "[ \$(grep -c '\"rep\":0,' '$tmp/one/only.jsonl') -eq 3 ] && [ \$(grep -c '\"rep\":1,' '$tmp/one/only.jsonl') -eq 3 ]"
check "one: every line parses, with the case and the tool's result" python3 - "$tmp/one/only.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    assert r["case"] and isinstance(r["rep"], int) and "bench" in r["result"], line
EOF

# two: the same folder named twice.
timeout 120 bash "$compare" --out "$tmp/two" --reps 1 --cases "$tmp/cases.txt" a="$tools" b="$tools" > "$tmp/two.out" 2>&1
rc=$?
check "two: exit 0 (got $rc): $(tail -n 3 "$tmp/two.out")" test $rc -eq 0
check "two: the header has a, b and b/a" bash -c "head -n 1 '$tmp/two/compare.txt' | grep -q 'a median.*b median.*b/a'"
check "two: every row has a ratio" python3 - "$tmp/two/compare.txt" <<'EOF'
import re, sys
rows = open(sys.argv[1]).read().splitlines()[1:]
assert len(rows) == 3, rows
for r in rows:
    # unit, a's median, b's median, b/a, then the runs
    m = re.search(r"(GB/s|M msg/s|us t_typical)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+|nan)\s+\[", r)
    assert m, r
EOF
check "two: the runs interleave (a, b per case, in the cases' order)" python3 - "$tmp/two/compare.log" <<'EOF'
import sys
runs = [l[2:].strip() for l in open(sys.argv[1]) if l.startswith("+ [")]
sides = [r.split("]")[0].lstrip("[") for r in runs]
assert sides == ["a", "b"] * 3, sides
assert runs[0].split("] ", 1)[1].startswith("gv_write_bw") and runs[4].split("] ", 1)[1].startswith("gv_write_lat"), runs
EOF

# positional: the first form (A_DIR B_DIR [OUT] [REPS]) names its builds a and b; its cases are
# the built-in ones, which need a GPU, so only its answer to a missing folder is checked here.
timeout 30 bash "$compare" "$tools" "$tmp/no-such-folder" "$tmp/pos" 1 > "$tmp/pos.out" 2>&1
rc=$?
check "positional: a missing B_DIR is named as build b (exit 2, got $rc): $(cat "$tmp/pos.out")" \
    bash -c "[ $rc -eq 2 ] && grep -q 'compare.sh: b: no folder' '$tmp/pos.out'"

# failed: a case the tool refuses.
printf 'gv_write_bw --initiator cpu -s 64 -q 1 -t 1 -n 8\ngv_write_bw --no-such-option\n' > "$tmp/bad-case.txt"
timeout 60 bash "$compare" --out "$tmp/bad" --reps 1 --cases "$tmp/bad-case.txt" a="$tools" > "$tmp/bad.out" 2>&1
rc=$?
check "failed: exit 1 (got $rc)" test $rc -eq 1
check "failed: names the case and the tool's status" grep -q 'FAILED (exit 2): \[a\] gv_write_bw --no-such-option' "$tmp/bad.out"
check "failed: '1 failed' last" test "$(tail -n 1 "$tmp/bad.out")" = "1 failed"
check "failed: the case that ran is in the table" grep -q '^gv_write_bw --initiator cpu -s 64' "$tmp/bad/compare.txt"

# usage: exit 2, the mistake named on stderr.
printf '# nothing but a comment\n\n' > "$tmp/empty-cases.txt"
usage_case() {  # usage_case WHAT EXPECTED_TEXT ARGS...
    local what=$1 want=$2
    shift 2
    local err rc
    err=$(timeout 30 bash "$compare" --out "$tmp/usage" "$@" 2>&1 > /dev/null)
    rc=$?
    checks=$((checks + 1))
    if [ $rc -ne 2 ] || ! grep -qF -- "$want" <<< "$err"; then
        fail "usage, $what: want exit 2 and '$want', got exit $rc: $err"
    fi
}
usage_case "no build" "name at least one build" --reps 1
usage_case "one name twice" "two builds are named 'a'" a="$tools" a="$tools"
usage_case "a name with a space" "may use letters, digits" "a b=$tools"
usage_case "no such folder" "x: no folder $tmp/none" x="$tmp/none"
usage_case "--reps 0" "REPS must be a positive whole number, not '0'" --reps 0 a="$tools"
usage_case "no cases file" "cannot read $tmp/none.txt" --cases "$tmp/none.txt" a="$tools"
usage_case "a cases file with no case" "lists no case" --cases "$tmp/empty-cases.txt" a="$tools"

echo "$checks checks, $failures failed"
[ $failures -eq 0 ]
