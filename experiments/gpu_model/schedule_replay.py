"""Each framework's averaging schedule, replayed from one rank's measured backward under a link model: when each
allreduce (a DDP bucket, a Horovod fused buffer) starts and ends, how much of it backward hides, and the step.
Torch-free. docs/cluster.md writes each rule down with the line of DDP's or Horovod's source it follows.

A step's backward is given as its gradients in the order backward made them ready: each with the seconds from the
step's start to its readiness, its bytes, and its parameter's index in registration order (DDP buckets parameters
in reverse registration order, Horovod fuses them in the order they became ready). A link prices one allreduce.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

MIB = 1024 * 1024
DDP_BUCKET_BYTES = 25 * MIB
"""torch.nn.parallel.DistributedDataParallel's bucket_cap_mb default, 25 MiB."""
DDP_FIRST_BUCKET_BYTES = MIB
"""torch.distributed._DEFAULT_FIRST_BUCKET_BYTES: the first bucket (the last layers) is capped at 1 MiB."""
HOROVOD_CYCLE_S = 0.001
"""Horovod 0.28.1's cycle: operations.cc sets SetCycleTimeMs(1) unless HOROVOD_CYCLE_TIME says otherwise."""
HOROVOD_FUSION_BYTES = 128 * MIB
"""Horovod 0.28.1's fusion threshold (HOROVOD_FUSION_THRESHOLD's default, parameter_manager.cc)."""


@dataclass(frozen=True)
class Gradient:
    ready_s: float
    """Seconds from the step's start to when backward made it ready (its hook ran; on a GPU, its CUDA event)."""
    bytes: int
    index: int
    """Its parameter's position in registration order (model.parameters())."""


@dataclass(frozen=True)
class Link:
    """One allreduce over `ranks` ranks, as a ring: 2(p-1) messages of `latency_s` each and 2(p-1)/p of the bytes
    through the slowest hop at `bytes_per_s` (nccl-tests' bus bandwidth); `copy_bytes_per_s`: a fused buffer's copy
    in and out (Horovod's MEMCPY_IN/OUT_FUSION_BUFFER), 0 for none."""

    latency_s: float
    bytes_per_s: float
    ranks: int
    copy_bytes_per_s: float = 0.0

    def allreduce_s(self, nbytes: int) -> float:
        if self.ranks < 2:
            return 0.0
        p = self.ranks
        return 2 * (p - 1) * self.latency_s + 2 * (p - 1) / p * nbytes / self.bytes_per_s

    def copy_s(self, nbytes: int) -> float:
        return 2 * nbytes / self.copy_bytes_per_s if self.copy_bytes_per_s else 0.0


@dataclass(frozen=True)
class Allreduce:
    """One message of the schedule: the gradients it carries (their indices), when it could go, when it ran."""

    indices: tuple[int, ...]
    bytes: int
    ready_s: float
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Schedule:
    allreduces: tuple[Allreduce, ...]
    backward_end_s: float
    wait_s: float
    """What the step waits after backward: the last allreduce's end past backward's end, 0 if hidden."""
    cycles: int = 0
    """Horovod's cycles that found gradients ready (0 for DDP)."""


def ddp_buckets(gradients: Sequence[Gradient], cap_bytes: int = DDP_BUCKET_BYTES,
                first_cap_bytes: int = DDP_FIRST_BUCKET_BYTES) -> list[list[Gradient]]:
    """DDP's buckets, in the order backward made the gradients ready (DDP rebuilds its buckets in that order after
    the first iteration, reducer.cpp's rebuild_buckets): a gradient is added, then the bucket closes once it holds
    its limit or more, the first bucket's limit `first_cap_bytes`, every later one's `cap_bytes`
    (reducer.cpp's compute_bucket_assignment_by_size)."""
    buckets: list[list[Gradient]] = []
    current: list[Gradient] = []
    size = 0
    for gradient in _in_readiness(gradients):
        current.append(gradient)
        size += gradient.bytes
        if size >= (first_cap_bytes if not buckets else cap_bytes):
            buckets.append(current)
            current, size = [], 0
    return buckets + ([current] if current else [])


