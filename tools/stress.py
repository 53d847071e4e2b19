"""The fault, signal and stall tiers, N times over, with one core kept busy: a check to run before a submission (CI
runs each test once, on a machine that may be 1.5x slower), not part of `make test`.

    make stress                    # 5 passes of tests/test_faults.py, tests/test_signals.py, tests/test_stall_report.py
    make stress ARGS="--passes 2 --tests tests/test_signals.py"

A busy loop takes one core for the whole check, as another job on the machine would. Each pass is one pytest run
with a JUnit file of its own; the table gives every test that failed in any pass, how often, and its first reason,
then passed and failed counts per pass. Exit 1 when any test failed.
"""

import argparse
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TIERS = ("tests/test_faults.py", "tests/test_signals.py", "tests/test_stall_report.py")
BUSY = "while True: pass"


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("--passes", type=int, default=5, help="pytest runs of the tiers (default: 5)")
    out.add_argument("--tests", default=",".join(TIERS), help="comma-separated test files (default: the three tiers)")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    tests = [t.strip() for t in args.tests.split(",") if t.strip()]
    wrong = [t for t in tests if not ((REPO / t).is_file() and Path(t).parent.name == "tests"
                                      and Path(t).name.startswith("test_") and t.endswith(".py"))]
    if args.passes < 1 or not tests or wrong:
        print(f"error: --passes takes a positive number and --tests test files of tests/ (not one: "
              f"{', '.join(wrong) or 'none given'})", file=sys.stderr)
        return 2
    failures: dict[str, list[str]] = {}
    counts = []
    busy = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        with tempfile.TemporaryDirectory(prefix="stress-") as tmp:
            for index in range(1, args.passes + 1):
                junit = Path(tmp) / f"pass-{index}.xml"
                subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                                *tests], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                passed, failed = read(junit, failures)
                counts.append((passed, failed))
                print(f"pass {index}/{args.passes}: {passed} passed, {failed} failed", flush=True)
    finally:
        busy.kill()
        busy.wait()
    print(table(failures, args.passes))
    print(f"{sum(p for p, _ in counts)} passed, {sum(f for _, f in counts)} failed")
    return 1 if failures else 0


def read(junit: Path, failures: dict[str, list[str]]) -> tuple[int, int]:
    """One pass's passed and failed counts; each failure's reason added to `failures` by test."""
    if not junit.is_file():
        failures.setdefault("(pytest did not finish)", []).append("no JUnit file written")
        return 0, 1
    passed = failed = 0
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is None:
            passed += case.find("skipped") is None
            continue
        failed += 1
        reason = (bad.get("message") or bad.text or "").strip().splitlines()
        failures.setdefault(name, []).append((reason[0] if reason else "no message")[:200])
    if not passed + failed:  # a pass that ran nothing proves nothing
        failures.setdefault("(no test ran)", []).append("pytest collected no test from --tests")
        return 0, 1
    return passed, failed


def table(failures: dict[str, list[str]], passes: int) -> str:
    if not failures:
        return f"no test failed in {passes} pass(es)"
    lines = ["| test | failed | first reason |", "|---|---|---|"]
    for name, reasons in sorted(failures.items(), key=lambda item: -len(item[1])):
        lines.append(f"| {name} | {len(reasons)} of {passes} | {Counter(reasons).most_common(1)[0][0]} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
