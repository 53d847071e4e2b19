"""The training loop and step every backend runs; adapters only supply the context, wrapping and gradient sync."""

import contextlib
import hashlib
import logging
import math
import resource
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, DistributedSampler

from contract.config import TrainConfig, warmup_for
from contract.errors import DIVERGED, Diverged, diverged
from contract.phases import THREAD_GROUPS
from contract.results import History
from runtime import preflight
from workload import compression, data, host_load, placement, threads
from workload.data import Splits
from workload.distributed import DistContext
from workload.metrics import cpu_by_thread, epoch_timing
from workload.schedule import ScheduleRecorder
from workload.tools import Tool, Tools

log = logging.getLogger(__name__)
OVERLAP_HOW = ("1 - (wait after backward for the averaged gradients, mean over the last epoch's measured steps and "
               "every rank) / (the same averaging alone: this backend's own messages, dtype and fusion, with nothing "
               "else running, median of 5 after training)")


class GradientSync:
    """How a backend averages gradients across ranks; the only part of the step that differs between them. What a
    backend does not override is what the ceiling does (NoAveraging): nothing sent, each rank on its own gradients."""

    optimizer: torch.optim.Optimizer

    def no_sync(self) -> contextlib.AbstractContextManager:
        """The context for a backward pass whose gradients are only accumulated, not yet averaged."""
        return contextlib.nullcontext()

    def group_done(self) -> None:
        """One (simulated) worker's micro-batches are done; only the reference's emulation needs to know."""

    def wait(self, backward_end: float) -> float:
        """Block until averaged gradients are ready; return the seconds spent waiting after local backward."""
        return 0.0

    def alone(self) -> float | None:
        """Seconds one step's gradient averaging takes with nothing beside it, as this backend sends it (the same
        messages, dtype and fusion), every rank together; None where nothing is sent. Called after training."""
        return None

    def step(self, apply: Callable[[torch.optim.Optimizer], None]) -> None:
        """Apply the averaged gradients with `apply(optimizer)` (optimizer.step, or a GradScaler's step)."""
        apply(self.optimizer)


class NoAveraging(GradientSync):
    """The ceiling's sync (--no-averaging): each rank steps on its own gradients, and nothing crosses a link."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer


def amp_scaler(cfg: TrainConfig) -> "torch.amp.GradScaler | None":
    """--amp fp16 (GPU only, config refuses it elsewhere) scales the loss; bf16 keeps float32's range and needs none."""
    return torch.amp.GradScaler("cuda") if cfg.amp == "fp16" else None


def build_optimizer(model: nn.Module, cfg: TrainConfig, world_size: int) -> torch.optim.SGD:
    lr = cfg.lr * world_size if cfg.scale_lr else cfg.lr
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=cfg.momentum)


def shard_loader(splits: Splits, cfg: TrainConfig, rank: int, world_size: int) -> DataLoader:
    """This rank's shard of the training set: DistributedSampler, seeded alike on every rank. The image models drop
    a short last batch, as their benchmarks' fixed batches do: one sample would break BatchNorm's statistics."""
    sampler = DistributedSampler(splits.train, num_replicas=world_size, rank=rank, shuffle=True, seed=cfg.seed)
    return DataLoader(splits.train, batch_size=cfg.batch_size, sampler=sampler, drop_last=data.takes_images(cfg))


