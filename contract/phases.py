"""Where a run's time goes: seconds from the launcher's start to each phase, from wall-clock stamps on rank 0.

Workers stamp when their process started, when the process group was ready (DistContext.ready_at), the first step and
the end of training. The launcher that knows when it started and returned (launchers.arms, ray_jobs.train) turns the
stamps into `phases` and `end_to_end_s`. A run started by a user's own torchrun, horovodrun or mp.spawn has the phases
measured from that command's start, and its last phase is when the results were written."""

import time
from pathlib import Path
from typing import Any

import psutil

from contract import results

PHASES = ("workers_started", "process_group_ready", "first_step_done", "training_done", "launcher_returned")
LAUNCHER_NAMES = ("torchrun", "horovodrun", "torch.distributed.run", "native_ddp.spawn")


def process_started() -> float:
    return psutil.Process().create_time()


def launcher_started() -> float:
    """When the command a user typed started."""
    return launcher_process().create_time()


def launcher_process() -> psutil.Process:
    """The command a user typed: the nearest torchrun, horovodrun or native_ddp.spawn above this process, else this
    process."""
    me = psutil.Process()
    for parent in me.parents():
        try:
            if program(parent.cmdline()) in LAUNCHER_NAMES:
                return parent
        except psutil.Error:
            continue
    return me


def program(cmdline: list[str]) -> str:
    """What a process runs: its executable's name, or under Python its script's name or its -m module. A shell or a
    `python -c` whose text merely mentions a launcher is not one (seen: a wrapper script named the run's folder)."""
    name = Path(cmdline[0]).name if cmdline else ""
    if not name.startswith("python"):
        return name
    args = iter(cmdline[1:])
    for arg in args:
        if arg == "-m":
            return next(args, "")
        if arg == "-c":
            return ""
        if not arg.startswith("-"):
            return Path(arg).name
    return ""


def phases(stamps: dict[str, float], start: float, returned: float) -> dict[str, float]:
    """Seconds from `start` to each phase, never decreasing: a worker process that Ray started before this launch
    (a pooled worker) counts as started at the launch. The phases are this attempt's: one that finishes a run from
    its last checkpoint takes no first step, and that phase then lasts no time."""
    out, previous = {}, 0.0
    for name in PHASES:
        at = returned if name == "launcher_returned" else stamps.get(name, start + previous)
        previous = out[name] = max(at - start, previous)
    return out


def finish(output_dir: str | Path, start: float, returned: float | None = None) -> dict[str, Any]:
    """Add the launcher's view (phases from `start`, end-to-end seconds) to the run's results.json; return it."""
    returned = returned or time.time()
    doc = results.read(Path(output_dir) / results.FILENAME)
    doc["phases"] = phases(doc["timestamps"], start, returned)
    doc["end_to_end_s"] = doc["phases"]["launcher_returned"]
    results.write(output_dir, doc)
    return doc