def ddp(gradients: Sequence[Gradient], backward_end_s: float, link: Link, cap_bytes: int = DDP_BUCKET_BYTES,
        first_cap_bytes: int = DDP_FIRST_BUCKET_BYTES, in_flight: int = 1, wire: float = 1.0) -> Schedule:
    """DDP's schedule: a bucket's allreduce is launched once its last gradient is ready, and buckets are launched in
    order (reducer.cpp's mark_bucket_ready launches from next_bucket_ on); at most `in_flight` run at once (NCCL: one
    stream, 1; Gloo's process group: as many as its threads), each taking link.allreduce_s. `wire`: the share of a
    bucket's bytes its comm hook sends (fp16_compress_hook: 0.5); the buckets are cut by the gradients' own bytes."""
    out: list[Allreduce] = []
    launched = 0.0
    for bucket in ddp_buckets(gradients, cap_bytes, first_cap_bytes):
        nbytes = int(sum(g.bytes for g in bucket) * wire)
        ready = max(g.ready_s for g in bucket)
        launched = max(ready, launched)  # in bucket order: never before the bucket before it
        start = max(launched, out[-in_flight].end_s if len(out) >= in_flight else 0.0)
        out.append(Allreduce(tuple(g.index for g in bucket), nbytes, ready, start, start + link.allreduce_s(nbytes)))
    return _schedule(out, backward_end_s)


def horovod(gradients: Sequence[Gradient], backward_end_s: float, link: Link, cycle_s: float = HOROVOD_CYCLE_S,
            fusion_bytes: int = HOROVOD_FUSION_BYTES, negotiation_s: float = 0.0, phase_s: float = 0.0) -> Schedule:
    """Horovod's schedule: its background thread wakes every `cycle_s` (operations.cc's RunLoopOnce sleeps until
    last_cycle_start + cycle time; a cycle whose work outlasts it starts the next at once), takes every gradient
    whose hook has enqueued it, negotiates them (`negotiation_s`: the coordinator's round, a response-cache bit
    vector once the tensors are cached), fuses them in readiness order into buffers of at most `fusion_bytes`
    (controller.cc's FuseResponses; one larger than it goes alone), and runs each buffer's allreduce in turn, a fused
    buffer's copy in and out included. `phase_s`: where the first cycle falls after the step's start (a run's chance:
    horovod_over_phases spreads it)."""
    def took(buffer: list[Gradient]) -> float:
        nbytes = sum(g.bytes for g in buffer)
        return link.allreduce_s(nbytes) + (link.copy_s(nbytes) if len(buffer) > 1 else 0.0)

    pending = _in_readiness(gradients)
    out: list[Allreduce] = []
    wake, cycles = phase_s, 0
    while pending:
        ready = [g for g in pending if g.ready_s <= wake]
        if not ready:  # sleep through the cycles before the next gradient is ready
            wake += cycle_s * max(1, math.ceil((pending[0].ready_s - wake) / cycle_s - 1e-9)) if cycle_s else \
                pending[0].ready_s - wake
            continue
        pending = pending[len(ready):]
        cycles += 1
        now = wake + negotiation_s
        for buffer in _fuse(ready, fusion_bytes):
            end = now + took(buffer)
            out.append(Allreduce(tuple(g.index for g in buffer), sum(g.bytes for g in buffer),
                                 max(g.ready_s for g in buffer), now, end))
            now = end
        wake = max(wake + cycle_s, now)
    return _schedule(out, backward_end_s, cycles)


def horovod_over_phases(gradients: Sequence[Gradient], backward_end_s: float, link: Link, phases: int = 8,
                        **rules: float) -> Schedule:
    """horovod() with its first cycle at `phases` points spread over one cycle: the schedule whose wait is the
    median of theirs (the cycle's phase is the run's chance, not its rule)."""
    cycle = rules.get("cycle_s", HOROVOD_CYCLE_S)
    found = sorted((horovod(gradients, backward_end_s, link, phase_s=cycle * k / phases, **rules)
                    for k in range(phases)), key=lambda s: s.wait_s)
    return found[len(found) // 2]


def _in_readiness(gradients: Sequence[Gradient]) -> list[Gradient]:
    """The gradients in the order backward made them ready; at the same moment, the later registered first."""
    return sorted(gradients, key=lambda g: (g.ready_s, -g.index))


def _fuse(ready: list[Gradient], fusion_bytes: int) -> list[list[Gradient]]:
    """Ready gradients in order, a buffer closed where the next would pass `fusion_bytes` (one larger than it
    alone)."""
    buffers: list[list[Gradient]] = []
    size = 0
    for gradient in ready:
        if buffers and size + gradient.bytes <= fusion_bytes:
            buffers[-1].append(gradient)
            size += gradient.bytes
        else:
            buffers.append([gradient])
            size = gradient.bytes
    return buffers


def _schedule(allreduces: list[Allreduce], backward_end_s: float, cycles: int = 0) -> Schedule:
    last = max((a.end_s for a in allreduces), default=backward_end_s)
    return Schedule(tuple(allreduces), backward_end_s, max(0.0, last - backward_end_s), cycles)
