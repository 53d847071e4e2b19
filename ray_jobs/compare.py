"""Native DDP or Horovod? Run both, repeated and interleaved, beside single-process references, and report.

    python -m ray_jobs.compare --workers 2 --repeats 4
    python -m ray_jobs.compare --launchers ray,torchrun,mp.spawn,horovodrun    # Ray beside each backend's own
    python -m ray_jobs.compare --compression fp16 --grad-accumulation 2   # the same options on both sides
    python -m ray_jobs.compare --model resnet18     # a torchvision ResNet on synthetic images (resnet50, vit_b_16, mlp)
    python -m ray_jobs.compare --models convnet,mlp,resnet18,resnet50   # one comparison per model, one table
    python -m ray_jobs.compare --bucket-mb 0.01,25 --repeats 4   # a tuning grid: one comparison per setting
    python -m ray_jobs.compare --simulate-nodes 2 --link-rates 20mbit,unshaped --model-width 1,4   # across a link
    python -m ray_jobs.compare --aa     # the A/A control: each arm against itself, the resolution of this machine
    python -m ray_jobs.compare --render results/<run-id>     # re-render report.md and plots from comparison.json

Writes results/<run-id>/: each run's results.json, comparison.json, report.md, loss.png, throughput.png,
overhead.png. Exit code 1 when a run failed, or with --assert-parity when parity is FAIL.

This module reads the flags and picks the path: one comparison (ray_jobs/orchestrator.py), the tuning grid
(ray_jobs/grid.py), or the link sweep on a simulated cluster (experiments/link_sweep.py, experiments/netsim.py);
analysis/ renders what they write.
"""

import argparse
import json
import logging
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from analysis import report, runs, tuning
from contract import models
from contract.config import BACKENDS, ConfigError, TrainConfig
from experiments import link_sweep, netsim, regime
from launchers import arms
from ray_jobs import grid, orchestrator
from runtime import cli, preflight, signals

log = logging.getLogger(__name__)
DEFAULT_BUDGET_MIN = 30.0


def main() -> int:
    # No abbreviated flags: the link sweep passes the user's flags on to the driver in node 0 without its own, which
    # it must recognise by their full names (experiments/link_sweep.py).
    parser = cli.Parser(description=__doc__, prog="python -m ray_jobs.compare", allow_abbrev=False,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default=orchestrator.DEFAULT_WORKERS,
                        help=f"worker counts to compare (default: {orchestrator.DEFAULT_WORKERS})")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="distributed backends (default: native,horovod)")
    parser.add_argument("--repeats", type=int, default=orchestrator.DEFAULT_REPEATS,
                        help=f"runs of every arm per worker count, interleaved (default: {orchestrator.DEFAULT_REPEATS})")
    parser.add_argument("--launchers", default="ray",
                        help=f"comma-separated, from {', '.join(arms.LAUNCHERS)}: torchrun, mp.spawn and horovodrun add "
                             "each backend under its own launcher beside Ray (default: ray)")
    parser.add_argument("--output-dir", default="results", help="each comparison goes into <output-dir>/<run-id>/")
    parser.add_argument("--parity-steps", type=int, default=50, help="steps compared for parity (default: 50)")
    parser.add_argument("--tolerance", type=float, default=orchestrator.DEFAULT_TOLERANCE,
                        help=f"largest |step-loss difference| that passes (default: {orchestrator.DEFAULT_TOLERANCE:g})")
    parser.add_argument("--target-accuracy", type=float, default=0.95, help="for time to accuracy (default: 0.95)")
    parser.add_argument("--assert-parity", action="store_true", help="exit 1 unless parity is PASS everywhere")
    parser.add_argument("--aa", action="store_true",
                        help="the A/A control: every arm also runs against a twin of itself, interleaved alike; the "
                             "report gives each A/A interval and the resolution it allows (doubles the runs)")
    parser.add_argument("--target-ci", type=float, default=0.0, metavar="PERCENT",
                        help="after the --repeats rounds (the pilot, at least 3), add the rounds Stein's two-stage "
                             "procedure says native ÷ Horovod needs for a 95 %% half-width of ±PERCENT, within "
                             "--budget-min; its interval stays valid, unlike one recomputed after every round "
                             "(default: 0, a fixed --repeats)")
    parser.add_argument("--budget-min", type=float, default=DEFAULT_BUDGET_MIN, metavar="MINUTES",
                        help=f"with --target-ci: the comparison's time from its first run, which the added rounds "
                             f"stay within; a grid or a link sweep gives it to each of its comparisons (default: "
                             f"{DEFAULT_BUDGET_MIN:g})")
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
    parser.add_argument("--reuse-references", type=Path, help=argparse.SUPPRESS)
    # Every run starts fresh in its own folder: a shared --checkpoint-dir would resume one run from another's.
    grid.add_flags(parser)
    cli.add_config_flags(parser, exclude=("workers", "output_dir", "checkpoint_dir", *grid.OPTIONS),
                         defaults={"epochs": orchestrator.DEFAULT_EPOCHS})
    args = parser.parse_args()
    if args.render:
        grid_file = Path(args.render) / tuning.GRID
        sweep_file = Path(args.render) / regime.NETWORK
        log.info("%s", render_sweep(args.render) if sweep_file.exists() else
                 tuning.render(args.render) if grid_file.exists() else report.render(args.render))
        return 0
    workers = orchestrator.parse_workers(args.workers)
    backends = orchestrator.parse_backends(args.backends)
    launcher_names = arms.parse_launchers(args.launchers)
    if args.repeats <= 0:
        raise ConfigError(f"--repeats must be a positive integer, got {args.repeats}")
    check_two_stage(args, backends)
    if args.parity_steps <= 0:
        raise ConfigError(f"--parity-steps must be a positive integer, got {args.parity_steps}")
    if not (math.isfinite(args.tolerance) and args.tolerance >= 0):
        raise ConfigError(f"--tolerance must be a finite number >= 0, got {args.tolerance}")
    if not 0 < args.target_accuracy <= 1:
        raise ConfigError(f"--target-accuracy must be in (0, 1], got {args.target_accuracy}")
    settings = [grid.with_model_defaults(args, setting) for setting in grid.settings(args)]
    base = cli.config_from_args(args, workers=1, output_dir=".", **settings[0])
    for setting in settings:
        orchestrator.check_options(replace(base, **setting), backends)
        preflight.check_model(replace(base, **setting))
    root = preflight.writable_dir(args.output_dir, "--output-dir")
    if args.simulate_nodes:
        return simulate(args, base, workers, backends, launcher_names, root)
    if args.link_rates != netsim.UNSHAPED:
        raise ConfigError("--link-rates shapes the links of a simulated cluster; add --simulate-nodes 2")
    kwargs = dict(parity_steps=args.parity_steps, tolerance=args.tolerance, target_accuracy=args.target_accuracy,
                  repeats=args.repeats, launcher_names=launcher_names, network=args.network, aa=args.aa,
                  target_ci=args.target_ci / 100, budget_s=60 * args.budget_min,
                  reuse_references=args.reuse_references)
    if len(settings) > 1:
        grid_dir = grid.run(base, settings, workers, backends, root, run_id=args.run_id, **kwargs)
        log.info("\n%s\nreport: %s", tuning.render(grid_dir), grid_dir / "report.md")
        return outcome([runs.load(grid_dir / s["folder"]) for s in tuning.load(grid_dir)[0]["settings"]],
                       args.assert_parity)
    run_dir = orchestrator.compare(base, workers, backends, root, run_id=args.run_id, **kwargs)
    markdown = report.render(run_dir)
    written = runs.load(run_dir)
    log.info("\n%s\nreport: %s", markdown, run_dir / "report.md")
    for n, answer in written["speed"].items():
        log.info("speed at %s worker(s), %d repeat(s): %s", n, answer["repeats"], answer["sentence"])
    for n in written["noise_floor"]:
        log.info("%s", report.noise_line(written, int(n)).replace("**", ""))
    return outcome([written], args.assert_parity)


