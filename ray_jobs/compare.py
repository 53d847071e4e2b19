"""Native DDP or Horovod? Run both, repeated and interleaved, beside single-process references, and report.

    python -m ray_jobs.compare --workers 2 --repeats 4
    python -m ray_jobs.compare --launchers ray,torchrun,horovodrun    # Ray beside each backend's own launcher
    python -m ray_jobs.compare --render results/<run-id>     # re-render report.md and plots from comparison.json

Writes results/<run-id>/: each run's results.json, comparison.json, report.md, loss.png, throughput.png,
overhead.png. Exit code 1 when a run failed, or with --assert-parity when parity is FAIL.

This module only orchestrates: the launchers are ray_jobs/launchers.py, the statistics workload/stats.py and
workload/speed.py, parity workload/parity.py, the rendering workload/report.py.
"""

import argparse
import logging
import math
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ray_jobs import launchers
from ray_jobs.cluster import check_address, connect, require, user_error
from ray_jobs.launchers import Arm
from ray_jobs.train import BACKENDS as RAY_BACKENDS
from workload import cli, data, parity, preflight, reference, report, results, speed, stats
from workload.config import ConfigError, TrainConfig, check_backend_options

log = logging.getLogger(__name__)
BACKENDS = tuple(RAY_BACKENDS)
DEFAULT_TOLERANCE = 1e-4
DEFAULT_WORKERS = "2"
DEFAULT_REPEATS = 6
DEFAULT_EPOCHS = 2
RUN_KEYS = ("epochs", "final", "step_losses", "peak_rss_mb_per_worker", "parameters_identical_across_ranks",
            "buffers_identical_across_ranks", "phases", "end_to_end_s", "eval_time_s", "checkpoint_time_s")


