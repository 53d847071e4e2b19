"""Native ÷ Horovod where this machine cannot go: a model of the allreduce fitted to saved link sweeps, checked on
the sweeps with more nodes, and predicted over nodes × link rates × gradient sizes. Trains nothing.

    python -m ray_jobs.compare --simulate-nodes 2 --link-rates 10mbit,20mbit,50mbit,200mbit,unshaped \\
        --model-width 1,2,4 --repeats 2 --output-dir results/sweeps           # the fit's measurements
    python -m ray_jobs.compare --simulate-nodes 3 --workers 3 --link-rates 10mbit,20mbit --model-width 1,4 \\
        --repeats 2 --output-dir results/sweeps                               # a check beyond the fit (and 4)
    python -m experiments.predict results/sweeps/<2-node> results/sweeps/<3-node> ...

Writes prediction.json, prediction.md and prediction.png into the first folder given. The model is fitted on the
2-node runs only; runs on more nodes are the validation (experiments/comm_model.py, experiments/prediction.py).
"""

import argparse
import functools
import logging
import os
from pathlib import Path

from contract import models
from contract.config import MAX_MODEL_WIDTH, ConfigError
from experiments import comm_model, netsim, prediction
from runtime import cli

log = logging.getLogger(__name__)
DEFAULT_NODES = "2,4,8,16,32,64"
DEFAULT_RATES = "1gbit,10gbit,25gbit,100gbit"
DEFAULT_WIDTHS = "1,2,3,4,5,6,7,8"
DEFAULT_MB = "100,440"  # ResNet-50 (25.6 M parameters) and BERT-base (110 M) in float32
DEFAULT_MODELS = ""


def parser() -> cli.Parser:
    out = cli.Parser(description=__doc__, prog="python -m experiments.predict",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    out.add_argument("sweeps", nargs="+", metavar="SWEEP_DIR",
                     help="folders written by compare --simulate-nodes (each holds network.json)")
    out.add_argument("--nodes", default=DEFAULT_NODES, help=f"node counts to predict (default: {DEFAULT_NODES})")
    out.add_argument("--link-rates", default=DEFAULT_RATES,
                     help=f"link rates to predict, e.g. 1gbit,10gbit (default: {DEFAULT_RATES})")
    out.add_argument("--model-width", default=DEFAULT_WIDTHS,
                     help=f"the ConvNet's widths to predict (default: {DEFAULT_WIDTHS})")
    out.add_argument("--gradient-mb", default=DEFAULT_MB,
                     help="gradients of other models, in MB per allreduce (float32 bytes ÷ 1e6; default: "
                          f"{DEFAULT_MB}, ResNet-50 and BERT-base); predicted for their comm time alone unless "
                          "--compute-ms gives their compute per step")
    out.add_argument("--compute-ms", type=float, default=None,
                     help="the compute per step of the --gradient-mb models, in ms (default: none, comm only)")
    out.add_argument("--models", default=DEFAULT_MODELS,
                     help="registry models to predict, at the compute their sweep runs measured (else their comm "
                          "time alone; default: none), e.g. resnet18,resnet50,vit_b_16")
    out.add_argument("--hold-out", default="",
                     help="models whose 2-node runs check the fit instead of joining it, e.g. resnet50 (default: "
                          "none)")
    out.add_argument("--bucket-mb", type=float, default=0.0,
                     help="DDP's bucket cap and Horovod's fusion threshold in MiB for the predictions; 0: each "
                          "framework's default (default: 0)")
    return out


def main() -> int:
    args = parser().parse_args()
    grid = prediction.Grid(nodes=_ints(args.nodes, "--nodes", 2, 4096), rates=_rates(args.link_rates),
                           widths=_ints(args.model_width, "--model-width", 1, MAX_MODEL_WIDTH, allow_empty=True),
                           megabytes=_floats(args.gradient_mb, "--gradient-mb"), compute_ms=args.compute_ms,
                           bucket_mb=args.bucket_mb, models=_models(args.models, "--models"),
                           held_out=_models(args.hold_out, "--hold-out"))
    if args.compute_ms is not None and not 0 < args.compute_ms < 1e7:
        raise ConfigError(f"--compute-ms takes a positive number of milliseconds, got {args.compute_ms:g}")
    if not 0 <= args.bucket_mb < 1e6:
        raise ConfigError(f"--bucket-mb takes 0 (the defaults) or a positive size in MiB, got {args.bucket_mb:g}")
    if not grid.widths and not grid.megabytes and not grid.models:
        raise ConfigError("nothing to predict: give --model-width, --models or --gradient-mb")
    folder = Path(args.sweeps[0])
    for sweep in args.sweeps:
        if not (Path(sweep) / "network.json").is_file():
            raise ConfigError(f"{sweep} holds no network.json; pass folders written by compare --simulate-nodes")
    if len({Path(s).resolve() for s in args.sweeps}) != len(args.sweeps):
        raise ConfigError("a sweep folder is given twice: each run would count twice in the fit; name each once")
    if not os.access(folder, os.W_OK):
        raise ConfigError(f"{folder} is not writable; the prediction is written into the first folder given")
    from workload import model  # torch: each width's gradient, bucketed as DDP buckets it

    def gradient(width: int | str, bucket_mb: float) -> comm_model.Gradient:
        buckets, buffers = model.ddp_buckets(width, bucket_mb)
        return comm_model.Gradient(f"width {width}" if isinstance(width, int) else width, buckets, buffers)

    doc = prediction.build(args.sweeps, functools.cache(gradient), grid, netsim.burst_bytes)
    text = prediction.write(doc, folder)
    log.info("%s\nprediction: %s", text, folder / "prediction.md")
    return 0


def _ints(text: str, flag: str, low: int, high: int, allow_empty: bool = False) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"{flag} takes whole numbers like {low},{low + 1}, got {text!r}") from None
    if (not values and not allow_empty) or any(not low <= v <= high for v in values) or len(set(values)) != len(values):
        raise ConfigError(f"{flag} takes distinct whole numbers from {low} to {high}, got {text!r}")
    return values


def _models(text: str, flag: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if unknown := [n for n in names if n not in models.MODELS or n == "convnet"]:
        raise ConfigError(f"{flag} takes models of {', '.join(m for m in models.MODELS if m != 'convnet')} (the "
                          f"ConvNet by --model-width), got {', '.join(unknown)}")
    return names


def _floats(text: str, flag: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"{flag} takes sizes in MB like 100,440, got {text!r}") from None
    if any(not 0 < v < 1e6 for v in values):
        raise ConfigError(f"{flag} takes positive sizes in MB below 1e6, got {text!r}")
    return values


def _rates(text: str) -> dict[str, float]:
    rates = netsim.parse_rates(text)
    if netsim.UNSHAPED in rates:
        raise ConfigError(f"--link-rates here takes rates like 10gbit: {netsim.UNSHAPED} is a link this machine "
                          "had, not one to predict")
    return {rate: netsim.bits_per_s(rate) for rate in rates}


if __name__ == "__main__":
    cli.run(main)
