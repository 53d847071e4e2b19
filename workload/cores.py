"""Which cores a rank runs on: with `--cpu-affinity core`, each rank is pinned to one core of its own, so that
ranks stop migrating between cores and sharing one while another idles (a source of run-to-run noise measured in
docs/measuring.md).

Pinned by global rank, not local rank: the simulated cluster puts one rank per "node" on one host, where every
rank is local rank 0. So the world is pinned only when it fits on the cores this process may use; otherwise the
ranks are left where the launcher put them.
"""

import os
from pathlib import Path


def pin(rank: int, world_size: int, affinity: str) -> None:
    """Pin every thread of this process to core `rank` of the allowed set (threads the framework started before,
    such as gloo's and Horovod's background thread, as well as those started after)."""
    allowed = sorted(os.sched_getaffinity(0))
    if affinity != "core" or world_size > len(allowed):
        return
    core = {allowed[rank]}
    for task in Path("/proc/self/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), core)
        except (ProcessLookupError, PermissionError):  # a thread that ended meanwhile; one we may not move
            pass
    os.sched_setaffinity(0, core)


def current() -> str:
    """This thread's cores as ranges ("0", "0-1", "0,2-3"): what results.json records per rank."""
    cores = sorted(os.sched_getaffinity(0))
    spans: list[list[int]] = []
    for core in cores:
        if spans and core == spans[-1][1] + 1:
            spans[-1][1] = core
        else:
            spans.append([core, core])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
