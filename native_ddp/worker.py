"""Native DDP worker: the shared workload wrapped in DistributedDataParallel.

Under Ray Train (`train_func`, launched by `ray_jobs.train --backend native`), TorchTrainer has already
created the process group (gloo on CPU, NCCL on GPU) and picked the device. Under torchrun
(`run_torchrun`, from `torchrun --nproc-per-node N -m native_ddp.train`), this module creates the group from
torchrun's environment.
"""

import contextlib
import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ray_jobs import worker_output
from workload import checkpoint, cli, compression, data, faults, options, preflight, summary
from workload.config import TrainConfig
from workload.distributed import DistContext, leave, peer_lost
from workload.run import build_model, resolve_dataset, resume_state, train_and_report
from workload.tracing import Tracer
from workload.trainer import History, Trainer, amp_scaler, build_optimizer, shard_loader
from workload.watchdog import Watchdog

log = logging.getLogger(__name__)
OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}


class DDPGradientSync:
    """DDP averages gradients inside backward(), bucket by bucket, overlapping with the rest of backward.

    A comm hook (the stock one for --compression, only timed) notes when the last bucket was handed to the
    allreduce; the time backward() still took after that is the communication that was not hidden behind compute.
    On GPU the note is the launch time on the host, so it also counts the tail of backward's kernels.
    """

    def __init__(self, model: DDP, optimizer: torch.optim.Optimizer, compression_name: str = "none") -> None:
        self.model, self.optimizer = model, optimizer
        self.hook = compression.ddp_hook(compression_name)
        self.last_bucket_at = 0.0
        model.register_comm_hook(self, _timed_hook)  # DDP: the stock hook for the compression, same maths

    def no_sync(self) -> contextlib.AbstractContextManager:
        return self.model.no_sync()  # DDP: accumulate locally, allreduce at the next backward outside no_sync

    def group_done(self) -> None:
        pass

    def wait(self, backward_end: float) -> float:
        return max(0.0, backward_end - self.last_bucket_at)

    def step(self, apply: Callable[[torch.optim.Optimizer], None]) -> None:
        apply(self.optimizer)


