"""Lose a node mid-run and get it back, on the project's workload, under each framework's elastic mode (as root).

    python -m experiments.elastic.trials --trials 3 --output-dir results/elastic      # 25 min at the defaults

Each mode trains the ConvNet (workload/elastic.py, with each framework's loop in its backend's folder) on a
simulated cluster of --max-workers nodes, one worker each:

- ray-native: Ray Train V2, ScalingConfig(num_workers=(min, max)), FailureConfig, a checkpoint each epoch;
- ray-horovod: Horovod elastic on Ray, RayExecutor(min_workers, max_workers), hvd.elastic.run, TorchState committed
  each epoch (in memory), ElasticSampler, and a check for returned hosts every 10 steps;
- torchrun: torchrun --nnodes MIN:MAX, the c10d rendezvous on node 0, one agent per node, a checkpoint file each
  epoch.

Per mode one fixed-size run (no loss) first, for the accuracy to compare with; then the trials, modes interleaved:
after step 10 of epoch 2 at full size every process of the last node dies by SIGKILL, and it comes back after
--return-after-s. Writes <output-dir>/<id>/elastic.json, results.json (its `elastic` section: the membership
changes and their times), elastic.png and every run's timeline, and prints the table.
"""

import argparse
import json
import logging
import math
import sys
from dataclasses import fields, replace
from datetime import datetime, timezone
from pathlib import Path

from analysis import plots
from contract import results
from contract.config import ConfigError, TrainConfig
from experiments.elastic import report as figures, node_loss
from experiments.simulated_cluster import netsim
from experiments.elastic.node_loss import KILL_EPOCH, KILL_STEP
from launchers import arms, elastic as drivers
from runtime import cli, flags, preflight, space
from workload import data

log = logging.getLogger(__name__)
SLOWEST_SAMPLES_PER_S = 500
"""A run is given its samples at this rate (a fifth of one worker's here), plus the node's absence, before it is
ended as stuck."""
TAKEN = {"epochs", "batch_size", "lr", "momentum", "seed", "dataset", "data_dir", "synthetic_train_size",
         "synthetic_test_size", "model_width", "threads_per_worker"}
"""The settings an elastic run honours; the others (compression, amp, …) belong to the fixed-size runs."""


def main() -> int:
    args = parser().parse_args()
    modes = check(args)
    cfg = flags.from_args(args, workers=args.max_workers)
    if cfg.dataset == "synthetic":
        check_length(cfg, cfg.synthetic_train_size, "--synthetic-train-size")
    netsim.check_host(args.max_workers, "python -m experiments.elastic.trials (one simulated node per worker)", "")
    if "ray-horovod" in modes:
        from horovod_ddp.adapter import import_horovod
        import_horovod()
    root = Path(args.output_dir).expanduser().resolve()
    preflight.writable_dir(str(root), "--output-dir")
    cfg = data.resolve(cfg.with_absolute_paths())
    samples = data.train_count(cfg)
    if cfg.dataset == "mnist":  # synthetic digits were checked above, before any were made
        check_length(cfg, samples, f"MNIST's {samples} training digits")
    root = root / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    root.mkdir(parents=True)
    runs, reasons = trials(modes, cfg, root, args, samples)
    settings = {"min_workers": args.min_workers, "max_workers": args.max_workers, "return_after_s":
                args.return_after_s, "loss": f"after step {KILL_STEP} of epoch {KILL_EPOCH + 1}", "samples": samples,
                "config": cfg.to_dict(), "environment": results.environment()}
    write(root, settings, runs, reasons)
    done = [t for mode in modes for t in runs[mode][1:]]
    log.info("Node %d of %d lost after step %d of epoch %d, back after %g s; median (range) of %d trial(s):\n\n%s\n\n"
             "%s", args.max_workers - 1, args.max_workers, KILL_STEP, KILL_EPOCH + 1, args.return_after_s,
             args.trials, figures.table(done, modes, {m: runs[m][0]["accuracy"] for m in modes}, reasons),
             root / "elastic.json")
    return 0 if not reasons and all(t["finished"] for t in done) else 1


