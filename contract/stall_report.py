"""Which rank stalled: each rank's watchdog (workload/watchdog.py) shows it is alive by touching a file of its own,
and the rank whose bound runs out names the peers whose file went quiet; under Ray it leaves that line for the
driver, which would otherwise name the rank that ended itself, the healthy one.

A stalled peer blocks the others inside a collective, so progress alone cannot tell the stalled rank from the
waiting ones; a watchdog thread still running can (a stopped or frozen process's threads all stop). The files sit in
the run's output folder, which every rank of one host sees; where a peer's file is not there (another host without a
shared folder) the line says only that a peer stalled or died.
"""

import contextlib
import shutil
import time
from pathlib import Path

FOLDER = ".heartbeats"
REPORT = "stalled"
QUIET_AFTER_S = 5.0
"""A live watchdog touches its file every second or more often: 5 s without one is a rank that has stopped."""


def folder(output_dir: str) -> Path:
    return Path(output_dir) / FOLDER


def beat(output_dir: str, rank: int, make: bool) -> bool:
    """Touch this rank's file; `make`: create the folder first, inside an output folder that exists (a run refused
    before it made one creates nothing). Whether the file is there now."""
    try:
        if make:
            folder(output_dir).mkdir(exist_ok=True)
        (folder(output_dir) / f"rank{rank}").touch()
        return True
    except OSError:  # a heartbeat is a hint for one line, never a reason to fail
        return False


def gone(output_dir: str, rank: int) -> None:
    """A rank that ends removes its file, and the folder once it is empty."""
    with contextlib.suppress(OSError):
        (folder(output_dir) / f"rank{rank}").unlink()
        folder(output_dir).rmdir()


def quiet_peers(output_dir: str, rank: int, world_size: int) -> dict[int, float]:
    """The other ranks whose heartbeat is older than QUIET_AFTER_S, with its age in seconds."""
    quiet, now = {}, time.time()
    for peer in range(world_size):
        with contextlib.suppress(OSError):
            if peer != rank and (age := now - (folder(output_dir) / f"rank{peer}").stat().st_mtime) > QUIET_AFTER_S:
                quiet[peer] = age
    return quiet


def who_stalled(quiet: dict[int, float]) -> str:
    """The end of a stall line: which peers went quiet (quiet_peers), or that a peer stalled or died."""
    if not quiet:
        return "a peer has stalled or died"
    ranks = ", ".join(f"rank {peer} ({age:.0f} s)" for peer, age in sorted(quiet.items()))
    return f"no sign of life from {ranks}: stopped, frozen or gone"


def leave(output_dir: str, line: str = "") -> None:
    """The ranks' files go; `line`, the stall's, stays for the driver to read (Ray)."""
    shutil.rmtree(folder(output_dir), ignore_errors=True)
    if line:
        with contextlib.suppress(OSError):
            folder(output_dir).mkdir(parents=True, exist_ok=True)
            (folder(output_dir) / REPORT).write_text(line)


def take(output_dir: str) -> str:
    """The driver's side: the stall line a rank left, if any; the folder goes either way."""
    try:
        line = (folder(output_dir) / REPORT).read_text().strip()
    except OSError:
        line = ""
    shutil.rmtree(folder(output_dir), ignore_errors=True)
    return line