@dataclass(slots=True)
class Trainer:
    """The loop reads fit() → train_epoch() → train_step(); optional tools are told of each moment (workload/tools.py)."""

    ctx: DistContext
    cfg: TrainConfig
    model: nn.Module
    """What the step calls: the DDP wrapper, or the plain module for Horovod and single processes."""
    module: nn.Module
    """The plain module: evaluation and checkpoints use it, so they start no collective."""
    optimizer: torch.optim.Optimizer
    sync: GradientSync
    splits: Splits
    loaders: Sequence[DataLoader]
    """One loader per simulated worker: this rank's shard in a real backend, all shards in the reference."""
    fuse: bool = False
    """One forward over the concatenated micro-batches (BatchNorm then sees the whole global batch)."""
    scaler: torch.amp.GradScaler | None = None
    """--amp fp16 (GPU): scales the loss so that float16 gradients do not underflow."""
    tools: Tool = field(default_factory=Tools)
    """The stall watchdog, the tracer (--trace) and the fault points of a distributed rank; none by default."""
    stamps: dict[str, float] = field(default_factory=dict)
    """Wall-clock times of this run's first finished step and the end of training (see contract/phases.py)."""
    checkpoint_time_s: float = 0.0
    """Seconds spent in on_epoch_end (checkpoints) in this run."""
    host_start: tuple[host_load.Sample | None, float] = (None, 0.0)
    """The host's CPU counters and the time when this epoch's steady window began."""
    host: dict[str, float] | None = None
    """This host's CPU counters over the last epoch's steady window (workload/host_load.py)."""
    thread_cpu: list[float] | None = None
    """This rank's CPU-seconds by thread group over the epoch's steady window (workload/threads.py)."""
    parts: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """The last step's forward, backward and optimizer seconds (train_step's, for the epoch's timing)."""
    warmup: int = 0
    """The steps each epoch leaves out of its timing: --warmup-steps, or half an epoch shorter than the default
    (contract/config.py's warmup_for); set by fit."""
    schedule: ScheduleRecorder | None = None
    """Records the last epoch's measured steps' averaging schedule (workload/schedule.py); a distributed rank's."""
    recording: bool = False
    """Whether the step about to run is one the schedule records (_steps sets it)."""
    last_sync: tuple[float, float] = (0.0, 0.0)
    """The last step's backward end (perf_counter) and wait, for the schedule once the step's timing is done."""
    worker_buffers: list[Tensor] = field(default_factory=list)
    """The reference's simulated workers' BatchNorm buffers, one flat copy each: each worker's forward updates its
    own, as each rank's does."""

    def fit(self, history: History, on_epoch_end: Callable[[int, History], None]) -> History:
        """Train the epochs `history` has not; `on_epoch_end(epoch, history)` checkpoints after each."""
        self.tools.fit_start()
        steps = min(len(loader) for loader in self.loaders)
        if self.cfg.max_steps_per_epoch:
            steps = min(steps, self.cfg.max_steps_per_epoch)
        self.warmup = warmup_for(self.cfg.warmup_steps, steps)
        if self.warmup != self.cfg.warmup_steps and self.ctx.is_main:
            log.info("an epoch is %d steps: its first %d warm up (the default --warmup-steps %d would leave none to "
                     "time) and %d are timed", steps, self.warmup, self.cfg.warmup_steps, steps - self.warmup)
        self.tools.timed_after(self.warmup)
        for epoch in range(history.last_epoch + 1, self.cfg.epochs + 1):
            history.epochs.append(record := self.train_epoch(epoch, steps, history))
            if self.ctx.is_main:
                log.info("Epoch [%d/%d] done: train loss %.4f, test loss %.4f, test accuracy %.2f%%, %.0f samples/s",
                         epoch, self.cfg.epochs, record["train_loss"], record["test_loss"],
                         100 * record["test_accuracy"], record["samples_per_s"])
            start = time.perf_counter()
            on_epoch_end(epoch, history)
            self.checkpoint_time_s += time.perf_counter() - start
            self.tools.epoch_done(epoch)
        self.tools.fit_done()
        self.stamps["training_done"] = time.time()
        return history

    def train_epoch(self, epoch: int, steps: int, history: History) -> dict[str, Any]:
        """`steps` steps, then the epoch's figures reduced across ranks, then evaluation; the epoch's record."""
        self.model.train()
        for loader in self.loaders:
            # Without this every epoch would replay the same shuffle on every rank.
            loader.sampler.set_epoch(epoch)
        batches = zip(*self.loaders)
        link = placement.LinkCounter(self.ctx.world_size)
        epoch_start = time.perf_counter()
        losses, times = self._steps(epoch, steps, batches)
        epoch_time = time.perf_counter() - epoch_start
        link.stop()
        # One collective for the whole epoch's losses and timings instead of one per step.
        step_losses = self.ctx.average(torch.stack(losses).cpu().double())
        all_times = self.ctx.gather_rows(torch.tensor(times, dtype=torch.float64))
        by_thread = self.ctx.gather_rows(torch.tensor(self.thread_cpu or [math.nan] * len(THREAD_GROUPS),
                                                      dtype=torch.float64))
        link_record = link.record(self.ctx)
        # Every rank holds the same averaged losses, so every rank stops here together.
        self._check([*history.step_losses[:1], *step_losses.tolist()], epoch, steps)
        eval_start = time.perf_counter()
        self.tools.before_eval(epoch)
        self.average_buffers()
        test_loss, test_accuracy = self.evaluate()
        # The last update of an epoch can break the weights after its loss was taken: the test loss shows it.
        self._check([test_loss], epoch, steps)
        self.tools.before_checkpoint(epoch)
        history.step_losses.extend(step_losses.tolist())
        return {
            "epoch": epoch,
            "train_loss": float(step_losses.mean()),
            "test_loss": test_loss,
            "test_accuracy": test_accuracy,
            "epoch_time_s": epoch_time,
            "eval_time_s": time.perf_counter() - eval_start,
            "steps": steps,
            "samples": int(all_times[..., 3].sum()),
            "warmup_steps": self.warmup,
            "cpu_s_per_rank": all_times[:, self.warmup:, 4].sum(1).tolist(),
            **epoch_timing(all_times, self.warmup),
            **cpu_by_thread(by_thread, all_times[:, self.warmup:, 3].sum(1)),
            **link_record,
        }

    def _steps(self, epoch: int, steps: int, batches: Iterator[tuple[list[Tensor], ...]]
               ) -> tuple[list[Tensor], list[tuple[float, ...]]]:
        """The epoch's steps: each one's loss (a tensor: no sync) and its (load, compute, sync seconds, samples, the
        CPU seconds of every thread of this process, and forward, backward and optimizer seconds: the step taken
        apart, contract/phases.py's STEP_PHASES)."""
        losses, times = [], []
        self.host_start, by_thread = (None, 0.0), None
        for step in range(1, steps + 1):
            self.tools.before_step(epoch, step)
            if step == self.warmup + 1:  # the steady window begins: what the machine does from here
                self.host_start, by_thread = (host_load.sample(), time.perf_counter()), threads.cpu_times()
            cpu = time.process_time()
            self.recording = epoch == self.cfg.epochs and step > self.warmup
            if self.schedule:
                self.schedule.prepare(self.recording, steps - step)
            t0 = self._now()
            groups = self._micro_batches(next(batches))
            t1 = self._now()
            loss, sync_s = self.train_step(groups)
            t2 = self._now()
            if self.schedule:  # after the step's timing: what it keeps of the step costs no timed time
                self.schedule.end(*self.last_sync, last=step == steps)
            losses.append(loss)
            # The samples this step really processed: a short last batch counts for what it holds.
            times.append((t1 - t0, t2 - t1 - sync_s, sync_s, sum(len(y) for group in groups for _, y in group),
                          time.process_time() - cpu, *self.parts))
            self.tools.after_step(epoch, step, steps)
            self.stamps.setdefault("first_step_done", time.time())
            if step % self.cfg.log_every == 0 or step == steps:
                self._log_step(loss, epoch, step, steps)
        started, began = self.host_start
        self.host = host_load.window(started, host_load.sample(), time.perf_counter() - began)
        self.thread_cpu = threads.by_group(by_thread, threads.cpu_times())
        return losses, times

    def train_step(self, groups: list[list[tuple[Tensor, Tensor]]]) -> tuple[Tensor, float]:
        """Forward and backward over each micro-batch, gradients averaged across ranks once, one optimizer step.

        `groups` holds one list of micro-batches per worker this process runs: one in a real backend, one per
        simulated worker in the reference. Returns the mean loss (a tensor, so that no device sync happens here)
        and the seconds spent waiting for the gradient average.
        """
        self.optimizer.zero_grad()
        if self.schedule:
            self.schedule.begin(self.recording)
        losses, forward_s, backward_s = [], 0.0, 0.0
        for w, group in enumerate(groups):
            self._own_buffers(w, len(groups))
            for i, (images, labels) in enumerate(group):
                # All but the last micro-batch only accumulate: one average per step, as with one big batch.
                with self.sync.no_sync() if i < len(group) - 1 else contextlib.nullcontext():
                    began = self._now()
                    with self._autocast():
                        loss = F.cross_entropy(self.model(images), labels)
                    scaled = loss / len(group)
                    forward_done = self._now()
                    # Backward as the main thread sees it: DDP's bucket hooks and Horovod's parameter hooks run in it.
                    (self.scaler.scale(scaled) if self.scaler else scaled).backward()
                    forward_s, backward_s = forward_s + forward_done - began, backward_s + self._now() - forward_done
                losses.append(loss.detach())
            if self.worker_buffers:
                self.worker_buffers[w] = _flat(self.module.buffers())
            self.sync.group_done()
        backward_end = self._now()
        sync_s = self.sync.wait(backward_end)
        self.last_sync = (backward_end, sync_s)
        stepped = self._now()
        self.sync.step(self._apply)
        inside = max(0.0, sync_s - (stepped - backward_end))  # a wait the backend counts within backward (DDP's)
        self.parts = (forward_s, backward_s - inside, self._now() - stepped)
        return torch.stack(losses).float().mean(), sync_s

    def _apply(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler:
            self.scaler.step(optimizer)  # unscales, and skips the step when a gradient overflowed
            self.scaler.update()
        else:
            optimizer.step()

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.cfg.amp == "none":
            return contextlib.nullcontext()
        return torch.autocast(self.ctx.device.type, dtype=compression.DTYPES[self.cfg.amp])

    def _log_step(self, loss: Tensor, epoch: int, step: int, steps: int) -> None:
        # Outside the timed region: the allreduce and .item() are sync points.
        mean_loss = float(self.ctx.average(loss.detach().cpu()))
        self._check([mean_loss], epoch, step)
        if self.ctx.is_main:
            log.info("Epoch [%d/%d], Step [%d/%d], Loss: %.4f", epoch, self.cfg.epochs, step, steps, mean_loss)

    def _check(self, losses: list[float], epoch: int, step: int) -> None:
        if why := diverged(losses):
            raise Diverged(f"{DIVERGED}: {why} by epoch {epoch}, step {step} "
                           f"(--lr {self.cfg.lr}, --momentum {self.cfg.momentum}); lower --lr, no results were written")

    def _own_buffers(self, worker: int, workers: int) -> None:
        """In the reference, simulated worker `worker`'s BatchNorm buffers, before its forward passes."""
        if workers < 2 or not _float_buffers(self.module.buffers()):
            return
        if not self.worker_buffers:
            self.worker_buffers = [_flat(self.module.buffers()) for _ in range(workers)]
        _unflat(self.worker_buffers[worker], self.module.buffers())

    @torch.no_grad()
    def average_buffers(self) -> None:
        """BatchNorm's running statistics averaged across the ranks, or the reference's simulated workers, before an
        evaluation (as timm's distribute_bn does): every arm then evaluates with the buffers of all its workers."""
        flat = _flat(self.module.buffers())
        if not flat.numel() or self.cfg.no_averaging:  # the ceiling's ranks hold different models: each keeps its own
            return
        if self.worker_buffers:
            # In rank order, as a 2-rank allreduce adds.
            mean = compression.sum_in_order(self.worker_buffers) / len(self.worker_buffers)
            self.worker_buffers = [mean.clone() for _ in self.worker_buffers]
        else:
            mean = self.ctx.average(flat.cpu()).to(flat.dtype)
        _unflat(mean, self.module.buffers())

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float]:
        """Test loss and accuracy over the whole test set, each rank scoring every world_size-th digit."""
        self.module.eval()
        images, labels = self.splits.test.tensors
        images, labels = images[self.ctx.rank :: self.ctx.world_size], labels[self.ctx.rank :: self.ctx.world_size]
        totals = torch.zeros(3, dtype=torch.float64)
        for start in range(0, len(labels), preflight.EVAL_BATCH):
            x = data.inputs(images[start : start + preflight.EVAL_BATCH].to(self.ctx.device))
            y = labels[start : start + preflight.EVAL_BATCH].to(self.ctx.device)
            logits = self.module(x)
            totals += torch.tensor([
                float(F.cross_entropy(logits, y, reduction="sum")),
                float((logits.argmax(1) == y).sum()),
                len(y),
            ], dtype=torch.float64)
        loss_sum, correct, count = self.ctx.all_reduce(totals, "sum").tolist()
        return loss_sum / count, correct / count

    def overlap(self, last_epoch: dict[str, Any]) -> dict[str, Any] | None:
        """How much of the gradient averaging the steady steps hid behind backward: 1 - the wait after backward (the
        last epoch's measured steps, every rank) ÷ the averaging alone (`GradientSync.alone`, measured now, median of
        a few). Below 0 where the wait exceeded the averaging alone (it shares the cores with backward)."""
        alone = self.sync.alone()
        if alone is None:
            return None
        exposed = last_epoch["comm_exposed_s"]
        return {"share": 1 - exposed / alone if alone > 0 else None, "comm_alone_s": alone, "comm_exposed_s": exposed,
                "how": OVERLAP_HOW}

    def consistency(self) -> dict[str, Any]:
        """Whether every rank ends with the same parameters and BatchNorm buffers, and each rank's peak RSS."""
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux
        per_rank = self.ctx.gather_rows(torch.tensor([peak], dtype=torch.float64)).flatten().tolist()
        return {
            # The final weights, bit for bit: a resumed run must end where the uninterrupted run ends.
            "parameters_sha256": _sha256(self.module.parameters()).hexdigest(),
            "parameters_identical_across_ranks": self.ctx.same_on_all_ranks(_digest(self.module.parameters())),
            "buffers_identical_across_ranks": self.ctx.same_on_all_ranks(_digest(self.module.buffers())),
            "buffers_averaged": not self.cfg.no_averaging,  # before every evaluation (average_buffers)
            "peak_rss_mb_per_worker": [b / 2**20 for b in per_rank],
            "peak_rss_bytes": [int(b) for b in per_rank],
            "placement": placement.gather(self.ctx),
        }

    def _micro_batches(self, batches: tuple[list[Tensor], ...]) -> list[list[tuple[Tensor, Tensor]]]:
        """Each worker's batch split into --grad-accumulation micro-batches; fused: one batch of them all."""
        parts = self.cfg.grad_accumulation
        groups = []
        for images, labels in batches:
            # Synthetic images arrive as their bytes, normalised on their device: a loader's transform, timed as data.
            groups.append([(data.inputs(x.to(self.ctx.device, non_blocking=True)),
                            y.to(self.ctx.device, non_blocking=True))
                           for x, y in zip(images.chunk(parts), labels.chunk(parts))])
        if self.fuse:
            flat = [pair for group in groups for pair in group]
            return [[(torch.cat([x for x, _ in flat]), torch.cat([y for _, y in flat]))]]
        return groups

    def _now(self) -> float:
        if self.ctx.device.type == "cuda":
            # Kernels run asynchronously: without this the clock would measure launches, not work.
            torch.cuda.synchronize(self.ctx.device)
        return time.perf_counter()


def _float_buffers(buffers: Any) -> list[Tensor]:
    return [b for b in buffers if b.is_floating_point()]  # running mean and variance; not the steps tracked


def _flat(buffers: Any) -> Tensor:
    found = _float_buffers(buffers)
    return torch.cat([b.detach().flatten().float().cpu() for b in found]) if found else torch.zeros(0)


def _unflat(flat: Tensor, buffers: Any) -> None:
    start = 0
    for b in _float_buffers(buffers):
        b.copy_(flat[start : start + b.numel()].view_as(b))
        start += b.numel()


def _sha256(tensors: Any) -> "hashlib._Hash":
    h = hashlib.sha256()
    for tensor in tensors:
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h


def _digest(tensors: Any) -> int:
    # 7 bytes fit an int64 with room for its negation.
    return int.from_bytes(_sha256(tensors).digest()[:7], "big")
