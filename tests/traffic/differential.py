#!/usr/bin/env python3
"""Compares the differential check's two records (gv_differential --backend soft, and
--backend verbs on rxe) and prints the table: case, the software device's outcome, rxe's,
and whether they agree.

    differential.py SOFT.jsonl RXE.jsonl [--markdown | --brief]

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
KNOWN = {
    "write_imm, wrong rkey": (["responder"],
        "the receive of the refused WRITE_IMM completes REM_ACCESS_ERR; verbs defines LOC_ACCESS_ERR for it"),
    "read, responder QP without remote read": (["requester"],
        "NAKs a right the responder QP lacks as an invalid request (REMOTE_INVAL_REQ_ERR; mlx5: REMOTE_ACCESS_ERR)"),
    "fetch-add, responder QP without remote atomic": (["requester"],
        "NAKs a right the responder QP lacks as an invalid request (REMOTE_INVAL_REQ_ERR; mlx5: REMOTE_ACCESS_ERR)"),
    "fetch-add, misaligned": (["requester", "responder", "responder_state"],
        "fails a misaligned atomic locally (LOC_QP_OP_ERR), the responder untouched; mlx5: REMOTE_INVAL_REQ_ERR, "
        "responder to ERROR"),
    "compare-swap, misaligned": (["requester", "responder", "responder_state"],
        "fails a misaligned atomic locally (LOC_QP_OP_ERR), the responder untouched; mlx5: REMOTE_INVAL_REQ_ERR, "
        "responder to ERROR"),
    "write, bad lkey": (["requester"], "a bad local key fails with LOC_QP_OP_ERR (mlx5: LOCAL_PROT_ERR)"),
    "write, lkey of another PD": (["requester"], "a bad local key fails with LOC_QP_OP_ERR (mlx5: LOCAL_PROT_ERR)"),
    "fetch-add, result region without local write": (["memory"],
        "performs the atomic on the responder before it finds the result region lacks local write"),
    "send, receive too small": (["requester", "responder"],
        "REMOTE_OP_ERR / receive LOC_QP_OP_ERR (mlx5: REMOTE_INVAL_REQ_ERR / LOCAL_LENGTH_ERR)"),
    "send, receive with a bad lkey": (["responder"],
        "the receive completes LOC_QP_OP_ERR (mlx5: LOCAL_PROT_ERR)"),
    "write to a peer in ERROR": (["requester", "requester_state"],
        "no completion within 20 s, the requester stays in RTS; a NIC ends the retries with "
        "TRANSPORT_RETRY_EXC_ERR (the soft device: at once)"),
}

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


def brief(r):
    """The outcome in a few words: the requester's completions other than the good WRITE and
    the flushes, the responder's completions, both states."""
    if "failed" in r:
        return "could not run"
    req = [e.split(":", 1)[1] for e in r["requester"] if ":" in e and e not in ("WRITE:OK",)
           and not e.startswith("WQE:")]
    resp = [e.replace("after: ", "then ") for e in r["responder"]]
    resp = [e.split(":", 1)[1] if e.startswith("RECV") else e for e in resp]
    if not req:
        req = ["no completion"] if not [e for e in r["requester"] if ":" in e] else \
            ["WR_FLUSH_ERR"] if any(e.startswith("WQE:") for e in r["requester"]) else ["OK"]
    return "%s; resp %s; %s/%s" % (", ".join(req), ", ".join(resp) or "-",
                                   r["requester_state"], r["responder_state"])


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
    if "--brief" in argv:
        print("| case | soft | rxe | agree? |")
        print("|---|---|---|---|")
        for case, _, _, verdict in rows:
            a, b = soft[case], rxe[case]
            mem = "" if a.get("memory") == b.get("memory") else " (memory differs)"
            print("| %s | %s | %s%s | %s |" % (case, brief(a), brief(b), mem,
                                               "yes" if verdict == "yes" else "no" if verdict.startswith("no")
                                               else verdict))
    elif md:
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
