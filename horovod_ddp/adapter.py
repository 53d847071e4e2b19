"""Horovod: the shared workload with hvd.DistributedOptimizer. Only what Horovod forces lives here; the worker entry
points (horovod_ddp/worker.py) run it under horovodrun and Horovod's Ray integration.

Bounded failure: a peer that never starts fails the run after horovodrun's --start-timeout (default 30 s;
RayExecutor: 60 s) and the Gloo rendezvous timeout (HOROVOD_GLOO_TIMEOUT_SECONDS, default 30 s); a peer that
stalls mid-run ends it after --stall-timeout-s (default 300 s, see workload/watchdog.py). Horovod's own stall
check still logs its warning after HOROVOD_STALL_CHECK_TIME_SECONDS (set to 30 s here unless given).
"""

import dataclasses
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from contract import options
from contract.config import ConfigError, TrainConfig
from contract.results import History
from horovod_ddp.fused_buffers import FusedBuffers, Timeline
from workload import checkpoint, compression, data, tools
from workload.distributed import DistContext, device_sync, timed_alone
from workload.run import build_model, on_main, resume_state, train_and_report
from workload.schedule import ScheduleRecorder
from workload.tracing import Tracer
from workload.trainer import GradientSync, NoAveraging, Trainer, amp_scaler, build_optimizer, shard_loader
from workload.watchdog import Watchdog

log = logging.getLogger(__name__)

INSTALL_HINT = "run `make install` (it builds Horovod 0.28.1 with PyTorch and Gloo into .venv)"


def import_horovod():
    """horovod.torch, or a ConfigError saying how to get it."""
    try:
        import horovod.torch as hvd
    except ImportError as error:
        raise ConfigError(f"Horovod with PyTorch support is not importable ({error}); {INSTALL_HINT}") from None
    return hvd


class HorovodGradientSync(GradientSync):
    """Horovod starts an allreduce per gradient from backward hooks; synchronize() waits for them all. No no_sync of
    its own: backward_passes_per_step already holds the allreduce back until the last micro-batch."""

    def __init__(self, optimizer, model: torch.nn.Module, compressor, ctx: DistContext) -> None:
        self.optimizer, self.model, self.compressor, self.ctx = optimizer, model, compressor, ctx

    def wait(self, backward_end: float) -> float:
        start = time.perf_counter()  # backward's end: on a GPU, Trainer._now synchronised the device for it
        self.optimizer.synchronize()  # Horovod: a sync point; waits for the averaged gradients
        device_sync(self.ctx.device)()  # on a GPU, until they are on the device, as DDP's wait ends
        return time.perf_counter() - start

    def step(self, apply: Callable[[torch.optim.Optimizer], None]) -> None:
        with self.optimizer.skip_synchronize():  # Horovod: already synchronized in wait()
            apply(self.optimizer)

    def alone(self) -> float:
        """One allreduce per gradient, as DistributedOptimizer's hooks submit them, fused by Horovod's background
        thread as in training, then waited for."""
        hvd = import_horovod()
        grads = [self.compressor.compress(torch.zeros_like(p))[0] for p in self.model.parameters() if p.requires_grad]

        def average_once() -> None:
            handles = [hvd.allreduce_async_(g, name=f"comm-alone.{i}", op=hvd.Average) for i, g in enumerate(grads)]
            for handle in handles:
                hvd.synchronize(handle)

        return timed_alone(hvd.barrier, average_once, self.ctx.average, device_sync(self.ctx.device))


def init(cfg: TrainConfig) -> DistContext:
    """hvd.init() with bounded stalls and the options Horovod reads from its environment; the Horovod DistContext."""
    os.environ.setdefault("HOROVOD_STALL_CHECK_TIME_SECONDS", "30")  # Horovod: warn about stalls sooner than 60 s
    os.environ.update(options.horovod_env(cfg, cfg.output_dir))  # Horovod: read once, at init
    if cfg.autotune:
        Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)  # Horovod opens its autotune log at init
    hvd = import_horovod()
    hvd.init()  # Horovod: rank and size come from horovodrun (or Ray); alone, a single worker
    device = torch.device("cpu")
    if cfg.use_gpu:
        device = torch.device("cuda", hvd.local_rank())  # Horovod: pin one GPU per process
        torch.cuda.set_device(device)
    ops = {"sum": hvd.Sum, "max": hvd.Max}

    def all_reduce(tensor: torch.Tensor, op: str) -> torch.Tensor:
        return hvd.allreduce(tensor.detach(), op=ops[op])  # Horovod: metrics over the same Gloo ring

    return DistContext(rank=hvd.rank(), world_size=hvd.size(), local_rank=hvd.local_rank(), device=device,
                       all_reduce=all_reduce)


