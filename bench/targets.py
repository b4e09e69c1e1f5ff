#!/usr/bin/env python3
"""Where one suite run stands against the software device's speed targets.

    bench/targets.py OUT_DIR
    bench/targets.py RESULTS.jsonl [RESULTS-TWO-PROCESS.jsonl]

OUT_DIR is bench/run_suite.sh's folder: its results.jsonl and, when the suite ran with
--two-process, results-two-process.jsonl. Prints one row per target: what is measured, this
run's figure, the target, and "met", "missed" or "not in this run" (the suite lacked the case:
an older suite, or no --two-process). The figures are the tools' own --json fields; a share of
the copy is bw_avg_GBps over the same run's memcpy_GBps, as the tools measure it.

Exit status: 0 once the table is printed, met or not; 2 when a file cannot be read, holds a
line that is not a JSON object (the file and line are named) or a target's row lacks the field
its figure needs (named).
"""
import json
import sys
from pathlib import Path


def fail(message):
    print(f"targets.py: {message}", file=sys.stderr)
    sys.exit(2)


def load(path):
    rows = []
    try:
        text = Path(path).read_text()
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            fail(f"{path}:{n} is not JSON ({e.msg}): {line[:80]}")
        if not isinstance(row, dict):
            fail(f"{path}:{n} is not a JSON object: {line[:80]}")
        rows.append(row)
    return rows


def find(rows, **want):
    """The last row whose fields equal every one of want's (the last: a re-run case wins)."""
    hit = None
    for r in rows:
        if all(r.get(k) == v for k, v in want.items()):
            hit = r
    return hit


def rate(r):
    return r["msg_rate_Mpps"], f"{r['msg_rate_Mpps']:.3f} M msg/s"


def gbps(r):
    return r["bw_avg_GBps"], f"{r['bw_avg_GBps']:.1f} GB/s"


def share_of_copy(r):
    if not r.get("memcpy_GBps"):
        return None
    pct = 100.0 * r["bw_avg_GBps"] / r["memcpy_GBps"]
    return pct, f"{pct:.1f}% ({r['bw_avg_GBps']:.0f} of {r['memcpy_GBps']:.0f} GB/s)"


def latency(r):
    return r["t_typical"], f"{r['t_typical']:.3f} us"


def ratio(r):
    if not r.get("gpu_us"):
        return None
    x = r["cpu_us"] / r["gpu_us"]
    return x, f"{x:.2f}x ({r['gpu_us']:.2f} vs {r['cpu_us']:.2f} us)"


GPU_BW = dict(mode="loopback", initiator="gpu", mem="device")
TWO_BW = dict(mode="two-process", initiator="gpu", mem="device")

# (what, which file, the row's fields, figure, target, whether larger is better)
TARGETS = [
    ("8-byte WRITE latency, loopback (t_typical)", "loop",
     dict(bench="write_lat", mode="loopback", bytes=8), latency, 1.0, False),
    ("8-byte WRITE latency, two processes (t_typical)", "two",
     dict(bench="write_lat", mode="two-process", bytes=8), latency, 1.0, False),
    ("8-byte WRITE, 1 QP x 64 threads", "loop",
     dict(bench="write_bw", qps=1, threads=64, bytes=8, **GPU_BW), rate, 5.0, True),
    ("8-byte WRITE, 66 QPs x 64 threads", "loop",
     dict(bench="write_bw", qps=66, threads=64, bytes=8, **GPU_BW), rate, 200.0, True),
    ("SEND 4 KiB, 64 QPs x 256 threads, two processes", "two",
     dict(bench="send_bw", qps=64, threads=256, bytes=4096, **TWO_BW), gbps, 300.0, True),
    ("compute-then-send 8 B, CPU- over GPU-initiated time", "loop",
     dict(bench="compute_send", bytes=8), ratio, 5.0, True),
    ("CPU-initiated 8-byte WRITE on a GPU context, 4 QPs", "loop",
     dict(bench="write_bw", mode="loopback", initiator="cpu", mem="device", qps=4, bytes=8), rate, 2.0, True),
    ("WRITE 64 KiB, 264 QPs x 512, share of the copy, two processes", "two",
     dict(bench="write_bw", qps=264, threads=512, bytes=65536, **TWO_BW), share_of_copy, 80.0, True),
    ("WRITE 1 MiB, 264 QPs x 512, share of the copy", "loop",
     dict(bench="write_bw", qps=264, threads=512, bytes=1048576, **GPU_BW), share_of_copy, 95.0, True),
]

UNITS = {latency: "us", rate: "M msg/s", gbps: "GB/s", share_of_copy: "%", ratio: "x"}


def main(argv):
    usage = __doc__.strip().split("\n\n")[1]
    if argv and argv[0] in ("-h", "--help"):
        print(usage)
        return 0
    if not argv or len(argv) > 2:
        print("usage:\n" + usage, file=sys.stderr)
        return 2
    first = Path(argv[0])
    if first.is_dir():
        loop_path = first / "results.jsonl"
        two_path = first / "results-two-process.jsonl"
        two_path = two_path if two_path.exists() else None
    else:
        loop_path = first
        two_path = Path(argv[1]) if len(argv) > 1 else None
    files = {"loop": load(loop_path), "two": load(two_path) if two_path else []}
    paths = {"loop": loop_path, "two": two_path}
    lines = []
    for what, which, fields, figure, target, larger in TARGETS:
        row = find(files[which], **fields)
        try:
            got = figure(row) if row else None
        except (KeyError, TypeError, ValueError) as e:
            fail(f"{paths[which]}: the row of '{what}' lacks a usable {e}: {json.dumps(row)[:120]}")
        unit = UNITS[figure]
        goal = f"{'>=' if larger else '<='} {target:g}{'' if unit in ('%', 'x') else ' '}{unit}"
        if got is None:
            lines.append((what, "-", goal, "not in this run"))
            continue
        value, shown = got
        met = value >= target if larger else value <= target
        lines.append((what, shown, goal, "met" if met else "missed"))
    w0 = max(len(l[0]) for l in lines)
    w1 = max(len(l[1]) for l in lines)
    w2 = max(len(l[2]) for l in lines)
    print(f"# {loop_path}" + (f" and {two_path}" if two_path else " (no two-process results)"))
    for what, shown, goal, verdict in lines:
        print(f"{what:<{w0}}  {shown:>{w1}}  {goal:<{w2}}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