def parse_workers(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise ConfigError(f"--workers takes a comma-separated list of positive integers, got {text!r}") from None
    if not counts or any(n <= 0 for n in counts) or len(set(counts)) != len(counts):
        raise ConfigError(f"--workers takes distinct positive integers, got {text!r}")
    return counts


def parse_backends(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in BACKENDS]
    if unknown or not names:
        named = ", ".join(unknown) or repr(text)
        raise ConfigError(f"unknown backend {named} in --backends; choose from {', '.join(BACKENDS)}")
    return names


def plan(workers: list[int], arms: list[Arm], repeats: int) -> tuple[list[tuple[int, Arm, int]], list[dict]]:
    """The runs as (round, arm, workers), in order, and what cannot run here with the reason.

    Per worker count: the references once (they are deterministic and only serve parity), then every arm
    `repeats` times in a balanced order (A B B A …), so that a slow minute on the machine hits every arm alike.
    """
    runs, not_applicable = [], []
    for n in workers:
        runs.append((0, Arm("reference", "local"), n))
        if n > 1:
            runs.append((0, Arm("global-batch", "local"), n))
        runs += [(r, arm, n) for r, arm in stats.balanced_order(arms, repeats)]
        if n > 1:
            if reason := reference.dataparallel_unavailable(n):
                not_applicable.append({"backend": "dataparallel", "workers": n, "reason": reason})
            else:
                runs.append((0, Arm("dataparallel", "local"), n))
    return runs, not_applicable


def compare(base: TrainConfig, workers: list[int], backends: list[str], root: Path, *, parity_steps: int,
            tolerance: float, target_accuracy: float, repeats: int = 1, launcher_names: list[str] = ("ray",),
            references: bool = True) -> Path:
    """Run everything into root/<run-id>/ and write comparison.json; returns that folder."""
    launcher_names = list(launcher_names)
    for backend in backends:
        check_backend_options(base, backend, "--backends")
    launchers.check_available(launcher_names, backends)
    # Checked (and the dataset resolved) at the most workers: they make the shortest epochs.
    base = replace(base, workers=max(workers), output_dir=str(root)).with_absolute_paths()
    preflight.check_config(base)
    on_ray = bool(backends) and "ray" in launcher_names
    if on_ray:
        check_address()
    base = data.resolve(base)
    if on_ray:
        connect()  # one Ray cluster for every run
        require(max(workers), base.use_gpu)
    runs, not_applicable = plan(workers, launchers.arms(backends, launcher_names), repeats)
    if not references:
        runs = [run for run in runs if run[1].launcher != "local"]
    run_id = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    run_dir = root / run_id
    run_dir.mkdir(parents=True)
    started = time.monotonic()
    records = []
    for i, (round_, arm, n) in enumerate(runs, 1):
        name = f"{arm.label.replace('/', '-')}-{n}w" + (f"-r{round_}" if arm.launcher != "local" else "")
        cfg = replace(base, workers=n, output_dir=str(run_dir / name))
        what = f"[{i}/{len(runs)}] {arm.label}, {n} worker(s)"
        what += f", round {round_ + 1}" if arm.launcher != "local" else ""
        log.info("%s: started at +%.0f s", what, time.monotonic() - started)
        record = {"arm": arm.label, "backend": arm.backend, "launcher": arm.launcher, "workers": n, "round": round_}
        try:
            doc = launchers.run(arm, cfg)
            records.append({**record, "status": "ok", "error": None,
                            "results": str(Path(cfg.output_dir, results.FILENAME).relative_to(run_dir)),
                            **{k: doc[k] for k in RUN_KEYS},
                            speed.METRIC: doc["epochs"][-1]["samples_per_s_median"]})
            log.info("%s: done, %.0f samples/s (steady), test accuracy %.2f%%, %.1f s end to end, +%.0f s", what,
                     doc["epochs"][-1]["samples_per_s_median"], 100 * doc["final"]["test_accuracy"],
                     doc["end_to_end_s"], time.monotonic() - started)
        except Exception as error:  # noqa: BLE001 - a failed run is recorded in the report, and the rest go on
            error = user_error(error) or error
            message = " ".join(f"{type(error).__name__}: {error}".split())[:500]
            records.append({**record, "status": "failed", "error": message})
            log.error("%s: FAILED: %s", what, message)
    compared = [arm.label for arm in launchers.arms(backends, launcher_names)]
    verdicts, speeds, overheads = {}, {}, {}
    for n in workers:
        # Parity from each arm's first finished round: every repeat trains the same model.
        losses = {}
        for r in sorted(records, key=lambda r: r["round"]):
            if r["workers"] == n and r["status"] == "ok":
                losses.setdefault(r["arm"], r["step_losses"])
        verdicts[str(n)] = parity.verdict(losses, parity_steps, tolerance, compared)
        if set(backends) == set(BACKENDS) and (answer := speed.speed(records, n, launcher_names)):
            speeds[str(n)] = answer
        if overhead := speed.launcher_overhead(records, n):
            overheads[str(n)] = overhead
    comparison = {
        "schema_version": 2,
        "run_id": run_id,
        "settings": {"config": base.to_dict(), "workers": workers, "backends": backends, "launchers": launcher_names,
                     "repeats": repeats, "parity_steps": parity_steps, "tolerance": tolerance,
                     "target_accuracy": target_accuracy, "speed_metric": speed.METRIC},
        "environment": results.environment(),
        "wall_time_s": time.monotonic() - started,
        "runs": records,
        "not_applicable": not_applicable,
        "parity": verdicts,
        "speed": speeds,
        "launcher_overhead": overheads,
    }
    results.write_json(run_dir / report.COMPARISON, comparison)
    return run_dir


def main() -> int:
    parser = cli.Parser(description=__doc__, prog="python -m ray_jobs.compare",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default=DEFAULT_WORKERS,
                        help=f"worker counts to compare (default: {DEFAULT_WORKERS})")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="distributed backends (default: native,horovod)")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS,
                        help=f"runs of every arm per worker count, interleaved (default: {DEFAULT_REPEATS})")
    parser.add_argument("--launchers", default="ray",
                        help=f"comma-separated, from {', '.join(launchers.LAUNCHERS)}: torchrun and horovodrun add "
                             "each backend under its own launcher beside Ray (default: ray)")
    parser.add_argument("--output-dir", default="results", help="each comparison goes into <output-dir>/<run-id>/")
    parser.add_argument("--parity-steps", type=int, default=50, help="steps compared for parity (default: 50)")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                        help=f"largest |step-loss difference| that passes (default: {DEFAULT_TOLERANCE:g})")
    parser.add_argument("--target-accuracy", type=float, default=0.95, help="for time to accuracy (default: 0.95)")
    parser.add_argument("--assert-parity", action="store_true", help="exit 1 unless parity is PASS everywhere")
    parser.add_argument("--render", metavar="DIR", help="only re-render DIR's report from its comparison.json")
    # Every run starts fresh in its own folder: a shared --checkpoint-dir would resume one run from another's.
    cli.add_config_flags(parser, exclude=("workers", "output_dir", "checkpoint_dir"),
                         defaults={"epochs": DEFAULT_EPOCHS})
    args = parser.parse_args()
    if args.render:
        log.info("%s", report.render(args.render))
        return 0
    workers = parse_workers(args.workers)
    backends = parse_backends(args.backends)
    launcher_names = launchers.parse_launchers(args.launchers)
    if args.repeats <= 0:
        raise ConfigError(f"--repeats must be a positive integer, got {args.repeats}")
    if args.parity_steps <= 0:
        raise ConfigError(f"--parity-steps must be a positive integer, got {args.parity_steps}")
    if not (math.isfinite(args.tolerance) and args.tolerance >= 0):
        raise ConfigError(f"--tolerance must be a finite number >= 0, got {args.tolerance}")
    if not 0 < args.target_accuracy <= 1:
        raise ConfigError(f"--target-accuracy must be in (0, 1], got {args.target_accuracy}")
    base = cli.config_from_args(args, workers=1, output_dir=".")
    root = preflight.writable_dir(args.output_dir, "--output-dir")
    run_dir = compare(base, workers, backends, root, parity_steps=args.parity_steps, tolerance=args.tolerance,
                      target_accuracy=args.target_accuracy, repeats=args.repeats, launcher_names=launcher_names)
    markdown = report.render(run_dir)
    comparison = report.load(run_dir)
    log.info("\n%s\nreport: %s", markdown, run_dir / "report.md")
    for n, answer in comparison["speed"].items():
        log.info("speed at %s worker(s), %d repeat(s): %s", n, answer["repeats"], answer["sentence"])
    failed = [r for r in comparison["runs"] if r["status"] != "ok"]
    failing_parity = [n for n, v in comparison["parity"].items() if v["verdict"] != "PASS"]
    if failed:
        log.error("%d run(s) failed; see the report", len(failed))
        return 1
    if args.assert_parity and failing_parity:
        log.error("parity FAIL at %s worker(s)", ", ".join(failing_parity))
        return 1
    return 0


if __name__ == "__main__":
    cli.run(main)
