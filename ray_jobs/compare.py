"""Native DDP or Horovod? Run both, repeated and interleaved, beside single-process references, and report.

    python -m ray_jobs.compare --workers 2 --repeats 4
    python -m ray_jobs.compare --launchers ray,torchrun,horovodrun    # Ray beside each backend's own launcher
    python -m ray_jobs.compare --compression fp16 --grad-accumulation 2   # the same options on both sides
    python -m ray_jobs.compare --bucket-mb 0.01,25 --repeats 4   # a tuning grid: one comparison per setting
    python -m ray_jobs.compare --simulate-nodes 2 --link-rates 20mbit,unshaped --model-width 1,4   # across a link
    python -m ray_jobs.compare --render results/<run-id>     # re-render report.md and plots from comparison.json

Writes results/<run-id>/: each run's results.json, comparison.json, report.md, loss.png, throughput.png,
overhead.png. Exit code 1 when a run failed, or with --assert-parity when parity is FAIL.

This module only orchestrates: the launchers are ray_jobs/launchers.py, the tuning grid ray_jobs/grid.py, the
simulated cluster ray_jobs/netsim.py and its link sweep ray_jobs/link_sweep.py, the options workload/options.py, the statistics workload/stats.py and workload/speed.py, parity workload/parity.py, the rendering
workload/report.py, workload/tuning.py and workload/regime.py.
"""

import argparse
import json
import logging
import math
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ray_jobs import grid, launchers, link_sweep, netsim, worker_output
from ray_jobs.cluster import check_address, connect, require, user_error
from ray_jobs.launchers import Arm
from ray_jobs.train import BACKENDS as RAY_BACKENDS
from workload import cli, data, options, parity, preflight, regime, report, results, speed, stats, tracing, tuning
from workload.config import ConfigError, TrainConfig

log = logging.getLogger(__name__)
BACKENDS = tuple(RAY_BACKENDS)
DEFAULT_TOLERANCE = 1e-4
DEFAULT_WORKERS = "2"
DEFAULT_REPEATS = 6
DEFAULT_EPOCHS = 2
RUN_KEYS = ("epochs", "final", "step_losses", "peak_rss_mb_per_worker", "parameters_identical_across_ranks",
            "buffers_identical_across_ranks", "parameters_sha256", "options", "phases", "end_to_end_s", "eval_time_s",
            "checkpoint_time_s", "placement")
ARTIFACTS = ("trace-rank*.json", tracing.TIMELINE, options.AUTOTUNE_LOG)
"""Files a run may leave beside its results.json that the report links to."""


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


def plan(workers: list[int], arms: list[Arm], repeats: int,
         emulate_horovod: bool = False) -> tuple[list[tuple[int, Arm, int]], list[dict]]:
    """The runs as (round, arm, workers), in order, and what cannot run here with the reason.

    Per worker count: the references once (they are deterministic and only serve parity; `emulate_horovod` adds the
    one that rounds compressed gradients as Horovod does), then every arm `repeats` times in a balanced order
    (A B B A …), so that a slow minute on the machine hits every arm alike.
    """
    runs, not_applicable = [], []
    for n in workers:
        runs.append((0, Arm("reference", "local"), n))
        if emulate_horovod:
            runs.append((0, Arm(parity.REFERENCE_HOROVOD, "local"), n))
        if n > 1:
            runs.append((0, Arm("global-batch", "local"), n))
        runs += [(r, arm, n) for r, arm in stats.balanced_order(arms, repeats)]
        if n > 1:
            from workload import reference  # torch, to count GPUs: after the flags are read, not for --help

            if reason := reference.dataparallel_unavailable(n):
                not_applicable.append({"backend": "dataparallel", "workers": n, "reason": reason})
            else:
                runs.append((0, Arm("dataparallel", "local"), n))
    return runs, not_applicable


