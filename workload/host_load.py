"""What else used the machine while a run measured: the host's CPU time from /proc/stat over the steady window, less
this run's ranks' own (their every thread), and the steal time a hypervisor gave to others. As pyperf warns of a
loaded system, a report then says when a figure was not measured on a quiet machine."""

import os
from dataclasses import dataclass
from pathlib import Path

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Sample:
    """The host's CPU counters since boot, in seconds summed over its cores."""

    busy_s: float
    steal_s: float


def sample() -> Sample | None:
    """Now, from /proc/stat's first line (user, nice, system, idle, iowait, irq, softirq, steal, …); None where it
    cannot be read (another OS)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _, _, irq, softirq, steal = (fields + [0] * 8)[:8]
    return Sample(busy_s=(user + nice + system + irq + softirq) * TICK_S, steal_s=steal * TICK_S)


def window(start: Sample | None, end: Sample | None, wall_s: float) -> dict[str, float] | None:
    """The host over a window of `wall_s` seconds: its busy and steal CPU-seconds, its cores."""
    if start is None or end is None or wall_s <= 0:
        return None
    return {"wall_s": wall_s, "busy_s": end.busy_s - start.busy_s, "steal_s": end.steal_s - start.steal_s,
            "cores": float(os.cpu_count() or 1)}


def others(host: dict[str, float] | None, ranks_cpu_s: float) -> dict[str, float] | None:
    """What the rest of the machine took of it over the window, as shares of all its cores: everything but this run's
    ranks on the host (Ray's and the launchers' own processes count as others: about 5 % here), and steal."""
    if not host:
        return None
    capacity = host["wall_s"] * host["cores"]
    return {"others_share": max(0.0, host["busy_s"] - ranks_cpu_s + host["steal_s"]) / capacity,
            "steal_share": host["steal_s"] / capacity, "busy_share": (host["busy_s"] + host["steal_s"]) / capacity,
            "cores": host["cores"], "wall_s": host["wall_s"]}
