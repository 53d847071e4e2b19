"""Horovod's own test suite, test/parallel/test_torch.py of v0.28.1, against the Horovod this project builds
(tools/build_horovod.py): passed, failed and the reason for each failure, per run.

    git clone --branch v0.28.1 --depth 1 https://github.com/horovod/horovod ~/horovod
    .venv/bin/python tools/horovod_suite.py --source ~/horovod --runs 4
    .venv/bin/python tools/horovod_suite.py --resets 1500        # hvd.shutdown() and hvd.init() again, 1500 times

Each run is `horovodrun -np 2` of pytest over the file, every rank writing a JUnit file; a rank that ends without one
(an abort, a hang cut at --timeout-s) is named with the last test it had started. The suite imports `mock`, the
standalone package of unittest.mock: a one-line shim stands in for it, so nothing is installed. Reasons the suite's
age explains are said so (KNOWN); exit 1 where anything else failed.
"""

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

SUITE = Path("test") / "parallel" / "test_torch.py"
KNOWN = {"Muon only supports 2D parameters": "the suite's age: it builds every torch.optim optimizer, and torch's Muon "
                                             "takes 2-D parameters only (torch 2.15 here)"}
STARTED = re.compile(r"^\[(\d+)\]<stdout>:(test_torch\.py::\S+)")


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("--source", type=Path, default=Path("."), help="a checkout of horovod/horovod at v0.28.1")
    out.add_argument("--runs", type=int, default=1, help="full runs of the suite (default: 1)")
    out.add_argument("--np", type=int, default=2, help="ranks (default: 2)")
    out.add_argument("--timeout-s", type=int, default=900, help="a run's bound (default: 900)")
    out.add_argument("--output-dir", type=Path, default=Path("results/horovod-suite"), help="logs and JUnit files")
    out.add_argument("--resets", type=int, default=0,
                     help="instead of the suite: this many re-initialisations in one (static) horovodrun, each "
                          "hvd.shutdown(), hvd.init(), TorchState.sync() and a step's allreduce")
    out.add_argument("--reset-worker", type=int, help=argparse.SUPPRESS)  # one rank of --resets
    return out


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.reset_worker:
        return reset_worker(args.reset_worker)
    if args.runs < 1 or args.np < 1 or args.timeout_s < 1 or args.resets < 0:
        print("error: --runs, --np and --timeout-s must be positive, --resets 0 or more; nothing ran", file=sys.stderr)
        return 2
    if args.resets > 0:
        return resets(args)
    if not (args.source / SUITE).is_file():
        print(f"error: --source must hold {SUITE} (a checkout of horovod/horovod at v0.28.1)", file=sys.stderr)
        return 2
    args.output_dir.mkdir(parents=True, exist_ok=True)
    unexplained = 0
    for index in range(1, args.runs + 1):
        counts, failures = run(args, index)
        unexplained += sum(1 for reason in failures.values() if not reason.startswith("known: "))
        print(f"run {index}/{args.runs}: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} "
              f"skipped", flush=True)
        for test, reason in sorted(failures.items()):
            print(f"  {test}: {reason}")
    return 1 if unexplained else 0


