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

Writes results/<run-id>/: each run's folder (results.json, its own lines), comparison.json, report.md,
verdicts.png, loss.png, throughput.png, overhead.png. Without --target-ci it runs --repeats rounds; make compare
asks for ±3 % within 9 minutes. Exit code 1 when a run failed, or with --assert-parity when parity is FAIL.

This module reads the flags and picks the path: one comparison (ray_jobs/orchestrator.py), the tuning grid
(ray_jobs/grid.py), or the link sweep on a simulated cluster (experiments/simulated_cluster/);
analysis/ renders what they write.
"""

import argparse
import json
import logging
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from analysis import parity, report, runs, terminal, text, tuning
from contract import models
from contract.comparison import GROUPS, LISTS, CompareConfig
from contract.config import BACKENDS, ConfigError, TrainConfig
from experiments.simulated_cluster import link_sweep, netsim, regime
from experiments.gpu_model import predict_gpus
from ray_jobs import grid, orchestrator, resume
from runtime import cli, files, flags, folder_lock, preflight, signals
from workload import data

log = logging.getLogger(__name__)


def main() -> int:
    given = {arg.split("=")[0] for arg in sys.argv[1:]}
    if {"--model", "--models"} <= given:
        raise ConfigError("--model and --models are one flag: give one of them, with a comma-separated list for "
                          "several models")
    args = make_defaults(parser().parse_args(), sys.argv[1:])
    if not (args.target_ci or args.make_target_ci) and "--budget-min" in given:
        raise ConfigError("--budget-min bounds the rounds --target-ci adds, and without --target-ci --repeats fixes "
                          "them, so it would bound nothing; add --target-ci (3 is ±3 %), or drop --budget-min")
    cmp = flags.from_args(args, CompareConfig)
    if cmp.render:
        log.info("%s", render(Path(cmp.render)))
        return 0
    cmp, base, settings = configs(args)
    grid.check_best_of_each(cmp, settings)
    for setting in settings:  # every setting of a grid checked before the first runs
        orchestrator.check_options(replace(base, **setting), list(cmp.backend_names))
        preflight.check_model(replace(base, **setting))
        data.check_known(replace(base, **setting, workers=max(cmp.worker_counts)))
    root = preflight.writable_dir(cmp.output_dir, "--output-dir")
    if cmp.simulate_nodes:
        return simulate(cmp, base, root)
    if cmp.link_rates != netsim.UNSHAPED:
        raise ConfigError("--link-rates shapes the links of a simulated cluster; add --simulate-nodes 2")
    extra = {"network": args.network, "reuse_references": args.reuse_references}
    if cmp.resume:
        root, extra["run_id"], extra["resume"] = resumable(Path(cmp.resume), base, cmp, settings)
    else:
        extra["run_id"] = args.run_id
    if len(settings) > 1:
        grid_dir = grid.run(base, settings, cmp, root, **extra)
        found, comparisons = tuning.load(grid_dir)
        log.info("%s", "\n".join(terminal.grid_summary(found, comparisons, grid_dir)))
        return outcome([comparisons[s["folder"]] for s in found["settings"]], cmp.assert_parity)
    run_dir = orchestrator.compare(base, cmp, root, **extra)
    written = runs.load(run_dir)
    log.info("%s", "\n".join(terminal.summary(written, run_dir)))
    return outcome([written], cmp.assert_parity)


PILOT = 3
"""The fewest rounds --target-ci's pilot measures a spread from (CompareConfig refuses fewer)."""


def make_defaults(args: argparse.Namespace, argv: list[str]) -> argparse.Namespace:
    """make compare's --target-ci, unless the flags after it say otherwise: a --target-ci of their own wins, and a
    --repeats below the pilot asks for that many rounds, fixed (as a user of `make compare ARGS="--repeats 2"` means),
    which is said."""
    given = {flag.split("=")[0] for flag in argv}
    if not args.make_target_ci or "--target-ci" in given:
        return args
    if "--repeats" in given and args.repeats < PILOT:
        log.info("--repeats %d: a fixed %d round(s), without make compare's --target-ci %g (its pilot needs %d)",
                 args.repeats, args.repeats, args.make_target_ci, PILOT)
        return args
    if len([name for name in args.backends.split(",") if name.strip()]) < 2:
        log.info("--backends %s: a fixed %d round(s), without make compare's --target-ci %g (it sizes native ÷ "
                 "Horovod)", args.backends, args.repeats, args.make_target_ci)
        return args
    args.target_ci = args.make_target_ci
    return args


