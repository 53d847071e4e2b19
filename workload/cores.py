"""Which cores a rank runs on. With `--cpu-affinity share` (compare's default) the ranks on one machine split its
cores evenly, and every thread of a rank (its training thread, the framework's, Ray's) stays on its own share: one
core each where there are as many cores as ranks, several where cores are spare. The same rule for every backend.

Unpinned, a rank's threads and the framework's go where the scheduler puts them; on a machine with as many cores as
ranks that decides which rank is the straggler and by how much, and each launch lands in one of two levels
(docs/measuring.md, "What sets a launch's level").
"""

import hashlib
import os
import socket
from pathlib import Path

import torch

from workload.distributed import DistContext


def pin(ctx: DistContext, affinity: str, threads: int) -> None:
    """With `affinity` "share": this rank and every thread of it on its own share of the cores this process may use,
    shared with the ranks on the same machine (one collective: every rank calls it). Where a share would hold fewer
    than `threads` cores (the torch threads of a rank), every rank stays where the scheduler puts it."""
    if affinity != "share":
        return
    hosts = ctx.gather_rows(torch.tensor([_host_key()], dtype=torch.int64)).flatten().tolist()
    if (cores := share(*slot(hosts, ctx.rank), sorted(os.sched_getaffinity(0)), threads)) is not None:
        _pin_every_thread(cores)


def slot(hosts: list[int], rank: int) -> tuple[int, int]:
    """`rank`'s place among the ranks on its machine (`hosts`: every rank's machine, by rank), and their count."""
    here = [r for r, key in enumerate(hosts) if key == hosts[rank]]
    return here.index(rank), len(here)


def share(index: int, count: int, allowed: list[int], threads: int = 1) -> set[int] | None:
    """The cores of the `index`-th of `count` ranks on a machine whose allowed cores are `allowed`: an equal share
    each, the remainder left to the rest of the machine; None where a share would hold fewer than `threads`."""
    each = len(allowed) // count
    if each < max(1, threads):
        return None
    return set(allowed[index * each : (index + 1) * each])


def _pin_every_thread(cores: set[int]) -> None:
    """Every thread the process has (gloo's, Horovod's background thread, Ray's), then the calling one, whose
    affinity the threads started later inherit."""
    for task in Path("/proc/self/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cores)
        except (ProcessLookupError, PermissionError):  # a thread that ended meanwhile; one we may not move
            pass
    os.sched_setaffinity(0, cores)


def host() -> str:
    """The machine this process runs on, whatever its network namespace: the kernel's boot id (the simulated cluster's
    nodes share one)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return socket.gethostname()


def _host_key() -> int:
    # 7 bytes fit an int64, which every backend's collective carries.
    return int.from_bytes(hashlib.sha256(host().encode()).digest()[:7], "big")


def current() -> str:
    """This thread's cores as ranges ("0", "0-1", "0,2-3"): what results.json records per rank."""
    spans: list[list[int]] = []
    for core in sorted(os.sched_getaffinity(0)):
        if spans and core == spans[-1][1] + 1:
            spans[-1][1] = core
        else:
            spans.append([core, core])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