def run(args: argparse.Namespace, index: int) -> tuple[Counter, dict[str, str]]:
    """One horovodrun of the suite: counts over rank 0's JUnit file, and every failure of every rank with its reason."""
    junit = [(args.output_dir / f"run-{index}-rank-{rank}.xml").resolve() for rank in range(args.np)]
    for path in junit:
        path.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="horovod-suite-") as shim:
        Path(shim, "mock.py").write_text("from unittest.mock import *  # noqa: F401,F403 - Horovod's tests' `mock`\n")
        command = (f"cd {(args.source / SUITE.parent).resolve()} && PYTHONPATH={shim}:$PYTHONPATH exec "
                   f"{sys.executable} -m pytest -v -p no:cacheprovider {SUITE.name} "
                   f"--junitxml={args.output_dir.resolve()}/run-{index}-rank-$HOROVOD_RANK.xml")
        beside = Path(sys.executable).with_name("horovodrun")  # this environment's, else the one on PATH
        horovodrun = str(beside) if beside.exists() else shutil.which("horovodrun") or "horovodrun"
        try:
            done = subprocess.run([horovodrun, "-np", str(args.np), "--gloo", "sh", "-c", command], capture_output=True,
                                  text=True, timeout=args.timeout_s)
            log = done.stdout + done.stderr
        except subprocess.TimeoutExpired as expired:
            log = (expired.stdout or b"").decode(errors="replace") + f"\n(cut at --timeout-s {args.timeout_s})"
    (args.output_dir / f"run-{index}.log").write_text(log)
    counts, failures = Counter(), {}
    for rank, path in enumerate(junit):
        if not path.is_file():
            last = [m.group(2) for line in log.splitlines() if (m := STARTED.match(line)) and int(m.group(1)) == rank]
            failures[f"rank {rank}"] = (f"ended without its report after {last[-1] if last else 'no test'}: "
                                        f"{ended(log, rank)}")
            continue
        for case in ET.parse(path).getroot().iter("testcase"):
            bad = case.find("failure") if case.find("failure") is not None else case.find("error")
            state = "skipped" if case.find("skipped") is not None else "failed" if bad is not None else "passed"
            counts[state] += rank == 0
            if bad is not None:
                failures[case.get("name", "?")] = reason((bad.get("message") or "").strip())
    return counts, failures


def resets(args: argparse.Namespace) -> int:
    """--resets N: the ranks' re-initialisations under horovodrun; exit 1 where a rank did not finish them all (its
    last line: gloo's own, where it says one)."""
    horovodrun = Path(sys.executable).with_name("horovodrun")
    try:
        done = subprocess.run([str(horovodrun if horovodrun.exists() else "horovodrun"), "-np", str(args.np), "--gloo",
                               sys.executable, __file__, "--reset-worker", str(args.resets)],
                              capture_output=True, text=True, timeout=args.timeout_s)
        log = done.stdout + done.stderr
    except subprocess.TimeoutExpired as expired:
        log = (expired.stdout or b"").decode(errors="replace") + f"\n(cut at --timeout-s {args.timeout_s})"
    finished = re.findall(r"rank (\d+): (\d+) resets", log)
    for rank in range(args.np):
        said = next((n for r, n in finished if int(r) == rank), None)
        why = [line.split(">:", 1)[-1].strip() for line in log.splitlines() if line.startswith(f"[{rank}]<stderr>:")
               and ("what()" in line or "terminate called" in line)]
        print(f"rank {rank}: {said} of {args.resets} resets" if said else
              f"rank {rank}: did not finish its resets: {ended(log, rank)}{(': ' + ' '.join(why)) if why else ''}")
    return 0 if len(finished) == args.np else 1


def reset_worker(count: int) -> int:
    """One rank of --resets: what hvd.elastic runs on a reset, `count` times, and a step's allreduce after each."""
    import torch
    import horovod.torch as hvd

    hvd.init()
    model = torch.nn.Linear(64, 10)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                         named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, epoch=0)
    for _ in range(count):
        hvd.shutdown()
        hvd.init()
        state.sync()
        model(torch.randn(8, 64)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    print(f"rank {hvd.rank()}: {count} resets", flush=True)
    return 0


def reason(message: str) -> str:
    first = (message.splitlines() or ["no message"])[0][:200]
    return next((f"known: {why} ({first})" for mark, why in KNOWN.items() if mark in message), first)


def ended(log: str, rank: int) -> str:
    """How horovodrun says rank `rank` ended: its exit status, or the cut."""
    found = re.search(rf"Process {rank} exit with status code (-?\d+)", log)
    if found:
        code = int(found.group(1))
        return f"exit status {code}" + (" (SIGABRT)" if code in (-6, 134) else "")
    return "cut at --timeout-s" if "(cut at --timeout-s" in log else "no exit status in horovodrun's output"


if __name__ == "__main__":
    sys.exit(main())
