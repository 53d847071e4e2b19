"""One offline GPU check: Horovod built with NCCL from its sdist, then native DDP under torchrun and Horovod under
horovodrun on every GPU of this machine, beside the single-process reference, per model, in float32 and with
`--amp fp16` (GradScaler) and `--amp bf16`: parity and steady samples/s over interleaved repeats, and DataParallel as
a further reference where there are two GPUs or more.

    HOROVOD_SDIST=horovod-0.28.1.tar.gz make gpu-check
    python3 -m ray_jobs.gpu_check --sdist horovod-0.28.1.tar.gz --models resnet18 --amp none --repeats 3

It needs what a GPU machine holds (torch, torchvision, a CUDA toolkit and NCCL): no package index, no Ray and no
install of this project; run it from the source tree. Horovod goes into <output-dir>/horovod (pip --target), not
into the Python environment. Every other flag is compare's (python -m ray_jobs.compare --help) and overrides the
defaults below. Writes <output-dir>/<run-id>/: a comparison per model and precision with its report, grid.json and
the grid's report (python -m ray_jobs.compare --render renders it again), and prints one table.
"""

import argparse
import logging
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from analysis import terminal, tuning
from contract.comparison import CompareConfig
from contract.config import ConfigError, TrainConfig
from contract.errors import RunFailed
from ray_jobs import compare, grid, orchestrator
from runtime import cli, preflight

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "tools" / "build_horovod.py"
DEFAULTS = ["--models", "convnet,resnet18,resnet50,vit_b_16", "--amp", "none,fp16,bf16", "--launchers",
            "torchrun,horovodrun", "--epochs", "1", "--repeats", "2", "--no-ceiling"]
"""What the check runs unless its flags say otherwise: each backend under its own launcher (no Ray there), one epoch,
two interleaved rounds per precision and model, without the ceiling arms (they would add half again to a run that
must fit one device call)."""


def parser() -> cli.Parser:
    out = cli.Parser(description=__doc__, prog="python -m ray_jobs.gpu_check",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("--sdist", default=os.environ.get("HOROVOD_SDIST", ""),
                     help="Horovod 0.28.1's sdist (horovod-0.28.1.tar.gz) to build with NCCL (default: $HOROVOD_SDIST)")
    return out


def main() -> int:
    args, rest = parser().parse_known_args()
    gpus = count_gpus()
    if not args.sdist or not Path(args.sdist).is_file():
        raise ConfigError(f"name Horovod 0.28.1's sdist with --sdist or HOROVOD_SDIST (got {args.sdist or 'none'}); "
                          "pip download --no-deps --no-binary :all: horovod==0.28.1 fetches it where an index is")
    toolchain = build_choice()
    if not toolchain.gpu:
        raise ConfigError(f"Horovod cannot be built with NCCL here: {toolchain.why}")
    argv = arguments(gpus, rest)
    *_, root = checked(argv)
    target = root / "horovod"
    log.info("building Horovod with NCCL into %s (%s)", target, toolchain.why)
    built = subprocess.run([sys.executable, str(BUILD), "--sdist", args.sdist, "--target", str(target)])
    if built.returncode:
        raise RunFailed(f"building Horovod with NCCL failed (exit {built.returncode}; its output is above)")
    use(target)
    return measure(argv)


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


def measure(argv: list[str]) -> int:
    """compare's grid over the check's settings, its report, and one table."""
    cmp, base, settings, root = checked(argv)
    grid_dir = grid.run(base, settings, cmp, root)
    loaded = tuning.load(grid_dir)
    log.info("%s", "\n".join(terminal.check_table(*loaded, grid_dir)))
    return compare.outcome([loaded[1][s["folder"]] for s in loaded[0]["settings"]], cmp.assert_parity)


if __name__ == "__main__":
    cli.run(main)
