"""Single-process baselines: the tutorials' one-process run, and what DDP and Horovod compute, without peers.

`reference` with `workers=N` runs, each step, the N per-worker micro-batches that N ranks' DistributedSamplers
would hand out, one after another, and averages their gradients: the computation DDP and Horovod perform,
including BatchNorm normalising with per-worker batch statistics. With `workers=1` it is plain
single-process training.

`reference-horovod` is `reference` with Horovod's gradient arithmetic instead of DDP's: they differ in the order in
which a compressed gradient is rounded, divided and summed (workload/compression.py), and each backend is compared
with the reference that computes as it does.

`reference-reordered` is `reference` summing the simulated workers' gradients last worker first: with 3 or more
workers a float32 sum depends on its order, so the two references' drift is the parity floor, what summation order
alone changes over the same steps (analysis/parity.py). With 2 workers both orders give the same bits.

`global-batch` runs the same N micro-batches as one forward pass over their concatenation: the same data and
the same averaged loss, but BatchNorm sees the whole global batch, so it is a different computation.

`dataparallel` is `global-batch` through nn.DataParallel over N GPUs (the tutorials' single-process multi-GPU
mode), which splits the batch across GPUs again; it needs at least N GPUs.
"""

import logging
from typing import Any

import torch
from torch import Tensor, nn

from contract.config import ConfigError, TrainConfig
from contract.options import REFERENCE_ROUNDING
from workload import compression, data
from workload.distributed import single_process
from workload.run import build_model, train_and_report
from workload.trainer import GradientSync, Trainer, amp_scaler, build_optimizer, shard_loader

log = logging.getLogger(__name__)
REORDERED = "reference-reordered"
MODES = ("reference", "reference-horovod", "reference-reordered", "global-batch", "dataparallel")


class EmulatedSync(GradientSync):
    """The reference's gradient average: each simulated worker's gradients kept apart, then combined in the order
    and precision of one backend's allreduce (workload/compression.py), so that the reference computes what that
    backend computes."""

    def __init__(self, module: nn.Module, optimizer: torch.optim.Optimizer, compression_name: str,
                 rounding: str, reversed_order: bool = False) -> None:
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.optimizer, self.compression, self.rounding = optimizer, compression_name, rounding
        self.reversed_order = reversed_order
        self.per_worker: list[list[Tensor]] = []

    def group_done(self) -> None:
        self.per_worker.append([p.grad.clone() for p in self.params])
        for p in self.params:
            p.grad.zero_()

    def wait(self, backward_end: float) -> float:
        workers = self.per_worker[::-1] if self.reversed_order else self.per_worker
        for i, p in enumerate(self.params):
            p.grad.copy_(compression.combine([g[i] for g in workers], self.compression, self.rounding))
        self.per_worker.clear()
        return 0.0  # one process: nothing is sent, and alone() is None


def dataparallel_unavailable(workers: int) -> str | None:
    """Why nn.DataParallel cannot run `workers` replicas here, or None when it can."""
    gpus = torch.cuda.device_count()
    if workers < 2:
        return "DataParallel needs at least 2 GPUs; with 1 worker it is the single-process reference"
    if gpus < workers:
        return f"DataParallel needs {workers} GPUs; this machine has {gpus}"
    return None


def train(cfg: TrainConfig, mode: str = "reference", launcher: str = "local") -> dict[str, Any]:
    if mode not in MODES:
        raise ValueError(f"unknown reference mode {mode!r}")
    if mode == "dataparallel" and (reason := dataparallel_unavailable(cfg.workers)):
        raise ConfigError(reason)
    torch.set_num_threads(cfg.threads_per_worker)
    device = torch.device("cuda" if cfg.use_gpu or mode == "dataparallel" else "cpu")
    ctx = single_process(device)
    splits = data.load(cfg)
    model = build_model(cfg, device)
    optimizer = build_optimizer(model, cfg, cfg.workers)
    net = nn.DataParallel(model, device_ids=list(range(cfg.workers))) if mode == "dataparallel" else model
    loaders = [shard_loader(splits, cfg, rank, cfg.workers) for rank in range(cfg.workers)]
    sync = EmulatedSync(model, optimizer, cfg.compression, REFERENCE_ROUNDING.get(mode, "native"),
                        reversed_order=mode == REORDERED)
    trainer = Trainer(ctx=ctx, cfg=cfg, model=net, module=model, optimizer=optimizer, sync=sync, splits=splits,
                      loaders=loaders, fuse=mode not in REFERENCE_ROUNDING, scaler=amp_scaler(cfg))
    return train_and_report(trainer, backend=mode, launcher=launcher)
