"""The tuning grid: `compare --bucket-mb 0.01,25` or `--compression none,fp16` (or both: every combination) runs one
whole comparison per setting, each in its own folder, and writes the tuning table (analysis/tuning.py) beside them.

Within a setting the arms are interleaved and paired as in any comparison; the settings run one after another.
"""

import argparse
import logging
import math
from dataclasses import replace
from datetime import datetime, timezone
from itertools import product
from pathlib import Path
from typing import Any

from analysis import report, tuning
from contract import results
from contract.config import COMPRESSIONS, ConfigError, TrainConfig
from ray_jobs import orchestrator

log = logging.getLogger(__name__)
OPTIONS = ("bucket_mb", "compression", "model_width")
"""The options `compare` takes as comma-separated lists."""


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--compression", default="none",
                        help=f"gradients on the wire in both backends, from {', '.join(COMPRESSIONS)} (DDP: its "
                             "compress hooks; Horovod: its compressors); a comma-separated list runs the tuning grid "
                             "(default: none)")
    parser.add_argument("--bucket-mb", default="0",
                        help="DDP's bucket_cap_mb and Horovod's fusion threshold, in MiB; 0: each framework's own "
                             "default (DDP 25, Horovod 128); a comma-separated list runs the tuning grid (default: 0)")
    parser.add_argument("--model-width", default="1",
                        help="multiplies the ConvNet's channel counts (1: the tutorial network; the gradient grows "
                             "towards width²); a comma-separated list runs the grid (default: 1)")


def settings(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every combination of the listed values, as TrainConfig overrides; one setting when nothing is a list."""
    compressions = _distinct("--compression", [part.strip() for part in args.compression.split(",")])
    for name in compressions:
        if name not in COMPRESSIONS:
            raise ConfigError(f"--compression takes values from {', '.join(COMPRESSIONS)}, got {name!r}")
    buckets = _distinct("--bucket-mb", [_size(part) for part in args.bucket_mb.split(",")])
    widths = _distinct("--model-width", [_width(part) for part in args.model_width.split(",")])
    return [{"compression": c, "bucket_mb": b, "model_width": w} for c, b, w in product(compressions, buckets, widths)]


def _width(text: str) -> int:
    if not text.strip().isdigit() or int(text) <= 0:
        raise ConfigError(f"--model-width takes comma-separated positive integers, got {text.strip()!r}")
    return int(text)


def _size(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"--bucket-mb takes comma-separated sizes in MiB, got {text.strip()!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"--bucket-mb sizes must be finite and >= 0, got {text.strip()!r}")
    return value


def _distinct(flag: str, values: list) -> list:
    if len(set(values)) != len(values):
        raise ConfigError(f"{flag} lists a value twice: {', '.join(map(str, values))}")
    return values


def label(setting: dict[str, Any], varied: list[str]) -> str:
    """The setting's folder name, from the options the grid varies: `compression-fp16_bucket-mb-0.01`."""
    return "_".join(f"{name.replace('_', '-')}-{setting[name]:g}" if isinstance(setting[name], float)
                    else f"{name.replace('_', '-')}-{setting[name]}" for name in varied)


def run(base: TrainConfig, grid: list[dict[str, Any]], workers: list[int],
        backends: list[str], root: Path, run_id: str = "", **kwargs: Any) -> Path:
    """One comparison per setting into root/<grid-id>/<setting>/ (grid id: `run_id`, else a timestamp), then
    grid.json and the tuning report there. A setting that leaves an option out keeps `base`'s value."""
    grid = [{name: getattr(base, name) for name in OPTIONS} | setting for setting in grid]
    varied = [name for name in OPTIONS if len({setting[name] for setting in grid}) > 1]
    grid_dir = root / (run_id or datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S"))
    grid_dir.mkdir(parents=True)
    folders = []
    for i, setting in enumerate(grid, 1):
        folder = label(setting, varied)
        log.info("setting %d/%d: %s", i, len(grid), folder)
        # A link sweep's later rates reuse the same setting's references from its first rate's grid.
        reuse = {"reuse_references": kwargs["reuse_references"] / folder} if kwargs.get("reuse_references") else {}
        orchestrator.compare(replace(base, **setting), workers, backends, grid_dir, run_id=folder,
                             **{**kwargs, **reuse})
        report.render(grid_dir / folder)
        folders.append(folder)
    results.write_json(grid_dir / tuning.GRID, {
        "schema_version": tuning.SCHEMA_VERSION, "grid_id": grid_dir.name, "varied": varied,
        "settings": [{"folder": f, **s} for f, s in zip(folders, grid)], "workers": workers,
        "repeats": kwargs.get("repeats", 1),
    })
    tuning.render(grid_dir)
    return grid_dir
