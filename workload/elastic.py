"""Inside a rank of an elastic run: the project's ConvNet, data and SGD, under each framework's own elastic loop.

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
previous one, on its poll every 2 s: saved more often, it waits (README: Nodes that come and go).

Rank 0 appends one line per step to <cfg.output_dir>/timeline.jsonl: that file is the run's whole record.
"""

import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contract.config import TrainConfig
from workload import data
from workload.data import Splits
from workload.run import build_model
from workload.trainer import build_optimizer

CHECK_EVERY = 10
"""Steps between Horovod's checks for a host that came back (check_host_updates: it grows without a rollback)."""


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
        yield offset + take, take, order[offset + rank:offset + take:world]


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, splits: Splits, mine: Tensor) -> None:
    images, labels = splits.train.tensors
    loss = F.cross_entropy(model(images[mine]), labels[mine])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def accuracy(module: nn.Module, splits: Splits) -> float:
    """Test accuracy over the whole test set, on one rank: no collective, whatever the world is by then."""
    module.eval()
    images, labels = splits.test.tensors
    with torch.no_grad():
        correct = sum(int((module(images[i:i + 1000]).argmax(1) == labels[i:i + 1000]).sum())
                      for i in range(0, len(labels), 1000))
    module.train()
    return correct / len(labels)


def _state(module: nn.Module, optimizer: torch.optim.Optimizer, epoch: int) -> dict:
    return {"model": module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}


def _resume(module: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> int:
    module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["epoch"]


def _train(cfg: TrainConfig, model: nn.Module, module: nn.Module, optimizer: torch.optim.Optimizer, splits: Splits,
           rank: int, world: int, start: int, save: Callable[[int], None]) -> None:
    """Ray Train's and torchrun's loop: every epoch from `start` on; `save(next epoch)` at each epoch's end."""
    if rank == 0:
        note(cfg, "start", world=world, epoch=start, offset=0)
    for epoch in range(start, cfg.epochs):
        for done, take, mine in steps(cfg, epoch, world, rank, len(splits.train)):
            train_step(model, optimizer, splits, mine)
            if rank == 0:
                note(cfg, "step", world=world, epoch=epoch, offset=done, n=take)
        save(epoch + 1)
    if rank == 0:
        note(cfg, "done", accuracy=accuracy(module, splits))


def ray_train_loop(values: dict) -> None:
    """Native DDP under Ray Train V2: a checkpoint through train.report; a resize restarts the group from it."""
    from ray import train
    from ray.train import Checkpoint
    cfg = TrainConfig.from_dict(values)
    context = train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    module, splits = setup(cfg)
    model = train.torch.prepare_model(module)  # DDP: Ray wraps it when world > 1
    optimizer = build_optimizer(model, cfg, 1)
    start = 0
    if checkpoint := train.get_checkpoint():
        with checkpoint.as_directory() as folder:
            start = _resume(module, optimizer, torch.load(Path(folder) / "state.pt"))

    def save(epoch: int) -> None:  # DDP: every rank reports, rank 0's report carries the checkpoint
        with tempfile.TemporaryDirectory() as folder:
            if rank == 0:
                torch.save(_state(module, optimizer, epoch), Path(folder) / "state.pt")
                train.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(folder))
            else:
                train.report({"epoch": epoch})

    _train(cfg, model, module, optimizer, splits, rank, world, start, save)


def horovod_fn(values: dict) -> int:
    """Horovod elastic: hvd.elastic.run, a TorchState committed in memory, ElasticSampler resharding on a reset.
    A lost peer rolls back to the last commit; a host that came back joins at the next check, from the state now."""
    import horovod.torch as hvd
    from horovod.torch.elastic import ElasticSampler
    hvd.init()
    cfg = TrainConfig.from_dict(values)
    module, splits = setup(cfg)
    # Horovod: its optimizer averages the gradients; the broadcast of the state is TorchState's on every reset.
    optimizer = hvd.DistributedOptimizer(build_optimizer(module, cfg, 1), named_parameters=module.named_parameters())
    sampler = ElasticSampler(splits.train, shuffle=True, seed=cfg.seed)  # Horovod: reshards what is left on a reset
    state = hvd.elastic.TorchState(model=module, optimizer=optimizer, train_sampler=sampler, epoch=0)  # Horovod
    loader = torch.utils.data.DataLoader(splits.train, batch_size=cfg.batch_size, sampler=sampler)

    @hvd.elastic.run  # Horovod: a lost peer restores the last commit, a returning host interrupts at a check
    def train(state) -> None:
        rank, world = hvd.rank(), hvd.size()
        if rank == 0:
            note(cfg, "start", world=world, epoch=state.epoch, offset=state.train_sampler.processed_num)
        while state.epoch < cfg.epochs:
            for i, (images, labels) in enumerate(loader, 1):
                loss = F.cross_entropy(module(images), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                state.train_sampler.record_batch(i, cfg.batch_size)
                if rank == 0:
                    note(cfg, "step", world=world, epoch=state.epoch, n=len(labels) * world,
                         offset=min(state.train_sampler.processed_num, len(splits.train)))
                if i % CHECK_EVERY == 0:
                    state.check_host_updates()  # Horovod: a host came back: grow now, without a rollback
            state.epoch += 1
            state.train_sampler.set_epoch(state.epoch)
            state.commit()  # Horovod: in memory, on every rank
        if rank == 0:
            note(cfg, "done", accuracy=accuracy(module, splits))

    train(state)
    return hvd.rank()


def torchrun_main() -> None:
    """Native DDP under torchrun --nnodes MIN:MAX: a resize restarts every rank, which resume from a checkpoint file
    on storage every node sees."""
    import torch.distributed as dist
    cfg = TrainConfig.from_dict(json.loads(sys.argv[1]))
    dist.init_process_group("gloo")  # DDP: torchrun's rendezvous gives the world
    rank, world = dist.get_rank(), dist.get_world_size()
    module, splits = setup(cfg)
    model = nn.parallel.DistributedDataParallel(module)  # DDP
    optimizer = build_optimizer(model, cfg, 1)
    path = Path(cfg.output_dir) / "checkpoint.pt"
    start = _resume(module, optimizer, torch.load(path)) if path.exists() else 0

    def save(epoch: int) -> None:
        if rank == 0:
            torch.save(_state(module, optimizer, epoch), path.with_suffix(".tmp"))
            path.with_suffix(".tmp").replace(path)  # a node lost mid-write leaves the last whole one

    _train(cfg, model, module, optimizer, splits, rank, world, start, save)
    dist.destroy_process_group()


if __name__ == "__main__":
    torchrun_main()
