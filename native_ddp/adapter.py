"""Native DDP: the shared workload wrapped in DistributedDataParallel. Only what PyTorch's DDP forces lives here; the
worker entry points (native_ddp/worker.py) run it under Ray Train and torchrun."""

import contextlib
import logging
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from contract import options
from contract.config import TrainConfig
from contract.results import History
from workload import checkpoint, compression, data, tools
from workload.distributed import DistContext, device_sync, timed_alone
from workload.run import build_model, train_and_report
from workload.schedule import ScheduleRecorder
from workload.tracing import Tracer
from workload.trainer import GradientSync, NoAveraging, Trainer, amp_scaler, build_optimizer, shard_loader
from workload.watchdog import Watchdog

log = logging.getLogger(__name__)
OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}
GLOO_LOST_PEER = ("gloo/transport", "Application timeout caused pair closure")
"""What gloo's errors say when a peer went away or stopped answering until the group's timeout."""


class DDPGradientSync(GradientSync):
    """DDP averages gradients inside backward(), bucket by bucket, overlapping with the rest of backward.

    A comm hook (the stock one for --compression, only timed) notes when the last bucket was handed to the
    allreduce; the time backward() still took after that is the communication that was not hidden behind compute. On
    a GPU the note is a CUDA event on the stream that computed the bucket, so the wait begins where the last gradient
    was computed on the device, as Horovod's does (docs/measuring.md, "Where a wait begins"), not at the host's launch.
    """

    def __init__(self, model: DDP, optimizer: torch.optim.Optimizer, compression_name: str = "none",
                 ctx: DistContext | None = None, schedule: ScheduleRecorder | None = None) -> None:
        self.model, self.optimizer, self.ctx, self.schedule = model, optimizer, ctx, schedule
        self.hook = compression.ddp_hook(compression_name)
        self.wire = compression.DTYPES.get(compression_name)
        self.last_bucket_at = 0.0
        self.last_bucket_ready: torch.cuda.Event | None = None
        self.buckets: dict[int, int] = {}  # elements per bucket, as DDP cut them (it may re-cut after step 1)
        model.register_comm_hook(self, _timed_hook)  # DDP: the stock hook for the compression, same maths

    def no_sync(self) -> contextlib.AbstractContextManager:
        return self.model.no_sync()  # DDP: accumulate locally, allreduce at the next backward outside no_sync

    def wait(self, backward_end: float) -> float:
        if self.last_bucket_ready is not None:  # a GPU: backward_end came after synchronising the device
            done = torch.cuda.Event(enable_timing=True)
            done.record()
            done.synchronize()
            return max(0.0, self.last_bucket_ready.elapsed_time(done) / 1000)
        return max(0.0, backward_end - self.last_bucket_at)

    def alone(self) -> float:
        """DDP's buckets allreduced as its reducer launches them, all at once, then waited for."""
        dtype = self.wire or torch.float32
        tensors = [torch.zeros(n, dtype=dtype, device=self.ctx.device) for _, n in sorted(self.buckets.items())]

        def average_once() -> None:
            for work in [dist.all_reduce(t, async_op=True) for t in tensors]:
                work.wait()

        return timed_alone(dist.barrier, average_once, self.ctx.average, device_sync(self.ctx.device))


def _timed_hook(state: DDPGradientSync, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    state.last_bucket_at = time.perf_counter()
    if bucket.buffer().is_cuda:  # the hook runs on the host ahead of the device: mark the point on the stream
        state.last_bucket_ready = torch.cuda.Event(enable_timing=True)
        state.last_bucket_ready.record()
    state.buckets[bucket.index()] = bucket.buffer().numel()
    entry = state.schedule.launched(bucket) if state.schedule else None
    if entry is None:
        return state.hook(None, bucket)

    def finished(done: torch.futures.Future) -> torch.Tensor:
        state.schedule.finished(entry)  # DDP: the allreduce's own future, completed
        return done.value()

    return state.hook(None, bucket).then(finished)


def torch_all_reduce(device: torch.device):
    def all_reduce(tensor: torch.Tensor, op: str) -> torch.Tensor:
        # NCCL reduces device tensors only; gloo is happy with either.
        out = tensor.detach().to(device, copy=True)
        dist.all_reduce(out, op=OPS[op])  # DDP: metrics go over the same process group
        return out.to(tensor.device)

    return all_reduce


def lost_peer(error: BaseException) -> bool:
    """Whether a collective failed because a peer went away: gloo raises a plain RuntimeError from its transport
    ("Connection closed by peer", "Connection reset by peer", "Timed out waiting"), or without the transport's path
    from the other operations of a pair that its timeout closed; NCCL and the store raise a DistError."""
    return isinstance(error, dist.DistError) or (isinstance(error, RuntimeError) and any(
        mark in str(error) for mark in GLOO_LOST_PEER))


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
    schedule = ScheduleRecorder(model, ctx.device) if ctx.is_main and not cfg.no_averaging else None  # rank 0's
    if cfg.no_averaging:  # the ceiling: the same rank and step, each on its own gradients
        wrapped, sync = model, NoAveraging(optimizer)
    else:
        # DDP: wrapping broadcasts rank 0's parameters and buffers, then averages gradients during backward.
        wrapped = DDP(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
                      bucket_cap_mb=cfg.bucket_mb or None,  # DDP: None is its own default (25 MiB)
                      gradient_as_bucket_view=cfg.gradient_as_bucket_view, static_graph=cfg.static_graph)
        sync = DDPGradientSync(wrapped, optimizer, cfg.compression, ctx, schedule)
    tracer = Tracer(ctx.rank, cfg.output_dir, ctx.device) if cfg.trace else None
    trainer = Trainer(ctx=ctx, cfg=cfg, model=wrapped, module=model, optimizer=optimizer, sync=sync, splits=splits,
                      loaders=[shard_loader(splits, cfg, ctx.rank, ctx.world_size)], scaler=amp_scaler(cfg),
                      tools=tools.for_rank(ctx.rank, tracer, watchdog), schedule=schedule)
    return train_and_report(
        trainer, backend="native", launcher=launcher, history=history, restarts=restarts,
        on_epoch_end=lambda epoch, history: save_checkpoint(epoch, history, model, optimizer),
        # DDP: the process group's library; the ceiling averages nothing.
        averaged_by=None if cfg.no_averaging else "NCCL" if dist.get_backend() == "nccl" else "Gloo",
    )