def resumable(folder: Path, base: TrainConfig, cmp: CompareConfig, settings: list[dict[str, Any]]
              ) -> tuple[Path, str, bool]:
    """--resume FOLDER checked before anything starts: a comparison's folder asked the same again, or a grid's whose
    settings' folders each are; the root and run id to go on in."""
    folder = preflight.writable_dir(folder, "--resume")
    if not folder.is_dir():
        raise ConfigError(f"--resume {folder} does not exist; pass the results/<run-id> folder of the stopped run")
    folder_lock.hold(folder, "--resume")  # before anything reads or changes it
    if len(settings) > 1:  # a single comparison's folder is checked first thing as it plans (orchestrator.plan)
        labels = grid.labels(base, settings)
        for setting, label in zip(settings, labels):
            if (folder / label).is_dir() and not (folder / label / runs.COMPARISON).exists():
                resume.check(folder / label, resume.request(replace(base, **setting), cmp))
        if not any((folder / label).is_dir() for label in labels):
            raise ConfigError(f"--resume {folder} holds none of this grid's settings ({', '.join(labels[:3])}, …); "
                              "resume it with the settings it started with, or start a new grid")
    return folder.parent, folder.name, True


def configs(args: argparse.Namespace) -> tuple[CompareConfig, TrainConfig, list[dict[str, Any]]]:
    """The comparison's settings, the training config of its first setting, and every setting of a grid (one for a
    single comparison), checked as the typed configs check them."""
    cmp = flags.from_args(args, CompareConfig)
    settings = [grid.with_model_defaults(args, setting) for setting in grid.settings(cmp)]
    return cmp, flags.from_args(args, TrainConfig, workers=1, output_dir=".", **settings[0]), settings


