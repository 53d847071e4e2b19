"""Inside a rank of an elastic run: the project's model, data and training step (Trainer.train_step) under each
framework's own elastic loop (native_ddp/elastic.py, horovod_ddp/elastic.py); here, what they share.

The world size can change at any step. The learning rate stays `cfg.lr` (no rescaling) and every worker keeps its
batch of `cfg.batch_size`, so the global batch is batch x world. Ray Train and torchrun restart every rank on a change
and resume at the start of the epoch after the last saved one; the epoch's order is cut into global steps of batch x
world, and rank r takes every world-th sample of a step from the r-th: DistributedSampler's shard at that world size
(the same order, seed + epoch, and the same split). Horovod's ranks live on: on a loss the survivors roll back to the
last commit (the epoch's start) and its ElasticSampler reshards the epoch from there over the new world (Python's
shuffle, seed + epoch); a host that comes back joins at the next check, and the rest of the epoch is resharded from
where the survivors are.

The state is saved at each epoch's end, as the tutorials do, under every framework: a Ray Train checkpoint, a TorchState
commit (in memory), a torchrun checkpoint file. Ray Train's report blocks until the controller has collected the
previous one, on its poll every 2 s: saved more often, it waits (docs/elastic.md).

Rank 0 appends one line per step to <cfg.output_dir>/timeline.jsonl: that file is the run's whole record.
"""

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import Tensor, nn

from contract.config import TrainConfig
from workload import data
from workload.data import Splits
from workload.distributed import single_process
from workload.run import build_model
from workload.trainer import GradientSync, Trainer


def note(cfg: TrainConfig, event: str, **fields: object) -> None:
    with open(Path(cfg.output_dir) / "timeline.jsonl", "a") as out:
        out.write(json.dumps({"ev": event, "t": time.time(), **fields}) + "\n")


def setup(cfg: TrainConfig) -> tuple[nn.Module, Splits]:
    torch.set_num_threads(cfg.threads_per_worker)
    return build_model(cfg, torch.device("cpu")), data.load(cfg)


def steps(cfg: TrainConfig, epoch: int, world: int, rank: int, samples: int) -> Iterator[tuple[int, int, Tensor]]:
    """The epoch in global steps: (the epoch's samples done after the step, the step's samples, my indices)."""
    generator = torch.Generator().manual_seed(cfg.seed + epoch)  # DistributedSampler's shuffle
    order = torch.randperm(samples, generator=generator)
    for offset in range(0, samples, world * cfg.batch_size):
        take = min(world * cfg.batch_size, samples - offset)
        if take < world:  # a tail too short to give every rank a sample (an empty batch's loss is NaN): dropped
            return
        yield offset + take, take, order[offset + rank:offset + take:world]


def trainer(cfg: TrainConfig, model: nn.Module, module: nn.Module, optimizer: torch.optim.Optimizer,
            sync: GradientSync, splits: Splits) -> Trainer:
    """The one training step's Trainer for an elastic loop: the framework averages the gradients (`sync`); its
    context is this process alone, so that evaluation starts no collective whatever the world is by then."""
    return Trainer(ctx=single_process(), cfg=cfg, model=model, module=module, optimizer=optimizer, sync=sync,
                   splits=splits, loaders=[])


def accuracy(trainer: Trainer) -> float:
    """Test accuracy over the whole test set, on one rank."""
    accuracy = trainer.evaluate()[1]
    trainer.module.train()
    return accuracy


def state(module: nn.Module, optimizer: torch.optim.Optimizer, epoch: int) -> dict:
    return {"model": module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}


def resume(module: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> int:
    module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["epoch"]


def train(cfg: TrainConfig, trainer: Trainer, rank: int, world: int, start: int, save: Callable[[int], None]) -> None:
    """Ray Train's and torchrun's outer loop: every epoch from `start` on, Trainer's step each global step, and
    `save(next epoch)` at each epoch's end."""
    images, labels = trainer.splits.train.tensors
    if rank == 0:
        note(cfg, "start", world=world, epoch=start, offset=0)
    for epoch in range(start, cfg.epochs):
        for done, take, mine in steps(cfg, epoch, world, rank, len(labels)):
            trainer.train_step([[(data.inputs(images[mine]), labels[mine])]])
            if rank == 0:
                note(cfg, "step", world=world, epoch=epoch, offset=done, n=take)
        save(epoch + 1)
    if rank == 0:
        note(cfg, "done", accuracy=accuracy(trainer))
