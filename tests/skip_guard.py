#!/usr/bin/env python3
"""A test that skips must show as skipped in ctest, never as passed.

    skip_guard.py tests BUILD_DIR      every ctest test of BUILD_DIR (ctest --show-only=json-v1)
                                       that runs a GoogleTest binary has a SKIP_REGULAR_EXPRESSION
                                       matching GoogleTest's "[  SKIPPED ]" line, and every test
                                       that runs a script able to end with status 77 (a skip) has
                                       SKIP_RETURN_CODE 77
    skip_guard.py junit FILE.xml       after a run (ctest --output-junit FILE.xml): no test that
                                       ctest counted as run and not failed said it skipped
                                       (a "[  SKIPPED ]" line, or a line starting with "SKIP:")

Exit status 0 when all is well, 1 with the offenders listed (also when there is nothing to
check: a guard that finds no test must not pass), 2 on bad usage. The first form is the ctest
test Ctest.SkipsShowAsSkipped; the second runs after every ctest run of scripts/run_tests.sh.
"""
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from functools import lru_cache

GTEST_SKIP_LINE = "[  SKIPPED ] Suite.Test (0 ms)"
SKIP_LINE = re.compile(r"^(\[  SKIPPED \]|SKIP:)", re.M)


def prop(test, name):
    for p in test.get("properties", []):
        if p.get("name") == name:
            return p.get("value")
    return None


@lru_cache(maxsize=None)
def is_gtest_binary(path):
    """The program holds GoogleTest's own option names."""
    try:
        with open(path, "rb") as f:
            return b"gtest_list_tests" in f.read()
    except OSError:
        return False


@lru_cache(maxsize=None)
def can_skip(path):
    """The script has a way to end with status 77 (a skip)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return re.search(r"\b(exit|return) 77\b", f.read()) is not None


def runs_gtest(cmd):
    """True when the command runs a GoogleTest binary: it passes --gtest_* options, or its
    program is one."""
    if any(a.startswith("--gtest_") for a in cmd[1:]):
        return True
    exe = cmd[0] if cmd else ""
    return os.path.isfile(exe) and not exe.endswith((".sh", ".py")) and is_gtest_binary(exe)


def script_can_skip(cmd):
    """True when the command runs a script of ours that may end with status 77."""
    return any(a.endswith((".sh", ".py")) and os.path.isfile(a) and can_skip(a) for a in cmd)


def check_tests(build):
    out = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"], capture_output=True,
                         text=True, timeout=120)
    if out.returncode != 0:
        print("ctest --show-only=json-v1 failed:", out.stderr.strip())
        return 1
    if "CMake Error" in out.stderr:  # a test file ctest could not read: its tests are lost
        print("ctest could not read every test file of", build, "(their tests would not run):")
        print(out.stderr.strip())
        return 1
    tests = json.loads(out.stdout).get("tests", [])
    bad, gtests, scripts = [], 0, 0
    for t in tests:
        name, cmd = t.get("name", "?"), t.get("command") or []
        if not cmd:  # ctest lists no command for a program that is not built
            bad.append(f"{name}: its program is not built, so it cannot be checked (build the tree first)")
            continue
        if runs_gtest(cmd):
            gtests += 1
            regex = prop(t, "SKIP_REGULAR_EXPRESSION") or []
            if isinstance(regex, str):
                regex = [regex]
            if not any(re.search(r, GTEST_SKIP_LINE) for r in regex):
                bad.append(f"{name}: runs a GoogleTest binary ({os.path.basename(cmd[0])}) without a "
                           "SKIP_REGULAR_EXPRESSION matching \"[  SKIPPED ]\": a GTEST_SKIP() would count as "
                           "passed (add SKIP_REGULAR_EXPRESSION \"${GV_GTEST_SKIPPED}\" of tests/CMakeLists.txt)")
        elif script_can_skip(cmd):
            scripts += 1
            if prop(t, "SKIP_RETURN_CODE") != 77:
                bad.append(f"{name}: runs a script that may end with status 77 (a skip) without "
                           "SKIP_RETURN_CODE 77: its skips would count as failures")
    if gtests == 0:
        bad.append(f"no test of {build} runs a GoogleTest binary: is the tree built?")
    for b in bad:
        print("FAIL:", b)
    print(f"{len(tests)} tests: {gtests} run GoogleTest binaries, {scripts} run scripts that may skip; "
          f"{len(bad)} problems")
    return 1 if bad else 0


def check_junit(path):
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"cannot read {path}: {e}")
        return 1
    cases = root.iter("testcase")
    bad, n = [], 0
    for c in cases:
        n += 1
        if c.find("skipped") is not None or c.find("failure") is not None or c.get("status") != "run":
            continue
        text = "".join(e.text or "" for e in c.iter("system-out"))
        m = SKIP_LINE.search(text)
        if m:
            line = text[m.start():].splitlines()[0]
            bad.append(f"{c.get('name')}: ctest counted it as passed, but it said: {line}")
    for b in bad:
        print("FAIL:", b)
    if n == 0:
        print(f"no test in {path}")
        return 1
    return 1 if bad else 0


def main(argv):
    if len(argv) != 3 or argv[1] not in ("tests", "junit"):
        print(__doc__)
        return 2
    return check_tests(argv[2]) if argv[1] == "tests" else check_junit(argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
