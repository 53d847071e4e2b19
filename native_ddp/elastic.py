"""Native DDP's elastic modes, inside a rank: Ray Train V2 elastic (a checkpoint through train.report; a resize
restarts the group from it) and torchrun --nnodes MIN:MAX (a resize restarts every rank, which resume from a
checkpoint file on storage every node sees). The outer loop and what is shared: workload/elastic.py."""

import json
import sys
import tempfile
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from contract.config import TrainConfig
from native_ddp.adapter import DDPGradientSync
from workload import elastic
from workload.trainer import build_optimizer


def ray_train_loop(values: dict) -> None:
    """Ray Train's worker function: TorchTrainer has formed the group at the world it decided on."""
    from ray import train
    from ray.train import Checkpoint

    cfg = TrainConfig.from_dict(values)
    context = train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    module, splits = elastic.setup(cfg)
    model = DDP(module)  # DDP: broadcasts rank 0's weights, averages the gradients in backward
    optimizer = build_optimizer(model, cfg, 1)
    start = 0
    if checkpoint := train.get_checkpoint():
        with checkpoint.as_directory() as folder:
            start = elastic.resume(module, optimizer, torch.load(Path(folder) / "state.pt"))

    def save(epoch: int) -> None:  # every rank reports, rank 0's report carries the checkpoint
        with tempfile.TemporaryDirectory() as folder:
            if rank == 0:
                torch.save(elastic.state(module, optimizer, epoch), Path(folder) / "state.pt")
                train.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(folder))
            else:
                train.report({"epoch": epoch})

    trainer = elastic.trainer(cfg, model, module, optimizer, DDPGradientSync(model, optimizer), splits)
    elastic.train(cfg, trainer, rank, world, start, save)


def torchrun_main() -> None:
    """One rank of `torchrun --nnodes MIN:MAX -m native_ddp.elastic CONFIG_JSON`."""
    import torch.distributed as dist

    cfg = TrainConfig.from_dict(json.loads(sys.argv[1]))
    dist.init_process_group("gloo")  # DDP: torchrun's rendezvous gives the world
    rank, world = dist.get_rank(), dist.get_world_size()
    module, splits = elastic.setup(cfg)
    model = DDP(module)
    optimizer = build_optimizer(model, cfg, 1)
    path = Path(cfg.output_dir) / "checkpoint.pt"
    start = elastic.resume(module, optimizer, torch.load(path)) if path.exists() else 0

    def save(epoch: int) -> None:
        if rank == 0:
            torch.save(elastic.state(module, optimizer, epoch), path.with_suffix(".tmp"))
            path.with_suffix(".tmp").replace(path)  # a node lost mid-write leaves the last whole one

    elastic.train(cfg, elastic.trainer(cfg, model, module, optimizer, DDPGradientSync(model, optimizer), splits),
                  rank, world, start, save)
    dist.destroy_process_group()


if __name__ == "__main__":
    torchrun_main()
