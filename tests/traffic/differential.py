#!/usr/bin/env python3
"""Compares the differential check's two records (gv_differential --backend soft, and
--backend verbs on rxe) and prints the table: case, the software device's outcome, rxe's,
and whether they agree.

    differential.py SOFT.jsonl RXE.jsonl [--markdown]

A case agrees when the requester's and the responder's completions, both QP states, the
commit statuses recorded and every buffer's change are the same. Where rxe is known to
differ from the mlx5 / IBA rules the software device follows, the case is listed in
KNOWN with the reason (docs/verbs.md, "rxe's deviations"): it must differ, in the fields
named. Exit status 1 when a case differs and is not listed, when a listed case no longer
differs (the list is stale), when a case is missing from either record or could not run.
"""
import json
import sys

# case -> (fields that differ, why). Fields: requester, responder, requester_state,
# responder_state, commit, memory.
KNOWN = {}

FIELDS = ["requester", "responder", "commit", "requester_state", "responder_state", "memory"]


def load(path):
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                out[r["case"]] = r
    return out


def summary(r):
    if "failed" in r:
        return "could not run: " + r["failed"]
    def short(v):
        # Runs of the same entry as "x N".
        out, prev, n = [], None, 0
        for e in v + [None]:
            if e == prev:
                n += 1
                continue
            if prev is not None:
                out.append(prev + (" x%d" % n if n > 1 else ""))
            prev, n = e, 1
        return ", ".join(out) or "-"
    mem = "; ".join("%s %s" % (k, v) for k, v in sorted(r["memory"].items()) if v != "same") or "memory same"
    s = "req [%s] %s; resp [%s] %s; %s" % (short(r["requester"]), r["requester_state"], short(r["responder"]),
                                           r["responder_state"], mem)
    if r["commit"]:
        s += "; commit " + ",".join(r["commit"])
    return s


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    soft, rxe = load(argv[1]), load(argv[2])
    md = "--markdown" in argv
    bad = []
    rows = []
    for case in list(soft) + [c for c in rxe if c not in soft]:
        a, b = soft.get(case), rxe.get(case)
        if a is None or b is None:
            bad.append("%s: missing from the %s record" % (case, "soft" if a is None else "rxe"))
            continue
        if "failed" in a or "failed" in b:
            bad.append("%s: could not run (%s)" % (case, a.get("failed") or b.get("failed")))
        differ = [f for f in FIELDS if a.get(f) != b.get(f)]
        if not differ:
            verdict = "yes"
            if case in KNOWN:
                bad.append("%s: listed as a known difference (%s) but the two agree now: update KNOWN" %
                           (case, KNOWN[case][1]))
        elif case in KNOWN and sorted(differ) == sorted(KNOWN[case][0]):
            verdict = "no (rxe: %s)" % KNOWN[case][1]
        else:
            verdict = "NO: %s" % ", ".join(differ)
            bad.append("%s: differs in %s%s" % (case, ", ".join(differ),
                                                 " (KNOWN lists %s)" % KNOWN[case][0] if case in KNOWN else ""))
        rows.append((case, summary(a), summary(b), verdict))
    if md:
        print("| case | soft | rxe | agree? |")
        print("|---|---|---|---|")
        for r in rows:
            print("| %s | %s | %s | %s |" % r)
    else:
        for r in rows:
            print("%s\n  soft: %s\n  rxe:  %s\n  agree: %s" % r)
    agree = sum(1 for r in rows if r[3] == "yes")
    known = sum(1 for r in rows if r[3].startswith("no (rxe"))
    print("\n%d cases: %d agree, %d differ where rxe departs from the mlx5/IBA rules (known), %d unexplained"
          % (len(rows), agree, known, len(bad)))
    for b in bad:
        print("FAIL: " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