def parser() -> cli.Parser:
    """compare's flags, in groups: CompareConfig's, then TrainConfig's for training."""
    # No abbreviated flags: the link sweep passes the user's flags on to the driver in node 0 without its own, which
    # it must recognise by their full names (experiments/simulated_cluster/link_sweep.py).
    out = cli.Parser(description=__doc__, prog="python -m ray_jobs.compare", allow_abbrev=False,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for title, names in GROUPS.items():
        flags.add(out.add_argument_group(title), CompareConfig, only=names, aliases={"model": "--models"},
                  bare={"gradient_as_bucket_view": "on"})
    # Every run starts fresh in its own folder: a shared --checkpoint-dir would resume one run from another's; the
    # ceiling is an arm of its own (--no-ceiling leaves it out), not a setting of every run.
    flags.add(out.add_argument_group("training (every run)"), TrainConfig,
              exclude=("workers", "output_dir", "checkpoint_dir", "no_averaging", *LISTS),
              defaults={"epochs": orchestrator.DEFAULT_EPOCHS, "cpu_affinity": orchestrator.DEFAULT_AFFINITY})
    # Set by the link sweep for the driver it runs inside node 0.
    out.add_argument("--network", type=json.loads, help=argparse.SUPPRESS)
    out.add_argument("--run-id", default="", help=argparse.SUPPRESS)
    out.add_argument("--reuse-references", type=Path, help=argparse.SUPPRESS)
    # make compare's default target, which the flags after it may override (make_defaults).
    out.add_argument("--make-target-ci", type=float, default=0.0, help=argparse.SUPPRESS)
    return out


RENDERERS = {regime.NETWORK: lambda sweep: regime.render(sweep, model_size), tuning.GRID: tuning.render,
             predict_gpus.FILE: predict_gpus.render, runs.COMPARISON: report.render}
"""The files --render reads, each with what renders the folder holding it: a link sweep's, a grid's, a GPU cluster
prediction's, a comparison's."""


def render(folder: Path) -> str:
    """--render: a link sweep's, a grid's or a comparison's report, from the JSON in `folder` alone; for a folder
    that holds none but has such folders beneath it (docs/results), every one of them (`make docs`). A refusal leaves
    every report and picture under `folder` as it was."""
    with files.unchanged_on_failure(folder, RENDERS):
        return _render(folder)


RENDERS = (".md", ".png")
"""What --render writes: reports and pictures."""


def _render(folder: Path) -> str:
    for name, rendered in RENDERERS.items():
        if (folder / name).exists():
            try:
                return rendered(folder)
            except ConfigError:
                raise
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as error:
                raise ConfigError(f"{folder / name} is damaged or from another version ({type(error).__name__}: "
                                  f"{error}); rerun python -m ray_jobs.compare") from None
    beneath = sorted({path.parent for name in RENDERERS for path in folder.rglob(name)}) if folder.is_dir() else []
    if not beneath:
        return report.render(folder)  # its refusal: no comparison.json here
    for each in beneath:
        _render(each)
    return "rendered again: " + ", ".join(str(each) for each in beneath)


def simulate(cmp: CompareConfig, base: TrainConfig, root: Path) -> int:
    """--simulate-nodes: everything checked here, before a namespace or a Ray node exists; then the link sweep."""
    rates = netsim.parse_rates(cmp.link_rates)
    if list(cmp.launcher_names) != ["ray"]:
        raise ConfigError("--simulate-nodes places workers on Ray nodes; torchrun, mp.spawn and horovodrun here start "
                          "every rank on this host: use --launchers ray")
    netsim.check_host(cmp.simulate_nodes)
    workers = list(cmp.worker_counts)
    netsim.check_workers(workers, cmp.simulate_nodes)
    lists = [flag for flag, value in (("--compression", cmp.compression), ("--bucket-mb", cmp.bucket_mb))
             if "," in value]
    if lists:
        # The regime report has one cell per rate and model; a second varied option would share its cells.
        raise ConfigError(f"--simulate-nodes varies the link rate and --model-width; give {' and '.join(lists)} "
                          "one value (run the tuning grid without --simulate-nodes)")
    orchestrator.check_options(base, list(cmp.backend_names))
    preflight.check_config(replace(base, workers=max(workers), output_dir=str(root)).with_absolute_paths(),
                           horovod="horovod" in cmp.backend_names)
    try:
        sweep_dir, code = link_sweep.run(sys.argv[1:], cmp.simulate_nodes, rates, root, workers)
    except KeyboardInterrupt:
        log.error("interrupted; the simulated cluster is torn down (namespaces, links and its Ray processes)")
        return signals.exit_code()
    except netsim.ClusterError as error:
        log.error("error: %s; the simulated cluster is torn down", error)
        return 1
    log.info("\n%s\nreport: %s", regime.render(sweep_dir, model_size), sweep_dir / "report.md")
    return 1 if code else 0


def model_size(key: int | str) -> dict[str, int]:
    """The ConvNet at a width, or a registry model by name: its parameters and float32 gradient bytes."""
    width, name = (key, "convnet") if isinstance(key, int) else (1, key)
    return {"parameters": models.parameters(name, width=width),
            "gradient_bytes": models.gradient_bytes(name, width=width)}


NO_VERDICT = 3
"""compare's exit code when every run finished but --repeats 2 or more left a worker count without a speed interval
(--budget-min cut the rounds): no answer is not a success to a script (docs/right-or-refused.md)."""


def unanswered(comparison: dict[str, Any]) -> list[str]:
    """The worker counts where rounds were asked for an interval and the speed verdict has none."""
    s = comparison["settings"]
    if s["repeats"] < 2 or not set(BACKENDS) <= set(s["backends"]):
        return []
    return [str(n) for n in s["workers"] if (comparison["speed"].get(str(n)) or {}).get("ci95") is None]


def outcome(comparisons: list[dict[str, Any]], assert_parity: bool) -> int:
    """The exit code: 1 when a run failed, or with --assert-parity when a parity verdict is FAIL; NO_VERDICT when
    rounds were asked for and a speed verdict has no interval."""
    failed = [r for c in comparisons for r in c["runs"] if r["status"] != "ok"]
    failing_parity = [f"{n} worker(s)" + (f" ({c['settings']['config']['compression']} compression, bucket "
                                          f"{c['settings']['config']['bucket_mb']:g})" if len(comparisons) > 1 else "")
                      for c in comparisons for n, v in c["parity"].items() if v["verdict"] != "PASS"]
    for c in comparisons:
        for n, v in c["parity"].items():
            dropout = v["verdict"] != "PASS" and (c.get("model") or {}).get("dropout")
            log.info("parity at %s worker(s): %s%s", n, parity_line(v),
                     " (the network has dropout: each process draws its own masks; see the report)" if dropout else "")
    if failed:
        log.error("%d run(s) failed; see the report", len(failed))
        return 1
    if assert_parity and failing_parity:
        log.error("parity FAIL at %s", ", ".join(failing_parity))
        return 1
    if missing := [n for c in comparisons for n in unanswered(c)]:
        log.error("no speed verdict at %s worker(s): too few rounds ran for an interval (the report says why); exit %d",
                  ", ".join(missing), NO_VERDICT)
        return NO_VERDICT
    return 0


def parity_line(verdict: dict[str, Any]) -> str:
    if not verdict["max_abs_step_loss_difference"]:  # nothing compared: why (a run diverged, or none finished)
        return f"{verdict['verdict']} ({verdict['why']})"
    pairs = "; ".join(f"{pair} {text.number(d)}" + (" (explained: rounding order)" if pair in verdict["explained"]
                                                       else "")
                      for pair, d in verdict["max_abs_step_loss_difference"].items())
    floor = parity.floor_words(verdict)
    return (f"{verdict['verdict']} over {verdict['steps']} steps, tolerance {verdict['tolerance']:g}"
            + (f", {floor}" if floor else "") + f": {pairs}")


if __name__ == "__main__":
    cli.run(main)
