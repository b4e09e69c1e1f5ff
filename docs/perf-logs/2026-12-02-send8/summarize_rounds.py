#!/usr/bin/env python3
"""Summarize send8_rounds.sh logs: per variant, its rate over the same round's perftest rate
(median, min, max over rounds) and the RNR NAKs per run (median, min, max).
   summarize_rounds.py LOG..."""
import re, statistics, sys
for path in sys.argv[1:]:
    pt, runs = {}, {}
    for line in open(path):
        m = re.match(r"round (\d+) (\S+) rc=(\d+) rate=(\S+)(.*)", line)
        if not m or m.group(3) != "0":
            continue
        r, name, rate, rest = int(m.group(1)), m.group(2), float(m.group(4)), m.group(5)
        rnr = re.search(r"send_rnr_err=(\d+)", rest)
        rnr = int(rnr.group(1)) if rnr else 0
        if name == "perftest":
            pt[r] = rate
        else:
            runs.setdefault(name, []).append((r, rate, rnr))
    print(f"== {path}: {len(pt)} rounds, perftest median {statistics.median(pt.values()):.6f} Mpps")
    for name, v in runs.items():
        ratios = [rate / pt[r] for r, rate, _ in v if r in pt]
        rnrs = [x for _, _, x in v]
        print(f"  {name:10s} ratio median {statistics.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f}, "
              f"{sum(x >= 0.9 for x in ratios)}/{len(ratios)} >= 0.9); rate median {statistics.median([x for _, x, _ in v]):.6f}; "
              f"RNR NAKs/run median {statistics.median(rnrs):g} (min {min(rnrs)}, max {max(rnrs)})")
