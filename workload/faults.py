"""Test-only fault injection: one rank dies by SIGKILL at a chosen point, as a crashed or killed worker does.

Set in the environment of the processes that train (the fault tier and ray_jobs.fault_trials do):

    WORKLOAD_FAULT="rank=1,epoch=2,step=10"                 # after step 10 of epoch 2
    WORKLOAD_FAULT="rank=0,epoch=1,at=checkpoint"           # half-way through writing epoch 1's checkpoint
    WORKLOAD_FAULT="rank=1,epoch=1,at=eval"                 # during epoch 1's evaluation
    WORKLOAD_FAULT="rank=1,epoch=0,at=init"                 # before the process group exists
    WORKLOAD_FAULT="rank=1,epoch=0,at=init,how=hang"        # hangs there instead (a stuck, not a dead, peer)
    WORKLOAD_FAULT="rank=1,epoch=1,step=3,how=oom,cgroup=/sys/fs/cgroup/memory/x"   # joins that memory cgroup
                                                            # (made by the test) and allocates until the kernel's
                                                            # out-of-memory killer ends it
    WORKLOAD_FAULT="...,once=/tmp/marker"                   # only if the marker does not exist yet; creates it
    WORKLOAD_FAULT="pids=/tmp/trial"                        # no fault: every rank writes rank<R>.pid there when it
                                                            # starts training, rank 0 epoch<E>.done after each
                                                            # epoch's checkpoint, for a kill from outside

`once` makes the fault fire in the first attempt only, so a restarted worker group runs through. Without it the
fault fires in every attempt. Unset, every check is one attribute test. Ray workers get the variable through the
job's runtime environment (cluster/ray_cluster.py), since Ray starts them from its raylet, not from the driver.
"""

import os
import signal
import time
from dataclasses import dataclass, fields
from pathlib import Path

ENV = "WORKLOAD_FAULT"
POINTS = ("step", "checkpoint", "eval", "init")
HOWS = ("kill", "hang", "oom")


@dataclass(frozen=True, slots=True)
class Fault:
    rank: int = -1
    epoch: int = 0
    at: str = "step"
    step: int = 0
    how: str = "kill"
    once: str = ""
    pids: str = ""
    cgroup: str = ""


def parse(text: str) -> Fault | None:
    if not text:
        return None
    values = dict(part.split("=", 1) for part in text.split(",") if part)
    fault = Fault(**{f.name: type(f.default)(values[f.name]) for f in fields(Fault) if f.name in values})
    if fault.at not in POINTS or fault.how not in HOWS:
        raise ValueError(f"{ENV}: at= takes {', '.join(POINTS)} and how= {', '.join(HOWS)}; got {text!r}")
    return fault


_FAULT = parse(os.environ.get(ENV, ""))


def point(at: str, rank: int, epoch: int = 0, step: int = 0) -> None:
    """Die here if the fault names this point, rank, epoch (and step)."""
    fault = _FAULT
    if fault is None or (fault.at, fault.rank, fault.epoch, fault.step) != (at, rank, epoch, step if at == "step" else 0):
        return
    if fault.once:
        try:
            Path(fault.once).touch(exist_ok=False)  # atomic: exactly one attempt dies
        except FileExistsError:
            return
    if fault.how == "hang":
        if fault.pids:  # with pids=DIR: say so, for a trial that acts once this rank hangs
            Path(fault.pids, f"rank{rank}.hanging").touch()
        while True:
            time.sleep(60)
    if fault.how == "oom":
        Path(fault.cgroup, "cgroup.procs").write_text(str(os.getpid()))
        hog = []
        while True:
            hog.append(bytearray(64 << 20))  # zero-filled: every page is touched, and counted
    os.kill(os.getpid(), signal.SIGKILL)


def announce(rank: int) -> None:
    """With pids=DIR: say where this rank runs, so a trial can kill it from outside."""
    if _FAULT and _FAULT.pids:
        Path(_FAULT.pids, f"rank{rank}.pid").write_text(str(os.getpid()))


def epoch_done(rank: int, epoch: int) -> None:
    """With pids=DIR: rank 0 marks an epoch finished and checkpointed."""
    if _FAULT and _FAULT.pids and rank == 0:
        Path(_FAULT.pids, f"epoch{epoch}.done").touch()
