#!/usr/bin/env python3
"""Reads the CSV of Nsight Compute's source page (ncu -i REP --page source --csv --print-source
sass; xz-compressed is fine) of one bandwidth kernel: totals (warp instructions executed, per WQE,
stall samples by reason), then either the instructions with the most samples (top N) or every
instruction executed between LO and HI times (the per-WQE loops: a run of N WQEs executes its
loop's instructions about N times).
  ncu_sass.py CSV[.xz] WQES top [N]
  ncu_sass.py CSV[.xz] WQES range LO HI"""
import csv, lzma, sys

path, wqes, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
text = (lzma.open if path.endswith(".xz") else open)(path, "rt")
rows = list(csv.reader(text))
hdr, data = rows[1], rows[2:]
ix = {h: i for i, h in enumerate(hdr)}
E, S = ix["Instructions Executed"], ix["Warp Stall Sampling (All Samples)"]
reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
ex = [int(r[E] or 0) for r in data]
sm = [int(r[S] or 0) for r in data]
tot = sum(sm)
print(f"{len(data)} instructions, {sum(ex)} warp instructions executed ({sum(ex) / wqes:.1f} per WQE), {tot} samples")
agg = sorted(((sum(int(r[ix[h]] or 0) for r in data), h[6:]) for h in reasons), reverse=True)
print("samples by reason: " + ", ".join(f"{h} {v} ({100 * v / tot:.0f}%)" for v, h in agg[:9]))


def line(i):
    r = data[i]
    why = max(reasons, key=lambda h: int(r[ix[h]] or 0))[6:] if sm[i] else ""
    return f"{i:6d} exec {ex[i]:6d} samples {sm[i]:5d} {why:17s} {r[1].strip()[:90]}"


if mode == "top":
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 30
    for i in sorted(range(len(data)), key=lambda i: -sm[i])[:n]:
        print(line(i))
else:
    lo, hi = int(sys.argv[4]), int(sys.argv[5])
    for i in range(len(data)):
        if lo <= ex[i] <= hi:
            print(line(i))
