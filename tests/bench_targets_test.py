#!/usr/bin/env python3
"""bench/targets.py on suite results written here (Bench.targets).

Checks: a run that meets some targets and misses others (each row's verdict and figure); a
case the results lack ("not in this run"), and the two-process rows without that file; the
folder form and the two-file form agree; the last of two rows of one case counts; a line that
is not JSON, a row without the field its figure needs and a missing file exit 2 naming what
was wrong; no arguments print the usage, exit 2.
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

TOOL = Path(__file__).resolve().parent.parent / "bench" / "targets.py"
failures = []


def check(what, cond):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}")


def run(*args):
    p = subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def row_of(out, what):
    for line in out.splitlines():
        if line.startswith(what):
            return line
    return ""


BW = dict(bench="write_bw", initiator="gpu", mem="device")
LOOP = [
    dict(bench="write_lat", mode="loopback", bytes=8, t_typical=0.9),
    dict(BW, mode="loopback", qps=1, threads=64, bytes=8, msg_rate_Mpps=0.5),  # replaced below
    dict(BW, mode="loopback", qps=1, threads=64, bytes=8, msg_rate_Mpps=1.25),
    dict(BW, mode="loopback", qps=66, threads=64, bytes=8, msg_rate_Mpps=250.0),
    dict(bench="compute_send", bytes=8, gpu_us=10.0, cpu_us=40.0),
    dict(bench="write_bw", mode="loopback", initiator="cpu", mem="device", qps=4, threads=64, bytes=8,
         msg_rate_Mpps=3.0),
    dict(BW, mode="loopback", qps=264, threads=512, bytes=1048576, bw_avg_GBps=960.0, memcpy_GBps=1000.0),
]
TWO = [
    dict(bench="write_lat", mode="two-process", bytes=8, t_typical=1.5),
    dict(BW, bench="send_bw", mode="two-process", qps=64, threads=256, bytes=4096, bw_avg_GBps=150.0),
]

with tempfile.TemporaryDirectory() as d:
    d = Path(d)
    (d / "results.jsonl").write_text("\n".join(json.dumps(r) for r in LOOP) + "\n")
    (d / "results-two-process.jsonl").write_text("\n".join(json.dumps(r) for r in TWO) + "\n")
    rc, out, err = run(d)
    check(f"folder form exits 0 (got {rc}: {err})", rc == 0)
    expect = {
        "8-byte WRITE latency, loopback": ("0.900 us", "met"),
        "8-byte WRITE latency, two processes": ("1.500 us", "missed"),
        "8-byte WRITE, 1 QP x 64 threads": ("1.250 M msg/s", "missed"),  # the last row of the case
        "8-byte WRITE, 66 QPs x 64 threads": ("250.000 M msg/s", "met"),
        "SEND 4 KiB, 64 QPs": ("150.0 GB/s", "missed"),
        "compute-then-send 8 B": ("4.00x (10.00 vs 40.00 us)", "missed"),
        "CPU-initiated 8-byte WRITE": ("3.000 M msg/s", "met"),
        "WRITE 64 KiB, 264 QPs": ("-", "not in this run"),
        "WRITE 1 MiB, 264 QPs": ("96.0% (960 of 1000 GB/s)", "met"),
    }
    for what, (figure, verdict) in expect.items():
        line = row_of(out, what)
        check(f"a row for {what!r}", line != "")
        check(f"{what!r} shows {figure!r}: {line!r}", f" {figure} " in f" {line} ")
        check(f"{what!r} is {verdict!r}: {line!r}", line.rstrip().endswith(verdict))
    check("nine rows and a header", len(out.splitlines()) == 10)

    rc2, out2, _ = run(d / "results.jsonl", d / "results-two-process.jsonl")
    check("the two-file form prints the same rows", rc2 == 0 and out2.splitlines()[1:] == out.splitlines()[1:])

    rc3, out3, _ = run(d / "results.jsonl")
    check("without two-process results: exit 0", rc3 == 0)
    check("without two-process results: said in the header", "no two-process results" in out3.splitlines()[0])
    check("without two-process results: its rows not in this run",
          row_of(out3, "SEND 4 KiB").rstrip().endswith("not in this run")
          and row_of(out3, "8-byte WRITE latency, two processes").rstrip().endswith("not in this run"))

    bad = d / "bad.jsonl"
    bad.write_text(json.dumps(LOOP[0]) + "\n{not json\n")
    rc4, _, err4 = run(bad)
    check(f"a line that is not JSON: exit 2 (got {rc4})", rc4 == 2)
    check(f"a line that is not JSON: file and line named ({err4.strip()!r})", f"{bad}:2 is not JSON" in err4)

    short = d / "short.jsonl"
    short.write_text(json.dumps(dict(BW, mode="loopback", qps=66, threads=64, bytes=8)) + "\n")
    rc7, _, err7 = run(short)
    check(f"a row without its figure's field: exit 2 (got {rc7})", rc7 == 2)
    check(f"a row without its figure's field: field named ({err7.strip()!r})", "msg_rate_Mpps" in err7)

    rc5, _, err5 = run(d / "missing.jsonl")
    check(f"a missing file: exit 2 (got {rc5})", rc5 == 2)
    check(f"a missing file: named ({err5.strip()!r})", "cannot read" in err5 and "missing.jsonl" in err5)

    rc6, _, err6 = run()
    check(f"no arguments: usage, exit 2 (got {rc6})", rc6 == 2 and "targets.py OUT_DIR" in err6)

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all checks passed")
