"""CPU by thread: each thread of this rank's process, its CPU-seconds from /proc, grouped by what started it.

Names cannot tell the threads apart (in a Horovod rank here all seven are named "python"), so a thread is grouped by
when it first appeared: before the process group (the launcher's and the runtime's: on Ray, Ray's worker threads and,
under Ray Train, which forms the group before the training function runs, the group's too), with the group (the
framework's own: gloo's, Horovod's background thread), or once training began (torch's intra-op and autograd
threads, the data loader's). The training thread, which runs the loop, forward and backward, is counted apart (Ray
Train runs it beside the worker's main thread, which then counts as "before the group").
"""

import os
import threading
from pathlib import Path

from contract.phases import THREAD_GROUPS

BEFORE, READY = "before", "ready"
_seen: dict[str, frozenset[int]] = {}
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def mark(moment: str) -> None:
    """Note the threads alive now: BEFORE the process group forms, READY once it has."""
    _seen[moment] = frozenset(_tids())


def cpu_times() -> dict[int, float] | None:
    """Every thread's CPU-seconds (user + system) so far, by thread id; None where /proc has no per-thread times."""
    out = {}
    for tid in _tids():
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the thread ended meanwhile
        out[tid] = (int(fields[11]) + int(fields[12])) / _TICK  # utime and stime, fields 14 and 15 of stat(5)
    return out or None


def by_group(start: dict[int, float] | None, end: dict[int, float] | None) -> list[float] | None:
    """CPU-seconds each of THREAD_GROUPS spent from `start` to `end` (cpu_times' results), the calling thread being the
    training thread; None without per-thread times or where the rank never marked its group's forming (a
    single-process reference)."""
    if start is None or end is None or READY not in _seen:
        return None
    loop = threading.get_native_id()
    spent = dict.fromkeys(THREAD_GROUPS, 0.0)
    for tid, seconds in end.items():
        group = ("training thread" if tid == loop else "before the group" if tid in _seen.get(BEFORE, frozenset()) else
                 "framework" if tid in _seen[READY] else "since training began")
        spent[group] += seconds - start.get(tid, 0.0)
    return [spent[name] for name in THREAD_GROUPS]


def _tids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        return []
