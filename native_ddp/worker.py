"""Native DDP's worker entry points: Ray Train's worker function, one torchrun rank and one mp.spawn rank. Each runs
the DDP adapter (native_ddp/adapter.py) inside the rank's life (workload/lifecycle.py).

Under Ray Train (`train_func`, launched by `ray_jobs.train --backend native`), TorchTrainer has already
created the process group (gloo on CPU, NCCL on GPU) and picked the device. Under torchrun
(`run_launched`, from `torchrun --nproc-per-node N -m native_ddp.train`) and mp.spawn (`native_ddp.spawn.spawned_rank`, from
`python -m native_ddp.spawn --workers N`), this module creates the group from the environment the launcher set.
"""

import os
import tempfile
from dataclasses import replace
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from contract.config import TrainConfig
from contract.results import History
from native_ddp.adapter import lost_peer, torch_all_reduce, train
from runtime import preflight
from workload import checkpoint, data
from workload.distributed import DistContext
from workload.lifecycle import Framework, leave_without_teardown, run_rank
from workload.run import resolve_dataset, resume_state


def _ray_train_context(cfg: TrainConfig) -> DistContext:
    import ray.train
    import ray.train.torch

    context = ray.train.get_context()
    device = ray.train.torch.get_device()
    if device.type == "cuda":
        torch.cuda.set_device(device)  # DDP: the device Ray Train gave this worker is the current one, as torchrun's
    return DistContext(rank=context.get_world_rank(), world_size=context.get_world_size(),
                       local_rank=context.get_local_rank(), device=device, all_reduce=torch_all_reduce(device))


def _group_from_environment(cfg: TrainConfig) -> DistContext:
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if cfg.use_gpu else torch.device("cpu")
    if cfg.use_gpu:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cfg.use_gpu else "gloo")  # DDP: env://, from torchrun or native_ddp.spawn
    return DistContext(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank, device=device,
                       all_reduce=torch_all_reduce(device))


# DDP: Ray Train forms and ends the group around train_func; under torchrun and mp.spawn the rank does both.
RAY_TRAIN = Framework(init=_ray_train_context, lost_peer=lost_peer, shutdown=lambda: None)
LAUNCHED = Framework(init=_group_from_environment, lost_peer=lost_peer, shutdown=dist.destroy_process_group)


def train_func(config: dict[str, Any]) -> None:
    """Ray Train's worker function: TorchTrainer has set up the process group and the device."""
    import ray.train

    cfg = TrainConfig.from_dict(config["config"])

    def body(ctx: DistContext, watchdog) -> None:
        # The newer of Ray's own checkpoint (a retry after --max-failures, or a rerun with the same --name) and the
        # run's checkpoint folder (see launchers.ray_failures.run_checkpoints): Ray may not have registered the last.
        states = [resume_state(cfg, "native", "ray")]
        if resume_from := ray.train.get_checkpoint():
            with resume_from.as_directory() as directory:
                states.append(checkpoint.load(directory))
        state = max((s for s in states if s), key=lambda s: s["epoch"], default=None)
        train(ctx, cfg, "ray", state=state, save_checkpoint=_ray_report(ctx, cfg, config["ray_checkpoints"]),
              watchdog=watchdog, restarts=_count_start(ctx, config["starts_file"]))

    run_rank(RAY_TRAIN, "ray", cfg, body)


def _count_start(ctx: DistContext, starts_file: str) -> int:
    """This start's number, from 0: Ray Train restarts the whole worker group after a failure (--max-failures)
    and does not tell the workers, so rank 0 counts starts in a file the driver made for this run."""
    if not ctx.is_main:
        return 0
    with open(starts_file, "a+") as f:
        f.seek(0)
        earlier = len(f.read().splitlines())
        f.write("start\n")
    return earlier


def _ray_report(ctx: DistContext, cfg: TrainConfig, ray_checkpoints: bool):
    import ray.train

    to_directory = checkpoint.directory_saver(ctx.rank, cfg.checkpoint_dir, cfg, "native", "ray")

    def report(epoch: int, history: History, module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        metrics = {k: v for k, v in history.epochs[-1].items() if isinstance(v, (int, float))}
        to_directory(epoch, history, module, optimizer)
        # Every rank reports once per epoch; only rank 0 attaches the checkpoint.
        if ctx.is_main and ray_checkpoints:
            with tempfile.TemporaryDirectory() as directory:
                checkpoint.save(directory, module, optimizer, history, cfg, "native", "ray")
                ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(directory))
        else:
            ray.train.report(metrics)

    return report


def run_launched(cfg: TrainConfig, launcher: str) -> NoReturn:
    """One torchrun or mp.spawn rank, `cfg` already checked by the entry point: rank and world size come from the
    environment the launcher set, through torch.distributed."""

    def body(ctx: DistContext, watchdog) -> dict[str, Any] | None:
        rank_cfg = replace(cfg, workers=ctx.world_size)
        # Every rank checks alike, so a refusal ends them all before any collective.
        preflight.check_config(rank_cfg, horovod=False)
        data.check_known(rank_cfg)
        # Before any data is written; every rank reads the same file and so refuses alike, none left waiting.
        state = resume_state(rank_cfg, "native", launcher)
        if launcher != "mp.spawn":  # native_ddp.spawn resolved it before spawning the ranks
            rank_cfg = resolve_dataset(ctx, rank_cfg)
        return train(ctx, rank_cfg, launcher, state=state, watchdog=watchdog,
                     restarts=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
                     save_checkpoint=checkpoint.directory_saver(ctx.rank, rank_cfg.checkpoint_dir, rank_cfg,
                                                                "native", launcher))

    run_rank(LAUNCHED, launcher, cfg, body)
    leave_without_teardown()