def check_two_stage(args: argparse.Namespace, backends: list[str]) -> None:
    """--target-ci and --budget-min, before anything starts."""
    if not (math.isfinite(args.target_ci) and args.target_ci >= 0):
        raise ConfigError(f"--target-ci is a half-width in percent, e.g. 5 for ±5 %; got {args.target_ci}")
    if not (math.isfinite(args.budget_min) and args.budget_min > 0):
        raise ConfigError(f"--budget-min must be a positive number of minutes, got {args.budget_min}")
    if args.target_ci and set(backends) != set(BACKENDS):
        raise ConfigError("--target-ci sizes native ÷ Horovod; pass --backends native,horovod")
    if args.target_ci and args.repeats < 3:
        raise ConfigError(f"--target-ci needs a pilot of at least 3 rounds to measure its spread; pass --repeats 3 "
                          f"or more (got {args.repeats})")


def simulate(args: argparse.Namespace, base: TrainConfig, workers: list[int], backends: list[str],
             launcher_names: list[str], root: Path) -> int:
    """--simulate-nodes: everything checked here, before a namespace or a Ray node exists; then the link sweep."""
    rates = netsim.parse_rates(args.link_rates)
    if launcher_names != ["ray"]:
        raise ConfigError("--simulate-nodes places workers on Ray nodes; torchrun, mp.spawn and horovodrun here start "
                          "every rank on this host: use --launchers ray")
    netsim.check_host(args.simulate_nodes)
    netsim.check_workers(workers, args.simulate_nodes)
    lists = [flag for flag, value in (("--compression", args.compression), ("--bucket-mb", args.bucket_mb))
             if "," in value]
    if lists:
        # The regime report has one cell per rate and width; a second varied option would share its cells.
        raise ConfigError(f"--simulate-nodes varies the link rate and --model-width; give {' and '.join(lists)} "
                          "one value (run the tuning grid without --simulate-nodes)")
    orchestrator.check_options(base, backends)
    preflight.check_config(replace(base, workers=max(workers), output_dir=str(root)).with_absolute_paths())
    try:
        sweep_dir, code = link_sweep.run(sys.argv[1:], args.simulate_nodes, rates, root, workers)
    except KeyboardInterrupt:
        log.error("interrupted; the simulated cluster is torn down (namespaces, links and its Ray processes)")
        return signals.exit_code()
    except netsim.ClusterError as error:
        log.error("error: %s; the simulated cluster is torn down", error)
        return 1
    log.info("\n%s\nreport: %s", render_sweep(sweep_dir), sweep_dir / "report.md")
    return 1 if code else 0


def render_sweep(sweep_dir: str | Path) -> str:
    return regime.render(sweep_dir, model_size)


def model_size(key: int | str) -> dict[str, int]:
    """The ConvNet at a width, or a registry model by name: its parameters and float32 gradient bytes."""
    width, name = (key, "convnet") if isinstance(key, int) else (1, key)
    return {"parameters": models.parameters(name, width=width),
            "gradient_bytes": models.gradient_bytes(name, width=width)}


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
