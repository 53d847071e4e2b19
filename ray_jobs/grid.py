"""The tuning grid: `compare --bucket-mb 0.01,25`, `--compression none,fp16`, `--model convnet,resnet18`, … (or
several: every combination) runs one whole comparison per setting, each in its own folder, and writes the tuning
table (analysis/tuning.py) beside them.

Within a setting the arms are interleaved and paired as in any comparison; the settings run one after another. An
option that only one backend has (`--cycle-time-ms`, `--gradient-as-bucket-view`) changes that backend's arm alone.
"""

import argparse
import logging
import math
import time
from dataclasses import replace
from itertools import product
from pathlib import Path
from typing import Any

from analysis import runs, text, tuning
from contract.comparison import LISTS as OPTIONS
from contract.comparison import CompareConfig
from contract.config import AMP, BACKENDS, COMPRESSIONS, ConfigError, TrainConfig
from ray_jobs import orchestrator
from runtime import flags, folder_lock, run_folder, space

log = logging.getLogger(__name__)
SWITCH = {"off": False, "on": True}


def settings(args: CompareConfig) -> list[dict[str, Any]]:
    """Every combination of the listed values, as TrainConfig overrides; one setting when nothing is a list."""
    # Each list's reader of one value and the values it allows (None: any it reads), in the order they are checked.
    readers = {"compression": (str.strip, COMPRESSIONS),
               "bucket_mb": (lambda part: _size("--bucket-mb", part, "sizes in MiB"), None),
               "model_width": (_width, None), "model": (str.strip, None), "amp": (str.strip, AMP),
               "cycle_time_ms": (lambda part: _size("--cycle-time-ms", part, "times in ms"), None),
               "gradient_as_bucket_view": (_switch, None)}
    values = {}
    for name, (read, allowed) in readers.items():
        flag = text.flag(name)
        values[name] = [read(part) for part in getattr(args, name).split(",")]
        if len(set(values[name])) != len(values[name]):
            raise ConfigError(f"{flag} lists a value twice: {', '.join(map(str, values[name]))}")
        if allowed and (wrong := [v for v in values[name] if v not in allowed]):
            raise ConfigError(f"{flag} takes values from {', '.join(allowed)}, got {wrong[0]!r}")
    return [dict(zip(OPTIONS, combination)) for combination in product(*(values[name] for name in OPTIONS))]


def check_best_of_each(cmp: CompareConfig, grid: list[dict[str, Any]]) -> None:
    """--best-of-each needs a grid of a tuning option (a model list alone has no best) and both backends."""
    if not cmp.best_of_each:
        return
    tuned = [name for name in OPTIONS if name not in ("model", "model_width") and len({s[name] for s in grid}) > 1]
    if not tuned:
        raise ConfigError("--best-of-each runs each backend at its best setting of a tuning grid: give a list in "
                          "--bucket-mb, --compression, --amp, --cycle-time-ms or --gradient-as-bucket-view, or drop it")
    if set(cmp.backend_names) != set(BACKENDS):
        raise ConfigError("--best-of-each compares the two backends, each at its best: pass --backends native,horovod "
                          "or drop it")


def with_model_defaults(args: argparse.Namespace, setting: dict[str, Any]) -> dict[str, Any]:
    """`setting` with the batch and data sizes its model takes when the flags leave them to it (0), so that a grid
    of models gives each model its own."""
    cfg = flags.from_args(args, TrainConfig, workers=1, output_dir=".", **setting)
    return {**setting, **{name: getattr(cfg, name) for name in MODEL_DEFAULTS}}


MODEL_DEFAULTS = ("batch_size", "synthetic_train_size", "synthetic_test_size")


def _switch(text: str) -> bool:
    if text.strip() not in SWITCH:
        raise ConfigError(f"--gradient-as-bucket-view takes off, on or off,on; got {text.strip()!r}")
    return SWITCH[text.strip()]


def _width(text: str) -> int:
    if not text.strip().isdigit() or int(text) <= 0:
        raise ConfigError(f"--model-width takes comma-separated positive integers, got {text.strip()!r}")
    return int(text)