def parser() -> cli.Parser:
    out = cli.Parser(description=__doc__, prog="python -m experiments.elastic.trials",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("--trials", type=int, default=3, help="trials per mode (default: 3)")
    out.add_argument("--modes", default=",".join(drivers.MODES),
                     help=f"comma-separated, from {', '.join(drivers.MODES)}")
    out.add_argument("--min-workers", type=int, default=1, help="the fewest workers a run goes on with (default: 1)")
    out.add_argument("--max-workers", type=int, default=2,
                     help="workers at full size, one per simulated node; the last node is lost (default: 2)")
    out.add_argument("--return-after-s", type=float, default=60,
                     help="seconds from the loss to the node's return (default: 60)")
    out.add_argument("--output-dir", default="results/elastic", help="runs and the table go into "
                                                                     "<output-dir>/<run-id>/")
    flags.add(out, exclude=[f.name for f in fields(TrainConfig) if f.name not in TAKEN],
              defaults={"epochs": 30, "dataset": "synthetic"})
    return out


def check(args: argparse.Namespace) -> list[str]:
    """The trials' own flags, refused in one line before anything starts; the modes to run."""
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or set(modes) - set(drivers.MODES) or len(set(modes)) != len(modes):
        raise ConfigError(f"--modes takes distinct names from {', '.join(drivers.MODES)}, got {args.modes!r}")
    if args.trials < 1:
        raise ConfigError(f"--trials must be >= 1, got {args.trials}")
    if args.min_workers < 1:
        raise ConfigError(f"--min-workers must be >= 1 (a run of no worker trains nothing), got {args.min_workers}")
    if args.min_workers > args.max_workers:
        raise ConfigError(f"--min-workers {args.min_workers} is above --max-workers {args.max_workers}; "
                          "lower it or raise --max-workers")
    if not 2 <= args.max_workers <= netsim.MAX_NODES:
        raise ConfigError(f"--max-workers takes 2 to {netsim.MAX_NODES} (one simulated node each; one is lost, the "
                          f"rest go on), got {args.max_workers}")
    if not (math.isfinite(args.return_after_s) and args.return_after_s > 0):
        raise ConfigError(f"--return-after-s must be > 0 and finite, got {args.return_after_s}")
    if args.epochs <= KILL_EPOCH + 1:
        raise ConfigError(f"--epochs must be > {KILL_EPOCH + 1}: the node is lost in epoch {KILL_EPOCH + 1}, "
                          f"got {args.epochs}")
    return modes


def trials(modes: list[str], cfg: TrainConfig, root: Path, args: argparse.Namespace,
           samples: int) -> tuple[dict[str, list[dict]], dict[str, str]]:
    """Each mode's fixed-size run, then the trials, interleaved (a slow moment falls on every mode alike); the runs
    by mode, and why a mode had no trials."""
    runs: dict[str, list[dict]] = {}
    reasons: dict[str, str] = {}
    for mode in modes:
        runs[mode] = [run(mode, cfg, root / mode / "fixed-size", args, samples, index=0)]
        if not runs[mode][0]["finished"]:  # no trial of a mode that cannot even run without a loss
            reasons[mode] = (f"its fixed-size run did not finish (exit {runs[mode][0]['exit']}); see "
                             f"{root / mode / 'fixed-size'}")
    for index in range(1, args.trials + 1):
        for mode in [m for m in modes if m not in reasons]:
            trial = run(mode, cfg, root / mode / f"trial-{index}", args, samples, index=index)
            log.info("%s trial %d: %s", mode, index, {k: trial[k] for k in (
                "finished", "stalled_s", "continued_world", "regrown_s", "samples_twice", "accuracy")})
            runs[mode].append(trial)
    return runs, reasons


def write(root: Path, settings: dict, runs: dict[str, list[dict]], reasons: dict[str, str]) -> None:
    """elastic.json (every run's figures), results.json's `elastic` section (the membership events) and elastic.png;
    each mode's first run is its fixed-size run."""
    space.write_json(root / "elastic.json", {**settings, "modes": [
        {"mode": mode, "trials": len(done) - 1, "finished": sum(t["finished"] for t in done[1:]),
         **({"reason": reasons[mode]} if mode in reasons else {}),
         "fixed_size": _public(done[0]), "runs": [_public(t) for t in done[1:]]} for mode, done in runs.items()]})
    space.write_json(root / results.FILENAME, {"elastic": {**settings, "modes": {
        mode: [{"trial": t["index"], "killed_s": t["killed_s"], "returned_s": t["returned_s"],
                "membership": t["membership"]} for t in done] for mode, done in runs.items()}}})
    plots.plot_elastic({mode: done[1:] for mode, done in runs.items()}, root / "elastic.png")


def check_length(cfg: TrainConfig, samples: int, what: str) -> None:
    if samples < (KILL_STEP + 1) * cfg.workers * cfg.batch_size:
        raise ConfigError(f"{what} must hold more than {KILL_STEP} full steps of {cfg.workers} x {cfg.batch_size} "
                          f"(the loss comes after step {KILL_STEP}); raise it or lower --batch-size")


def _public(run: dict) -> dict:
    return {k: v for k, v in run.items() if k not in ("series", "mode")}


def run(mode: str, cfg: TrainConfig, folder: Path, args: argparse.Namespace, samples: int, index: int) -> dict:
    """One run of `mode`; `index` 0 is the fixed-size run (no loss), the others are trials."""
    full = args.max_workers
    values = json.dumps(replace(cfg, output_dir=str(folder)).to_dict())  # the run's timeline and state go there
    env = {"OMP_NUM_THREADS": str(cfg.threads_per_worker), "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
           "HOROVOD_GLOO_IFACE": netsim.INTERFACE, **drivers.RAY_ENVIRONMENT, **arms.TORCHRUN_ENV}

    def kill_when(event: dict) -> bool:
        return (event["world"] == full and event["epoch"] >= KILL_EPOCH
                and event["offset"] >= KILL_STEP * full * cfg.batch_size)

    timeout_s = 300 + 2 * args.return_after_s + cfg.epochs * samples / SLOWEST_SAMPLES_PER_S
    outcome = node_loss.run(
        folder, nodes=full, env=env, timeout_s=timeout_s, return_after_s=args.return_after_s,
        kill_when=kill_when if index else None,
        driver=None if mode == "torchrun" else [sys.executable, "-m", "launchers.elastic", mode,
                                                str(args.min_workers), str(full), values],
        agent=lambda sim, node: node_loss.torchrun_agent(sim, node, args.min_workers,
                                                         ["-m", "native_ddp.elastic", values]))
    return summary(mode, index, outcome, cfg.epochs, samples, full)


def summary(mode: str, index: int, outcome: dict, epochs: int, samples: int, full: int) -> dict:
    """What node_loss.run's `outcome` says: the figures, the membership events and the plot's series."""
    events = outcome["events"]
    origin = events[0]["t"] if events else 0.0
    found = figures.figures(events, outcome["killed"], outcome["returned"], epochs, samples, full)
    # A trial whose node was never lost proves nothing; a fixed-size run must have stayed at full size.
    found["finished"] = found["finished"] and outcome["exit"] == 0 and (
        outcome["killed"] is not None if index else found["worlds"] == [full])
    return {"mode": mode, "index": index, "exit": outcome["exit"], **found,
            "killed_s": _since(outcome["killed"], origin), "returned_s": _since(outcome["returned"], origin),
            "membership": figures.membership(events, origin, outcome["killed"], outcome["returned"]),
            "series": figures.throughput(events, origin)}


def _since(moment: float | None, origin: float) -> float | None:
    return None if moment is None else round(moment - origin, 2)


if __name__ == "__main__":
    cli.run(main)
