"""Build the pieces every backend shares, run the loop, write the result: adapters call these, in this order."""

import time
from dataclasses import replace
from pathlib import Path
from collections.abc import Callable
from typing import Any

import torch

from workload import data, results
from workload.config import DATASETS, TrainConfig
from workload.distributed import DistContext
from workload.model import ConvNet
from workload.trainer import History, Trainer


def resolve_dataset(ctx: DistContext, cfg: TrainConfig) -> TrainConfig:
    """Rank 0 picks the dataset (downloading or generating files) first; the others then take its choice.

    For launchers whose ranks start on their own (torchrun, horovodrun); Ray launchers resolve in the driver.
    """
    choice = torch.zeros(1)
    if ctx.is_main:
        cfg = data.resolve(cfg)
        choice[0] = DATASETS.index(cfg.dataset)
    # Also a barrier: no rank looks for files before rank 0 has put them there.
    choice = ctx.all_reduce(choice, "sum")
    if not ctx.is_main:
        cfg = data.resolve(replace(cfg, dataset=DATASETS[int(choice[0])]))
    return cfg


def build_model(cfg: TrainConfig, device: torch.device) -> ConvNet:
    # The same seed on every rank gives the same initial weights before any broadcast.
    torch.manual_seed(cfg.seed)
    return ConvNet().to(device)


def train_and_report(
    trainer: Trainer,
    *,
    backend: str,
    launcher: str,
    history: History | None = None,
    on_epoch_end: Callable[[int, History], None] = lambda epoch, history: None,
) -> dict[str, Any] | None:
    """Train the remaining epochs; rank 0 writes results.json and returns it, the other ranks return None."""
    history = history or History()
    resumed_from = history.last_epoch
    if trainer.ctx.is_main:
        # A results.json in the output folder must describe a finished run: never leave an older one behind.
        (Path(trainer.cfg.output_dir) / results.FILENAME).unlink(missing_ok=True)
    start = time.perf_counter()
    history = trainer.fit(history, on_epoch_end)
    if not history.epochs:
        raise ValueError("nothing to train: the run had no epochs")
    extra = trainer.consistency()
    wall_time = time.perf_counter() - start
    if not trainer.ctx.is_main:
        return None
    doc = results.build(
        backend=backend, launcher=launcher, workers=trainer.ctx.world_size * len(trainer.loaders), cfg=trainer.cfg,
        history=history,
        wall_time_s=wall_time, extra={"resumed_from_epoch": resumed_from, **extra},
    )
    results.write(trainer.cfg.output_dir, doc)
    return doc