def _timed_hook(state: DDPGradientSync, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    state.last_bucket_at = time.perf_counter()
    return state.hook(None, bucket)


def torch_all_reduce(device: torch.device):
    def all_reduce(tensor: torch.Tensor, op: str) -> torch.Tensor:
        # NCCL reduces device tensors only; gloo is happy with either.
        out = tensor.detach().to(device, copy=True)
        dist.all_reduce(out, op=OPS[op])  # DDP: metrics go over the same process group
        return out.to(tensor.device)

    return all_reduce


def train(ctx: DistContext, cfg: TrainConfig, launcher: str, *, state: dict[str, Any] | None,
          save_checkpoint, watchdog: Watchdog, restarts: int = 0) -> dict[str, Any] | None:
    """Train on this rank; rank 0 returns the result written to results.json.

    `state` is the checkpoint to resume from; `save_checkpoint(epoch, history, module, optimizer)` runs on every
    rank after every epoch (each launcher stores checkpoints its own way). `watchdog` has run since before the
    process group existed; `restarts` is how many times the launcher restarted this run's workers.
    """
    options.check(cfg, "native")
    if state:  # the launchers have checked, before the dataset was resolved; a safety net now that it is
        checkpoint.check_resume(state, cfg, "the run's checkpoint", "native", launcher)
    torch.set_num_threads(cfg.threads_per_worker)
    splits = data.load(cfg)
    model = build_model(cfg, ctx.device)
    optimizer = build_optimizer(model, cfg, ctx.world_size)
    # Every rank restores the optimizer state itself: DDP broadcasts parameters and buffers, not momentum.
    history = checkpoint.restore(state, model, optimizer) if state else History()
    if history.last_epoch and ctx.is_main:
        log.info("resuming after epoch %d", history.last_epoch)
    # DDP: wrapping broadcasts rank 0's parameters and buffers, then averages gradients during backward.
    ddp = DDP(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
              bucket_cap_mb=cfg.bucket_mb or None,  # DDP: None is its own default (25 MiB)
              gradient_as_bucket_view=cfg.gradient_as_bucket_view, static_graph=cfg.static_graph)
    tracer = Tracer(ctx.rank, cfg.warmup_steps, cfg.output_dir, ctx.device) if cfg.trace else None
    trainer = Trainer(ctx=ctx, cfg=cfg, model=ddp, module=model, optimizer=optimizer,
                      sync=DDPGradientSync(ddp, optimizer, cfg.compression), splits=splits,
                      loaders=[shard_loader(splits, cfg, ctx.rank, ctx.world_size)], watchdog=watchdog,
                      tracer=tracer, scaler=amp_scaler(cfg))
    return train_and_report(
        trainer, backend="native", launcher=launcher, history=history, restarts=restarts,
        on_epoch_end=lambda epoch, history: save_checkpoint(epoch, history, model, optimizer),
    )


def train_func(config: dict[str, Any]) -> None:
    """Ray Train's worker function: TorchTrainer has set up the process group and the device."""
    import ray.train
    import ray.train.torch

    context = ray.train.get_context()
    cli.setup_logging(context.get_world_rank())
    device = ray.train.torch.get_device()
    ctx = DistContext(rank=context.get_world_rank(), world_size=context.get_world_size(),
                      local_rank=context.get_local_rank(), device=device, all_reduce=torch_all_reduce(device))
    cfg = TrainConfig.from_dict(config["config"])
    # The newer of Ray's own checkpoint (a retry after --max-failures, or a rerun with the same --name) and the
    # run's checkpoint folder (see ray_jobs.cluster.run_checkpoints): Ray may not have registered the last one.
    states = [resume_state(cfg, "native", "ray")]
    if resume_from := ray.train.get_checkpoint():
        with resume_from.as_directory() as directory:
            states.append(checkpoint.load(directory))
    state = max((s for s in states if s), key=lambda s: s["epoch"], default=None)
    with Watchdog(cfg.stall_timeout_s, phase="starting") as watchdog:
        try:
            train(ctx, cfg, "ray", state=state, save_checkpoint=_ray_report(ctx, cfg, config["ray_checkpoints"]),
                  watchdog=watchdog, restarts=_count_start(ctx, config["starts_file"]))
        except RuntimeError as error:
            if not _lost_peer(error):
                raise
            leave(peer_lost(error, ctx.rank, "ray"))
        finally:
            worker_output.end()


def _lost_peer(error: RuntimeError) -> bool:
    """Whether a collective failed because a peer went away: gloo raises a plain RuntimeError from its transport
    ("Connection closed by peer", "Connection reset by peer"), NCCL and the store a DistError."""
    return isinstance(error, dist.DistError) or "gloo/transport" in str(error)


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


def run_torchrun(cfg: TrainConfig) -> int:
    """One torchrun rank, `cfg` already checked by native_ddp.train: rank and world size come from torchrun's
    environment, through torch.distributed."""
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if cfg.use_gpu else torch.device("cpu")
    if cfg.use_gpu:
        torch.cuda.set_device(device)
    # From before the group exists: a peer that dies while the group forms must not leave this rank waiting
    # for gloo's 30-minute default.
    with Watchdog(cfg.stall_timeout_s) as watchdog:
        faults.point("init", int(os.environ["RANK"]))
        dist.init_process_group("nccl" if cfg.use_gpu else "gloo")  # DDP: env:// from torchrun
        watchdog.kick("starting")
        try:
            ctx = DistContext(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank,
                              device=device, all_reduce=torch_all_reduce(device))
            cli.setup_logging(ctx.rank)
            cfg = replace(cfg, workers=ctx.world_size)
            preflight.check_config(cfg)  # every rank checks alike, so a refusal ends them all before any collective
            # Before any data is written; every rank reads the same file and so refuses alike, none left waiting.
            state = resume_state(cfg, "native", "torchrun")
            cfg = resolve_dataset(ctx, cfg)
            doc = train(ctx, cfg, "torchrun", state=state, watchdog=watchdog,
                        restarts=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
                        save_checkpoint=checkpoint.directory_saver(ctx.rank, cfg.checkpoint_dir, cfg, "native",
                                                                   "torchrun"))
            if doc:
                summary.announce(doc)
        except RuntimeError as error:
            if not _lost_peer(error):
                raise
            raise peer_lost(error, int(os.environ["RANK"]), "torchrun", cfg.checkpoint_dir) from None
        finally:
            dist.destroy_process_group()
    return 0

