"""The single-process reference: the tutorials' one-process baseline, optionally simulating N workers.

With `workers=N` each step runs the N per-worker micro-batches that N ranks' DistributedSamplers would hand
out, one after another, and averages their gradients: the computation DDP and Horovod perform, without any
communication. With `workers=1` it is plain single-process training.
"""

import logging
from typing import Any

import torch

from workload import data
from workload.config import TrainConfig
from workload.distributed import single_process
from workload.run import build_model, train_and_report
from workload.trainer import LocalSync, Trainer, build_optimizer, shard_loader

log = logging.getLogger(__name__)


def train(cfg: TrainConfig, launcher: str = "local") -> dict[str, Any]:
    device = torch.device("cuda" if cfg.use_gpu else "cpu")
    ctx = single_process(device)
    splits = data.load(cfg)
    model = build_model(cfg, device)
    optimizer = build_optimizer(model, cfg, cfg.workers)
    loaders = [shard_loader(splits, cfg, rank, cfg.workers) for rank in range(cfg.workers)]
    trainer = Trainer(ctx=ctx, cfg=cfg, model=model, module=model, optimizer=optimizer, sync=LocalSync(optimizer),
                      splits=splits, loaders=loaders)
    return train_and_report(trainer, backend="reference", launcher=launcher)
