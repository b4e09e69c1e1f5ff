#!/usr/bin/env python3
"""Draws the benchmark plots from results.jsonl (bench/run_suite.sh)."""
import json
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def main():
    # The plots show one-process (loopback) runs; two-process results are kept apart.
    rows = [r for r in load(sys.argv[1]) if r.get("mode", "loopback") == "loopback"]
    out = sys.argv[2]

    # 1. Bandwidth vs message size, GPU vs CPU initiated, with the cudaMemcpy ceiling.
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series = defaultdict(list)
    ceiling = {}
    for r in rows:
        if r.get("bench") in ("write_bw", "read_bw"):
            series[(r["bench"], r["initiator"], r["qps"], r["threads"])].append((r["bytes"], r["bw_avg_GBps"]))
            if r["bench"] == "write_bw" and r["initiator"] == "gpu" and r["memcpy_GBps"] > 0:
                ceiling[r["bytes"]] = max(ceiling.get(r["bytes"], 0), r["memcpy_GBps"])
    for (bench, init, qps, threads), pts in sorted(series.items()):
        if len(pts) < 3:  # single-size runs (the QP sweep) belong to the next plot
            continue
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                label=f"{bench.replace('_bw', '').upper()}, {init}-initiated, {qps} QPs x {threads}")
    if ceiling:
        c = sorted(ceiling.items())
        ax.plot([p[0] for p in c], [p[1] for p in c], "k--", label="cudaMemcpy D2D (same run)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size [bytes]")
    ax.set_ylabel("bandwidth [GB/s]")
    ax.set_title("Software RDMA device on one H200: bandwidth")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{out}/bw_vs_size.png", dpi=110)

    # 2. 8-byte message rate vs QPs.
    fig, ax = plt.subplots(figsize=(7, 4.5))
    pts = sorted((r["qps"], r["msg_rate_Mpps"]) for r in rows
                 if r.get("bench") == "write_bw" and r["initiator"] == "gpu" and r["bytes"] == 8)
    best = {}
    for q, m in pts:
        best[q] = max(best.get(q, 0), m)
    ax.plot(list(best), list(best.values()), marker="o", label="8-byte WRITE, GPU-initiated")
    ax.axhline(200, color="r", ls=":", label="target: 200 M msg/s (>= 64 QPs)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("QPs (one CUDA block each)")
    ax.set_ylabel("message rate [M msg/s]")
    ax.set_title("Message rate vs QPs")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{out}/msgrate_vs_qps.png", dpi=110)

    # 3. Latency percentiles.
    fig, ax = plt.subplots(figsize=(7, 4.5))
    lat = sorted((r["bytes"], r) for r in rows if r.get("bench") == "write_lat")
    if lat:
        keys = ["t_min", "t_typical", "t_avg", "p99", "p999", "t_max"]
        width = 0.8 / len(lat)
        for i, (b, r) in enumerate(lat):
            ax.bar([k + i * width for k in range(len(keys))], [r[k] for k in keys], width, label=f"{b} B")
        ax.set_xticks([k + 0.4 - width / 2 for k in range(len(keys))], keys)
        ax.set_ylabel("one-way latency [us]")
        ax.set_title("gv_write_lat (ping-pong between two blocks)")
        ax.legend(fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(f"{out}/latency.png", dpi=110)
    print("plots written to", out)


if __name__ == "__main__":
    main()