def compare(base: TrainConfig, workers: list[int], backends: list[str], root: Path, *, parity_steps: int,
            tolerance: float, target_accuracy: float, repeats: int = 1, launcher_names: list[str] = ("ray",),
            references: bool = True, run_id: str = "", network: dict[str, Any] | None = None) -> Path:
    """Run everything into root/<run-id>/ (run_id: a timestamp unless given) and write comparison.json; returns that
    folder. `network`: the simulated link the runs cross (ray_jobs/link_sweep.py), recorded with every run."""
    launcher_names = list(launcher_names)
    check_options(base, backends)
    launchers.check_available(launcher_names, backends)
    # Checked (and the dataset resolved) at the most workers: they make the shortest epochs.
    base = replace(base, workers=max(workers), output_dir=str(root)).with_absolute_paths()
    preflight.check_config(base)
    on_ray = bool(backends) and "ray" in launcher_names
    if on_ray:
        check_address()
    base = data.resolve(base)
    run_id = run_id or datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    run_dir = root / run_id
    if on_ray:
        connect(run_dir / worker_output.LOG)  # one Ray cluster for every run; the file opens with the first Ray run
        require(max(workers), base.use_gpu)
    runs, not_applicable = plan(workers, launchers.arms(backends, launcher_names), repeats,
                                emulate_horovod=base.compression != "none" and "horovod" in backends)
    if not references:
        runs = [run for run in runs if run[1].launcher != "local"]
    run_dir.mkdir(parents=True)
    started = time.monotonic()
    records = []
    for i, (round_, arm, n) in enumerate(runs, 1):
        name = f"{arm.label.replace('/', '-')}-{n}w" + (f"-r{round_}" if arm.launcher != "local" else "")
        # Each backend takes the options it has; the others are recorded as not applicable in its results.json.
        cfg = replace(options.for_backend(base, arm.backend), workers=n, output_dir=str(run_dir / name))
        what = f"[{i}/{len(runs)}] {arm.label}, {n} worker(s)"
        what += f", round {round_ + 1}" if arm.launcher != "local" else ""
        log.info("%s: started at +%.0f s", what, time.monotonic() - started)
        record = {"arm": arm.label, "backend": arm.backend, "launcher": arm.launcher, "workers": n, "round": round_}
        try:
            doc = launchers.run(arm, cfg)
            if network:
                # The driver knows the link the workers crossed; the workers do not.
                doc["network"] = network
                results.write(cfg.output_dir, doc)
            records.append({**record, "status": "ok", "error": None,
                            "results": str(Path(cfg.output_dir, results.FILENAME).relative_to(run_dir)),
                            "artifacts": sorted(str(p.relative_to(run_dir)) for pattern in ARTIFACTS
                                                for p in Path(cfg.output_dir).glob(pattern)),
                            **{k: doc[k] for k in RUN_KEYS}, **({"network": network} if network else {}),
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
                     "target_accuracy": target_accuracy, "speed_metric": speed.METRIC,
                     **({"network": network} if network else {})},
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


def check_options(base: TrainConfig, backends: list[str]) -> None:
    """An option that no compared backend has is refused; one that only some have is recorded as not applicable."""
    for backend in ("native", "horovod"):
        if backend not in backends:
            options.check(base, "horovod" if backend == "native" else "native", "--backends")


def main() -> int:
    # No abbreviated flags: the link sweep passes the user's flags on to the driver in node 0 without its own, which
    # it must recognise by their full names (ray_jobs/link_sweep.py).
    parser = cli.Parser(description=__doc__, prog="python -m ray_jobs.compare", allow_abbrev=False,
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
    parser.add_argument("--simulate-nodes", type=int, default=0, metavar="N",
                        help="run on N simulated Ray nodes on this host, one network namespace each, one worker per "
                             "node (needs root, ip and tc; default: 0, one real node)")
    parser.add_argument("--link-rates", default=netsim.UNSHAPED,
                        help="with --simulate-nodes: the link rates to compare at, e.g. 20mbit,1gbit,unshaped, one "
                             "comparison each, and the regime report (default: unshaped)")
    # Set by the link sweep for the driver it runs inside node 0.
    parser.add_argument("--network", type=json.loads, help=argparse.SUPPRESS)
    parser.add_argument("--run-id", default="", help=argparse.SUPPRESS)
    # Every run starts fresh in its own folder: a shared --checkpoint-dir would resume one run from another's.
    grid.add_flags(parser)
    cli.add_config_flags(parser, exclude=("workers", "output_dir", "checkpoint_dir", *grid.OPTIONS),
                         defaults={"epochs": DEFAULT_EPOCHS})
    args = parser.parse_args()
    if args.render:
        grid_file = Path(args.render) / tuning.GRID
        sweep_file = Path(args.render) / regime.NETWORK
        log.info("%s", regime.render(args.render) if sweep_file.exists() else
                 tuning.render(args.render) if grid_file.exists() else report.render(args.render))
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
    settings = grid.settings(args)
    base = cli.config_from_args(args, workers=1, output_dir=".", **settings[0])
    for setting in settings:
        check_options(replace(base, **setting), backends)
    root = preflight.writable_dir(args.output_dir, "--output-dir")
    if args.simulate_nodes:
        return simulate(args, base, workers, backends, launcher_names, root)
    if args.link_rates != netsim.UNSHAPED:
        raise ConfigError("--link-rates shapes the links of a simulated cluster; add --simulate-nodes 2")
    kwargs = dict(parity_steps=args.parity_steps, tolerance=args.tolerance, target_accuracy=args.target_accuracy,
                  repeats=args.repeats, launcher_names=launcher_names, network=args.network)
    if len(settings) > 1:
        grid_dir = grid.run(compare, base, settings, workers, backends, root, run_id=args.run_id, **kwargs)
        log.info("\n%s\nreport: %s", tuning.render(grid_dir), grid_dir / "report.md")
        return outcome([report.load(grid_dir / s["folder"]) for s in tuning.load(grid_dir)[0]["settings"]],
                       args.assert_parity)
    run_dir = compare(base, workers, backends, root, run_id=args.run_id, **kwargs)
    markdown = report.render(run_dir)
    comparison = report.load(run_dir)
    log.info("\n%s\nreport: %s", markdown, run_dir / "report.md")
    for n, answer in comparison["speed"].items():
        log.info("speed at %s worker(s), %d repeat(s): %s", n, answer["repeats"], answer["sentence"])
    return outcome([comparison], args.assert_parity)


def simulate(args: argparse.Namespace, base: TrainConfig, workers: list[int], backends: list[str],
             launcher_names: list[str], root: Path) -> int:
    """--simulate-nodes: everything checked here, before a namespace or a Ray node exists; then the link sweep."""
    rates = netsim.parse_rates(args.link_rates)
    if launcher_names != ["ray"]:
        raise ConfigError("--simulate-nodes places workers on Ray nodes; torchrun and horovodrun here start every "
                          "rank on this host: use --launchers ray")
    netsim.check_host(args.simulate_nodes)
    netsim.check_workers(workers, args.simulate_nodes)
    lists = [flag for flag, value in (("--compression", args.compression), ("--bucket-mb", args.bucket_mb))
             if "," in value]
    if lists:
        # The regime report has one cell per rate and width; a second varied option would share its cells.
        raise ConfigError(f"--simulate-nodes varies the link rate and --model-width; give {' and '.join(lists)} "
                          "one value (run the tuning grid without --simulate-nodes)")
    check_options(base, backends)
    preflight.check_config(replace(base, workers=max(workers), output_dir=str(root)).with_absolute_paths())
    try:
        sweep_dir, code = link_sweep.run(sys.argv[1:], args.simulate_nodes, rates, root, workers)
    except KeyboardInterrupt:
        log.error("interrupted; the simulated cluster is torn down (namespaces, links and its Ray processes)")
        return 130
    except netsim.ClusterError as error:
        log.error("error: %s; the simulated cluster is torn down", error)
        return 1
    log.info("\n%s\nreport: %s", regime.render(sweep_dir), sweep_dir / "report.md")
    return 1 if code else 0


def outcome(comparisons: list[dict[str, Any]], assert_parity: bool) -> int:
    """The exit code: 1 when a run failed, or with --assert-parity when a parity verdict is FAIL."""
    failed = [r for c in comparisons for r in c["runs"] if r["status"] != "ok"]
    failing_parity = [f"{n} worker(s)" + (f" ({c['settings']['config']['compression']} compression, bucket "
                                          f"{c['settings']['config']['bucket_mb']:g})" if len(comparisons) > 1 else "")
                      for c in comparisons for n, v in c["parity"].items() if v["verdict"] != "PASS"]
    for c in comparisons:
        for n, v in c["parity"].items():
            log.info("parity at %s worker(s): %s", n, parity_line(v))
    if failed:
        log.error("%d run(s) failed; see the report", len(failed))
        return 1
    if assert_parity and failing_parity:
        log.error("parity FAIL at %s", ", ".join(failing_parity))
        return 1
    return 0


def parity_line(verdict: dict[str, Any]) -> str:
    pairs = "; ".join(f"{pair} {report.number(d)}" + (" (explained: rounding order)" if pair in verdict["explained"]
                                                       else "")
                      for pair, d in verdict["max_abs_step_loss_difference"].items())
    return f"{verdict['verdict']} over {verdict['steps']} steps, tolerance {verdict['tolerance']:g}: {pairs}"


if __name__ == "__main__":
    cli.run(main)
