"""What does Ray cost, and which backend is faster? The launcher arms side by side, repeated and interleaved.

    make bench                                   # python -m ray_jobs.bench
    make bench ARGS=--aa                         # and each arm against itself: the noise floor
    python -m ray_jobs.bench --repeats 5 --epochs 3 --workers 2

Runs native DDP on Ray, under torchrun and under mp.spawn, Horovod on Ray and under horovodrun, R rounds in a balanced
order, and prints one table: Ray ÷ torchrun, Ray ÷ mp.spawn and Ray ÷ horovodrun for steady-state throughput and
end-to-end wall time, and
native ÷ Horovod, each with its 95 % interval and, beside it, its goal. Goals are printed, never asserted: the
figures of one noisy 2-core machine inform, they do not gate. Everything lands in <output-dir>/<run-id>/ as for
ray_jobs.compare (comparison.json, report.md, plots).

Goals: Ray's own release benchmark (release/air_tests/air_benchmarks) gates Ray's training time at 1.15× vanilla,
so Ray's steady-state throughput should be at least 1/1.15 of the vanilla launcher's; end to end, this project's
goal is Ray at most 1.3× the vanilla launcher's wall time for the same 3-epoch, 2-worker job.
"""

import argparse
import logging
from typing import Any

from analysis import runs
from analysis.speed import OWN_LAUNCHER_ARMS
from contract.comparison import CompareConfig
from contract.config import LAUNCHERS, TrainConfig
from ray_jobs import orchestrator
from runtime import cli, flags, preflight

log = logging.getLogger(__name__)
STEADY_GOAL = 1 / 1.15
"""Ray ÷ vanilla steady-state throughput at least this (training time at most 1.15× vanilla)."""
END_TO_END_GOAL = 1.3
"""Ray ÷ vanilla end-to-end wall time at most this."""


def judge(estimate: dict[str, Any] | None, goal: float, higher_is_better: bool) -> str:
    """`met` when the whole interval meets the goal, `missed` when the whole interval misses it, else `undecided`;
    with one repeat (no interval) the point estimate decides, and the verdict says so."""
    if not estimate:
        return "no data"
    low, high = estimate["ci95"] or (estimate["ratio"], estimate["ratio"])
    good, bad = (low >= goal, high < goal) if higher_is_better else (high <= goal, low > goal)
    verdict = "met" if good else "missed" if bad else "undecided"
    return verdict if estimate["ci95"] else f"{verdict} (1 run, no interval)"


def ratio_text(estimate: dict[str, Any] | None) -> str:
    if not estimate:
        return "—"
    ci = estimate["ci95"]
    interval = f"{ci[0]:.2f}–{ci[1]:.2f}" if ci else "no interval"
    return f"{estimate['ratio']:.2f}× ({interval})"


def table(comparison: dict[str, Any]) -> str:
    lines = []
    s = comparison["settings"]
    for workers in s["workers"]:
        n = str(workers)
        lines += [f"{workers} worker(s), {s['repeats']} round(s), {s['config']['epochs']} epoch(s); ratio (95 % CI)",
                  f"{'comparison':<26} {'steady-state throughput':<26} {'end-to-end wall time':<26} goal and verdict"]
        overhead = comparison["launcher_overhead"].get(n, {})
        for arm in OWN_LAUNCHER_ARMS:
            section = overhead.get(arm, {})
            backend, vanilla = arm.split("/")
            name = f"Ray {'Horovod' if backend == 'horovod' else backend} ÷ {vanilla}"
            steady, end_to_end = section.get("steady"), section.get("end_to_end")
            lines.append(f"{name:<26} {ratio_text(steady):<26} {ratio_text(end_to_end):<26} steady ≥ "
                         f"{STEADY_GOAL:.2f}: {judge(steady, STEADY_GOAL, True)}; end to end ≤ "
                         f"{END_TO_END_GOAL:.2f}: {judge(end_to_end, END_TO_END_GOAL, False)}")
        answer = comparison["speed"].get(n)
        lines.append(f"{'native ÷ Horovod (Ray)':<26} {ratio_text(answer):<26} {'—':<26} "
                     f"no goal: {answer['sentence'] if answer else 'a backend did not finish'}")
        for arm, estimate in comparison.get("noise_floor", {}).get(n, {}).items():
            # The A/A control: an arm against itself must show no difference; its interval is the resolution.
            lines.append(f"{f'A/A: {arm} ÷ itself':<26} {ratio_text(estimate):<26} {'—':<26} "
                         f"noise floor: interval must contain 1")
    return "\n".join(lines)


def parser() -> cli.Parser:
    out = cli.Parser(description=__doc__, prog="python -m ray_jobs.bench",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    flags.add(out, CompareConfig, only=("workers", "aa", "repeats", "output_dir"),
              defaults={"repeats": 3, "output_dir": "results/bench"})
    flags.add(out, exclude=("workers", "output_dir", "checkpoint_dir", "no_averaging"),
              defaults={"epochs": 3, "cpu_affinity": orchestrator.DEFAULT_AFFINITY})
    return out


def main() -> int:
    args = parser().parse_args()
    cmp = CompareConfig(workers=args.workers, repeats=args.repeats, launchers=",".join(LAUNCHERS), aa=args.aa,
                        no_ceiling=True)  # the launchers' costs, not the backends' distance from the limit
    base = flags.from_args(args, TrainConfig, workers=1, output_dir=".")
    root = preflight.writable_dir(args.output_dir, "--output-dir")
    run_dir = orchestrator.compare(base, cmp, root, references=False)
    written = runs.load(run_dir)
    log.info("\n%s\n\nruns, report and plots: %s", table(written), run_dir)
    failed = [r for r in written["runs"] if r["status"] != "ok"]
    if failed:
        log.error("%d run(s) failed; see %s", len(failed), run_dir / "report.md")
        return 1
    return 0


if __name__ == "__main__":
    cli.run(main)
