"""The launch a process descends from: the command a user typed (torchrun, horovodrun, mp.spawn, or this process),
when it started, and the launcher's view of a finished run (its phases from that start, contract/phases.py)."""

import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from contract import phases, results
from runtime import space

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
    `python -c` whose text merely mentions a launcher is not one."""
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


def finish(output_dir: str | Path, start: float, returned: float | None = None) -> dict[str, Any]:
    """Add the launcher's view (phases from `start`, end-to-end seconds) to the run's results.json; return it."""
    returned = returned or time.time()
    doc = results.read(Path(output_dir) / results.FILENAME)
    doc["phases"] = phases.phases(doc["timestamps"], start, returned)
    doc["end_to_end_s"] = doc["phases"]["launcher_returned"]
    space.write_results(output_dir, doc)
    return doc


# Ports Ray takes by default for its other components (52365: the dashboard agent's); worker ports are 10002-19999.
RAY_DEFAULT_PORTS = {6379, 8265, 10001, 52365}


def free_port() -> int:
    """A loopback TCP port that nothing listens on now, and none that Ray takes by default."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in RAY_DEFAULT_PORTS:
            return port


def executable(name: str) -> str | None:
    """This environment's command `name`: beside this Python (the venv's bin/), else the first on PATH (a package
    installed with pip --target keeps its commands in that folder's bin/); None where there is none."""
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else shutil.which(name)


def running(pid: int | str) -> bool:
    """Whether process `pid` runs: a zombie, ended but not yet read by its parent, does not."""
    try:
        return Path(f"/proc/{int(pid)}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, ValueError, IndexError):
        return False
