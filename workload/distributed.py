"""The one place that knows rank, world size and device. Backends build a DistContext once and pass it in."""

import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn

import torch
from torch import Tensor

from contract.errors import PeerLost, torchrun_restarts_left
from runtime.signals import exit_now

# `all_reduce(tensor, op)` with op "sum" or "max" returns the reduced tensor on every rank.
AllReduce = Callable[[Tensor, str], Tensor]


@dataclass(frozen=True, slots=True)
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    all_reduce: AllReduce
    ready_at: float = field(default_factory=time.time)
    """Wall-clock time the process group became usable: backends build the context right after it."""
    began_at: float | None = None
    """Wall-clock time this rank's code began (workload/lifecycle.py), the same moment under every launcher: a Ray
    worker process may have been started, pooled, before the run; None where no rank life ran (the references)."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def average(self, tensor: Tensor) -> Tensor:
        return self.all_reduce(tensor, "sum") / self.world_size

    def gather_rows(self, row: Tensor) -> Tensor:
        """Every rank's `row` stacked as [world_size, *row.shape], on every rank (an allgather by allreduce)."""
        table = torch.zeros((self.world_size, *row.shape), dtype=row.dtype)
        table[self.rank] = row
        return self.all_reduce(table, "sum")

    def same_on_all_ranks(self, value: int) -> bool:
        both = self.all_reduce(torch.tensor([value, -value], dtype=torch.int64), "max")
        return int(both[0]) == -int(both[1])


ALONE_TRIALS = 5


def device_sync(device: torch.device) -> Callable[[], None]:
    """What makes a host clock read after work on `device` mean that the work is done: on a GPU, waiting for the device
    (NCCL's work.wait() only makes the compute stream wait for NCCL's, the host goes on at once); on a CPU, nothing."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def timed_alone(barrier: Callable[[], None], average_once: Callable[[], None], ctx_average: Callable[[Tensor], Tensor],
                sync: Callable[[], None] = lambda: None) -> float:
    """The median of a few timed runs of `average_once` (a backend's gradient averaging with nothing beside it), each
    started together after `barrier`, averaged over the ranks; `sync` (device_sync) before each start and each end, so
    that on a GPU the time is the averaging's, not its launch's."""
    times = []
    for _ in range(ALONE_TRIALS):
        barrier()
        sync()
        start = time.perf_counter()
        average_once()
        sync()
        times.append(time.perf_counter() - start)
    return float(ctx_average(torch.tensor([sorted(times)[len(times) // 2]], dtype=torch.float64))[0])


def leave(error: PeerLost) -> NoReturn:
    """End a Ray worker that lost its peer with its one line: raised, Ray would print our traceback with it.

    Ray then sees the worker die, which is what happened to the run: Ray Train's FailureConfig, or the Horovod
    launcher's retry loop, restarts the group, and the driver prints the one line for the run.
    """
    print(f"error: {error}", file=sys.stderr, flush=True)
    exit_now(1)


def resume_hint(launcher: str, checkpoint_dir: str) -> str:
    """How a run whose rank ended goes on: a Ray worker leaves that to its driver; elsewhere, a rerun."""
    if launcher == "ray":
        return "ending this worker; the driver says how to resume"
    if checkpoint_dir:
        return "rerun with the same --checkpoint-dir to resume after the last finished epoch"
    return "nothing was checkpointed: pass --checkpoint-dir to be able to resume"


def peer_lost(error: BaseException, rank: int, launcher: str, checkpoint_dir: str = "", oom: str | None = None
              ) -> PeerLost:
    """The one line for a collective that failed because a peer went away: what failed (`oom`: the kernel's
    out-of-memory killer, runtime/memory.py), and how to go on."""
    # gloo's text starts with its source location and goes on with advice about other logs: its first sentence.
    reason = re.sub(r"^\[[^\]]*\] ", "", " ".join(str(error).split())).split(". ")[0][:160]
    hint = resume_hint(launcher, checkpoint_dir)
    left = torchrun_restarts_left()
    if launcher == "torchrun" and checkpoint_dir and left > 0:
        hint = f"torchrun restarts the workers from the last checkpoint ({left} restart(s) left)"
    if oom:
        return PeerLost(f"rank {rank} lost a peer: {oom}; {hint}")
    return PeerLost(f"rank {rank} lost a peer: another rank died or left "
                    f"({type(error).__name__}: {reason}); {hint}")


def single_process(device: torch.device | None = None) -> DistContext:
    return DistContext(rank=0, world_size=1, local_rank=0, device=device or torch.device("cpu"),
                       all_reduce=lambda tensor, op: tensor.clone())


