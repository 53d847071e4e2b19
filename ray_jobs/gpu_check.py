"""One offline GPU check: Horovod built with NCCL from its sdist, then native DDP under torchrun and Horovod under
horovodrun on every GPU of this machine, beside the single-process reference, per model, in float32 and with
`--amp fp16` (GradScaler) and `--amp bf16`: parity and steady samples/s, and DataParallel as a further reference where
there are two GPUs or more.

    HOROVOD_SDIST=horovod-0.28.1.tar.gz make gpu-check
    python3 -m ray_jobs.gpu_check --sdist horovod-0.28.1.tar.gz --models resnet50 --amp none,bf16 --repeats 3
    python3 -m ray_jobs.gpu_check --sdist horovod-0.28.1.tar.gz --launchers ray --models resnet50   # Ray Train's arm

It needs what a GPU machine holds (torch, torchvision, a CUDA toolkit and NCCL): no package index, no Ray (but for
--launchers ray) and no install of this project; run it from the source tree. Horovod is built into a temporary folder
outside --output-dir (its wheel is cached, so a second check installs it in seconds). It prints the plan and its
estimate first; --budget-min bounds the whole check, the build included: a setting that the time so far says cannot
end within it does not start, and the report names it. Every other flag is compare's (python -m ray_jobs.compare
--help) and overrides the defaults below. Writes <output-dir>/<run-id>/: a comparison per model and precision with its
report, grid.json and the grid's report (python -m ray_jobs.compare --render renders it again), and prints one table.

--cpu-stand-in rehearses the check on a machine without a GPU (make gpu-rehearsal, tools/gpu_rehearsal.py): the same
build with NCCL, for the compute capabilities in HOROVOD_BUILD_CUDA_CC_LIST, then the same plan with CPU runs in place
of GPU ones (fp16 needs a GPU: its settings are left out).
"""

import argparse
import atexit
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from analysis import terminal, text, tuning
from contract.comparison import CompareConfig
from contract.config import ConfigError, TrainConfig
from contract.errors import RunFailed
from ray_jobs import compare, grid, orchestrator
from runtime import cli, preflight, tied

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "tools" / "build_horovod.py"
DEFAULTS = ["--models", "convnet,resnet50,vit_b_16", "--amp", "none,fp16,bf16", "--launchers", "torchrun,horovodrun",
            "--epochs", "1", "--repeats", "1", "--no-ceiling", "--dataset", "synthetic", "--budget-min", "7"]
"""What the check runs unless its flags say otherwise: each backend under its own launcher, one epoch of synthetic data
(no download offline), one round per precision and model, without the ceiling arms, within 7 minutes with the build:
a first GPU run that fits a 10-minute session on an offline GPU machine with room to run it again (ESTIMATE_S prices
it)."""
ESTIMATE_S = {"build": 150.0, "local": 5.0, "torchrun": 8.0, "mp.spawn": 8.0, "horovodrun": 8.0, "ray": 10.0,
              "ray_start": 20.0}
"""Seconds the plan's estimate takes per step on one GPU machine, assumed for the default plan: Horovod's build with
NCCL on 16 cores; a run under each launcher, start-up-bound at the default sizes (on 2 CPU cores here a run of these
models' first 20 steps took 4.3-9.8 s end to end under torchrun and horovodrun, 2.2-5.9 s for the in-process
reference); Ray's own start. On one H200 with 16 cores (docs/results/gpu-nvidia-h200) the build took 130 s, and a
ResNet-50 run at 224 px, batch 32, 60 steps, took 14.9 s in process and 24.8 and 25.9 s under torchrun and
horovodrun, 9-10 s of it before the ranks ran: the default plan's 32 px runs were not timed there. The check prints
its measured pace as it goes, and --budget-min, not this estimate, bounds it."""