def train(ctx: DistContext, cfg: TrainConfig, launcher: str, watchdog: Watchdog,
          restarts: int = 0) -> dict[str, Any] | None:
    """Train on this rank (hvd.init() done, `watchdog` running since before it); rank 0 resumes from and saves to
    cfg.checkpoint_dir. `restarts`: how many times the launcher restarted this run's workers."""
    hvd = import_horovod()
    options.check(cfg, "horovod")
    torch.set_num_threads(cfg.threads_per_worker)
    # Rank 0 alone reads the checkpoint and broadcasts it; a refusal there ends every rank (see run.on_main).
    state = on_main(ctx, lambda: resume_state(cfg, "horovod", launcher))
    splits = data.load(cfg)
    model = build_model(cfg, ctx.device)
    compressor = compression.horovod_compressor(hvd, cfg.compression)
    optimizer = build_optimizer(model, cfg, ctx.world_size)
    if not cfg.no_averaging:  # the ceiling steps each rank on its own gradients
        optimizer = hvd.DistributedOptimizer(  # Horovod: allreduces each gradient as backward produces it
            optimizer,
            named_parameters=model.named_parameters(),
            compression=compressor,
            backward_passes_per_step=cfg.grad_accumulation,
            op=hvd.Average,  # Horovod: average, as DDP does
        )
    # Restored after wrapping: DistributedOptimizer builds a new optimizer from the param groups, so state
    # loaded into the plain SGD before the wrap would be dropped, and the broadcast would then send zeros.
    history = checkpoint.restore(state, model, optimizer) if state else History()
    # Horovod: every rank starts from rank 0's weights (BatchNorm buffers too), optimizer state and epoch.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    history = History(**hvd.broadcast_object(dataclasses.asdict(history), root_rank=0))
    if history.last_epoch and ctx.is_main:
        log.info("resuming after epoch %d from %s", history.last_epoch, cfg.checkpoint_dir)
    # Horovod: its timeline can be on only where HOROVOD_TIMELINE was set before hvd.init (contract/options.py)
    timeline = Timeline(hvd.start_timeline, hvd.stop_timeline) if cfg.trace or cfg.fused_buffers else None
    tracer = Tracer(ctx.rank, cfg.output_dir, ctx.device,
                    timeline=(timeline.start, timeline.stop)) if cfg.trace else None
    sync = NoAveraging(optimizer) if cfg.no_averaging else HorovodGradientSync(optimizer, model, compressor, ctx)
    fused = FusedBuffers(timeline, [n for n, p in model.named_parameters() if p.requires_grad]) if timeline else None
    trainer = Trainer(ctx=ctx, cfg=cfg, model=model, module=model, optimizer=optimizer, sync=sync, splits=splits,
                      loaders=[shard_loader(splits, cfg, ctx.rank, ctx.world_size)], scaler=amp_scaler(cfg),
                      tools=tools.for_rank(ctx.rank, tracer, watchdog),
                      schedule=ScheduleRecorder(model, ctx.device, fused) if ctx.is_main and not cfg.no_averaging
                      else None)
    save = checkpoint.directory_saver(ctx.rank, cfg.checkpoint_dir, cfg, "horovod", launcher)
    # Horovod: GPU tensors go over NCCL where it was built with it, CPU tensors over Gloo.
    averaged_by = None if cfg.no_averaging else "NCCL" if ctx.device.type == "cuda" and hvd.nccl_built() else "Gloo"
    return train_and_report(trainer, backend="horovod", launcher=launcher, history=history, restarts=restarts,
                            on_epoch_end=lambda epoch, history: save(epoch, history, model, optimizer),
                            averaged_by=averaged_by)


def lost_peer(error: BaseException) -> bool:
    """Whether a Horovod collective failed because a peer went away."""
    from horovod.common.exceptions import HorovodInternalError

    return isinstance(error, HorovodInternalError)


def shutdown() -> None:
    import_horovod().shutdown()