def _size(flag: str, text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{flag} takes comma-separated {what}, got {text.strip()!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"{flag} {what.split()[0]} must be finite and >= 0, got {text.strip()!r}")
    return value


def label(setting: dict[str, Any], varied: list[str]) -> str:
    """The setting's folder name, from the options the grid varies: `compression-fp16_bucket-mb-0.01`."""
    named = "_".join(f"{name.replace('_', '-')}-{_word(setting[name])}" for name in varied)
    return named or f"model-{_word(setting['model'])}"  # a grid of one setting


def _word(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else text.option(value).replace(":", "-").replace("/", "-")


def labels(base: TrainConfig, grid: list[dict[str, Any]]) -> list[str]:
    """Each setting's folder in the grid, named after the options the grid varies."""
    settings = [{name: getattr(replace(base, **setting), name) for name in OPTIONS} for setting in grid]
    varied = [name for name in OPTIONS if len({setting[name] for setting in settings}) > 1]
    return [label(setting, varied) for setting in settings]


def run(base: TrainConfig, grid: list[dict[str, Any]], cmp: CompareConfig, root: Path, run_id: str = "",
        resume: bool = False, deadline: float | None = None, **kwargs: Any) -> Path:
    """One comparison per setting into root/<grid-id>/<setting>/ (grid id: `run_id`, else a timestamp), then
    grid.json and the tuning report there. A setting that leaves an option out keeps `base`'s value; `resume`: go on
    in that folder, keeping its finished settings and resuming a stopped one; `deadline` (time.monotonic()): no
    setting starts once the settings run so far, at their mean pace, say it would end past it (the first always
    starts), and grid.json names those left out; `kwargs`: orchestrator.compare's."""
    configs = [replace(base, **setting) for setting in grid]
    grid = [{name: getattr(cfg, name) for name in OPTIONS} for cfg in configs]
    varied = [name for name in OPTIONS if len({setting[name] for setting in grid}) > 1]
    grid_dir = root / run_id if run_id else run_folder.new_folder(root)
    grid_dir.mkdir(parents=True, exist_ok=resume or not run_id)
    folder_lock.hold(grid_dir, "--resume" if resume else "--output-dir")
    folders, began, ran, cut = [], time.monotonic(), 0, []
    log.info("%d setting(s), one whole comparison each; the time they take is known after the first", len(grid))
    for i, (setting, cfg) in enumerate(zip(grid, configs), 1):
        folder = label(setting, varied)
        if deadline is not None and ran and time.monotonic() + (time.monotonic() - began) / ran > deadline:
            cut = [label(s, varied) for s in grid[i - 1:]]
            log.info("--budget-min is spent: %d setting(s) not run (%s); the settings so far took %s each",
                     len(cut), ", ".join(cut), text.duration((time.monotonic() - began) / ran))
            break
        folders.append(folder)
        if resume and (grid_dir / folder / runs.COMPARISON).exists():
            log.info("setting %d/%d: %s finished before the grid stopped; kept", i, len(grid), folder)
            continue
        pace = f" · about {text.duration((time.monotonic() - began) / ran * (len(grid) - i + 1))} left for this " \
               f"and the {len(grid) - i} after it" if ran else ""  # measured, not guessed: the settings run so far
        log.info("setting %d/%d: %s%s", i, len(grid), folder, pace)
        # A link sweep's later rates reuse the same setting's references from its first rate's grid.
        reuse = {"reuse_references": kwargs["reuse_references"] / folder} if kwargs.get("reuse_references") else {}
        orchestrator.compare(cfg, cmp, grid_dir, run_id=folder, resume=resume and (grid_dir / folder).is_dir(),
                             **{**kwargs, **reuse})
        ran += 1
    record = {"schema_version": tuning.SCHEMA_VERSION, "grid_id": grid_dir.name, "varied": varied,
              "settings": [{"folder": f, **s} for f, s in zip(folders, grid)], "workers": list(cmp.worker_counts),
              "repeats": cmp.repeats, **({"budget_cut": cut} if cut else {})}
    space.write_json(grid_dir / tuning.GRID, record)
    if cmp.best_of_each and set(varied) - {"model", "model_width"} and set(cmp.backend_names) == set(BACKENDS):
        record["best"] = best_against_best(record, configs, cmp, grid_dir, kwargs)
        space.write_json(grid_dir / tuning.GRID, record)
    tuning.render(grid_dir)
    return grid_dir


def best_against_best(record: dict[str, Any], configs: list[TrainConfig], cmp: CompareConfig, grid_dir: Path,
                      kwargs: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Per model whose two backends were best at different settings: one more comparison, each backend at its own
    best, interleaved and paired as any (a fair fight, rather than both at the same setting); {model: its folder}."""
    _, comparisons = tuning.load(grid_dir)
    out = {}
    for model, found in tuning.bests(record, comparisons, max(cmp.worker_counts)).items():
        if found["native"]["folder"] == found["horovod"]["folder"]:
            continue
        chosen = {b: next(s for s in record["settings"] if s["folder"] == found[b]["folder"]) for b in found}
        base = configs[record["settings"].index(chosen["native"])]
        folder = f"best-{_word(model)}"
        log.info("%s: native at its best (%s) against Horovod at its best (%s)", model, found["native"]["folder"],
                 found["horovod"]["folder"])
        if not (grid_dir / folder / runs.COMPARISON).exists():  # a resumed grid keeps a finished one
            orchestrator.compare(base, cmp, grid_dir, run_id=folder, resume=(grid_dir / folder).is_dir(),
                                 per_backend={b: {k: v for k, v in s.items() if k in OPTIONS}
                                              for b, s in chosen.items()}, **{**kwargs, "reuse_references": None})
        out[model] = {"folder": folder, "native": found["native"]["folder"], "horovod": found["horovod"]["folder"]}
    return out