def parser() -> cli.Parser:
    out = cli.Parser(description=__doc__, prog="python -m ray_jobs.gpu_check",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("--sdist", default=os.environ.get("HOROVOD_SDIST", ""),
                     help="Horovod 0.28.1's sdist (horovod-0.28.1.tar.gz) to build with NCCL (default: $HOROVOD_SDIST)")
    out.add_argument("--cpu-stand-in", action="store_true",
                     help="rehearse without a GPU: build with NCCL for HOROVOD_BUILD_CUDA_CC_LIST, then run the "
                          "plan on CPUs (make gpu-rehearsal)")
    return out


def main() -> int:
    tied.die_with_parent()  # make killed with SIGKILL ends the check too
    began = time.monotonic()
    args, rest = parser().parse_known_args()
    if not BUILD.is_file():
        raise ConfigError(f"the GPU check builds Horovod with {BUILD.relative_to(REPO)}, which an installed copy lacks; "
                          "run it from a clone of the repository (make gpu-check)")
    gpus = 1 if args.cpu_stand_in else count_gpus()
    if not args.sdist or not Path(args.sdist).is_file():
        raise ConfigError(f"name Horovod 0.28.1's sdist with --sdist or HOROVOD_SDIST (got {args.sdist or 'none'}); "
                          "pip download --no-deps --no-binary :all: horovod==0.28.1 fetches it where an index is")
    if args.cpu_stand_in and not os.environ.get("HOROVOD_BUILD_CUDA_CC_LIST", "").strip():
        raise ConfigError("--cpu-stand-in builds Horovod with NCCL for GPUs this machine does not have: set "
                          "HOROVOD_BUILD_CUDA_CC_LIST (90 for an H100 or H200)")
    toolchain = build_choice()
    if not toolchain.gpu:
        raise ConfigError(f"Horovod cannot be built with NCCL here: {toolchain.why}")
    argv = arguments(gpus, rest, use_gpu=not args.cpu_stand_in)
    if args.cpu_stand_in:
        argv = on_cpus(argv)
    cmp, _, settings, _ = checked(argv)
    log.info("the plan: %s", plan_text(settings, cmp, gpus, estimate_s(settings, cmp)))
    target = Path(tempfile.mkdtemp(prefix="horovod-nccl-"))
    atexit.register(shutil.rmtree, target, ignore_errors=True)
    log.info("building Horovod with NCCL into %s (%s)", target, toolchain.why)
    # Tied: a check killed midway takes the build's pip, cmake and nvcc with it.
    if built := tied.run([sys.executable, str(BUILD), "--sdist", args.sdist, "--target", str(target)]):
        raise RunFailed(f"building Horovod with NCCL failed (exit {built}; its output is above)")
    use(target)
    log.info("Horovod with NCCL ready after %s", text.duration(time.monotonic() - began))
    return measure(argv, began + 60 * cmp.budget_min)


def count_gpus() -> int:
    """The GPUs torch sees; none is one line, before anything is built or run."""
    try:
        import torch
    except ImportError:
        raise ConfigError(f"torch is not importable by {sys.executable}; run the check with the Python that holds "
                          "torch and torchvision") from None
    if not (gpus := torch.cuda.device_count()):
        raise ConfigError("make gpu-check measures on GPUs, and torch sees none here (torch.cuda.device_count() is 0); "
                          "run it on a machine with an NVIDIA GPU and its driver")
    return gpus


def build_choice():
    """tools/build_horovod.py's choice for this machine: NCCL where a toolkit, NCCL and the GPUs are found."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("build_horovod", BUILD)
    build_horovod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_horovod)
    return build_horovod.find_build(torch)


def arguments(gpus: int, given: list[str], use_gpu: bool = True) -> list[str]:
    """compare's flags for the check: the defaults, then every GPU of the machine as one worker each, then what the
    user gave (argparse keeps the last of a flag given twice)."""
    return [*DEFAULTS, "--workers", str(gpus), *(["--use-gpu"] if use_gpu else []), *given]


def on_cpus(argv: list[str]) -> list[str]:
    """The check's flags for CPU stand-ins: its precisions but fp16, which needs a GPU and a GradScaler."""
    asked = [part.strip() for part in compare.parser().parse_args(argv).amp.split(",")]
    kept = [amp for amp in asked if amp != "fp16"] or ["none"]
    if kept != asked:
        log.info("on CPU stand-ins --amp %s runs as --amp %s: fp16 needs a GPU", ",".join(asked), ",".join(kept))
    return [*argv, "--amp", ",".join(kept)]


def estimate_s(settings: list[dict[str, Any]], cmp: CompareConfig) -> float:
    """The check's seconds by ESTIMATE_S: the build, then each setting's runs (orchestrator.runs lists them)."""
    planned, _ = orchestrator.runs(list(cmp.worker_counts), orchestrator.planned_arms(cmp), cmp.repeats)
    fixed = ESTIMATE_S["build"] + (ESTIMATE_S["ray_start"] if "ray" in cmp.launcher_names else 0.0)
    return fixed + len(settings) * sum(ESTIMATE_S[arm.launcher] for _, arm, _ in planned)


def plan_text(settings: list[dict[str, Any]], cmp: CompareConfig, gpus: int, seconds: float) -> str:
    """The plan in one line: settings, runs, and the estimate beside the budget."""
    compared = orchestrator.planned_arms(cmp)
    runs = len(orchestrator.runs(list(cmp.worker_counts), compared, cmp.repeats)[0]) * len(settings)
    return (f"{len(settings)} setting(s) × {', '.join(map(str, cmp.worker_counts))} worker(s) on {gpus} GPU(s), "
            f"{cmp.repeats} round(s) of {', '.join(arm.label for arm in compared)}: {runs} runs; about "
            f"{text.duration(seconds)} with the build (ray_jobs/gpu_check.py's ESTIMATE_S, assumed per run), "
            f"{what_fits(settings, cmp, seconds)}")


def what_fits(settings: list[dict[str, Any]], cmp: CompareConfig, seconds: float) -> str:
    """The plan beside --budget-min, in words; refused, before anything is built, where not one setting would fit."""
    budget = 60 * cmp.budget_min
    if seconds <= budget:
        return f"within --budget-min {cmp.budget_min:g}"
    fixed = ESTIMATE_S["build"] + (ESTIMATE_S["ray_start"] if "ray" in cmp.launcher_names else 0.0)
    each = (seconds - fixed) / len(settings)
    fit = int((budget - fixed) // each) if budget > fixed else 0
    if fit < 1:
        raise ConfigError(f"--budget-min {cmp.budget_min:g} is less than the build and one setting take (about "
                          f"{text.duration(fixed + each)} by ESTIMATE_S); pass --budget-min "
                          f"{math.ceil((fixed + each) / 60)} or more ({math.ceil(seconds / 60)} for the whole plan)")
    return (f"more than --budget-min {cmp.budget_min:g}: about {fit} of {len(settings)} setting(s) fit, and no "
            "setting starts once the time so far says it cannot finish")


def use(target: Path) -> None:
    """The Horovod in `target` for this process and every launcher and rank it starts."""
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target), str(REPO), os.environ.get("PYTHONPATH")]))
    os.environ["PATH"] = str(target / "bin") + os.pathsep + os.environ.get("PATH", "")
    sys.path[:0] = [str(target)]


def checked(argv: list[str]) -> tuple[CompareConfig, TrainConfig, list[dict[str, Any]], Path]:
    """compare's settings for `argv`, every setting checked as compare checks it, and the output folder."""
    cmp, base, settings = compare.configs(compare.parser().parse_args(argv))
    for setting in settings:
        orchestrator.check_options(replace(base, **setting), list(cmp.backend_names))
        preflight.check_model(replace(base, **setting))
    return cmp, base, settings, preflight.writable_dir(cmp.output_dir, "--output-dir")


def measure(argv: list[str], deadline: float | None = None) -> int:
    """compare's grid over the check's settings, no setting started past what `deadline` (time.monotonic()) allows,
    its report, and one table."""
    cmp, base, settings, root = checked(argv)
    grid_dir = grid.run(base, settings, cmp, root, deadline=deadline)
    loaded = tuning.load(grid_dir)
    log.info("%s", "\n".join(terminal.check_table(*loaded, grid_dir)))
    return compare.outcome([loaded[1][s["folder"]] for s in loaded[0]["settings"]], cmp.assert_parity)


if __name__ == "__main__":
    cli.run(main)
