"""The one place that knows rank, world size and device. Backends build a DistContext once and pass it in."""

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

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


def single_process(device: torch.device | None = None) -> DistContext:
    return DistContext(rank=0, world_size=1, local_rank=0, device=device or torch.device("cpu"),
                       all_reduce=lambda tensor, op: tensor.clone())


def launcher_rank() -> int:
    """This process's rank as torchrun (RANK) or horovodrun (HOROVOD_RANK) set it, before any process group.

    Only for printing a refusal once rather than once per rank; everything else takes the rank from DistContext.
    """
    # RANK alone may be any job system's; torchrun also sets TORCHELASTIC_RUN_ID.
    name = "RANK" if "TORCHELASTIC_RUN_ID" in os.environ else "HOROVOD_RANK"
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else 0
