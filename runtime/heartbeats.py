"""Which rank stalled: each rank's watchdog (workload/watchdog.py) shows it is alive by touching a file of its own,
and the rank whose bound runs out names the peers whose file went quiet; under Ray it leaves that line for the
driver, which would otherwise name the rank that ended itself, the healthy one.

A stalled peer blocks the others inside a collective, so progress alone cannot tell the stalled rank from the
waiting ones; a watchdog thread still running can (a stopped or frozen process's threads all stop). The files sit in
the run's output folder, which every rank of one host sees; where a peer's file is not there (another host without a
shared folder) the line says only that a peer stalled or died.
"""

import contextlib
import os
import shutil
import time
from pathlib import Path

from runtime import launch

FOLDER = ".heartbeats"
REPORT = "stalled"
QUIET_AFTER_S = 5.0
"""A live watchdog touches its file every second or more often: 5 s without one is a rank that has stopped."""
SIGNALLED = "signalled"
"""Written after the pid in a rank's file when SIGTERM reached it, for the peers that ask why they got one too."""


def folder(output_dir: str) -> Path:
    return Path(output_dir) / FOLDER


def beat(output_dir: str, rank: int, make: bool) -> bool:
    """Touch this rank's file; `make`: create the folder first, inside an output folder that exists (a run refused
    before it made one creates nothing). Whether the file is there now."""
    try:
        if make:
            folder(output_dir).mkdir(exist_ok=True)
            (folder(output_dir) / f"rank{rank}").write_text(str(os.getpid()))
        else:
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


def mark_signalled(output_dir: str, rank: int) -> None:
    # Whole, by a rename: a peer signalled at the same instant read the file truncated, empty, as a rank that had
    # ended first (native_ddp.spawn passes a signal on to both ranks within microseconds).
    with contextlib.suppress(OSError):
        partial = folder(output_dir) / f".rank{rank}.{os.getpid()}"
        partial.write_text(f"{os.getpid()} {SIGNALLED}")
        os.replace(partial, folder(output_dir) / f"rank{rank}")


def present(output_dir: str, world_size: int) -> set[int]:
    """The ranks whose file is there now."""
    return {peer for peer in range(world_size) if (folder(output_dir) / f"rank{peer}").exists()}


def ended_first(output_dir: str, rank: int, world_size: int, seen: set[int]) -> list[int]:
    """The peers that ended before a signal reached them: a file once `seen` and gone now (a rank that ends removes
    it), or a process gone without having been signalled. A launcher passing the user's SIGTERM on reaches every
    rank at once; one ending the others after a death finds that rank gone. A file never seen is a peer that has not
    shown it is alive yet (its first beat comes up to a second after the output folder exists), not one that ended."""
    if not folder(output_dir).is_dir():
        return []  # the last signalled rank removed it, which it does only once every rank was signalled
    ended = []
    for peer in range(world_size):
        try:
            words = (folder(output_dir) / f"rank{peer}").read_text().split()
        except OSError:
            if peer in seen:
                ended.append(peer)
            continue
        if peer != rank and SIGNALLED not in words and not (words and launch.running(words[0])):
            ended.append(peer)
    if ended and not folder(output_dir).is_dir():
        return []  # removed as it was read: by the last signalled rank (see leave)
    return ended


def any_signalled(output_dir: str, world_size: int) -> bool:
    """Whether some rank's file says SIGTERM reached it."""
    return any(SIGNALLED in _words(output_dir, rank) for rank in range(world_size))


def _words(output_dir: str, rank: int) -> list[str]:
    try:
        return (folder(output_dir) / f"rank{rank}").read_text().split()
    except OSError:
        return []


def every_rank_signalled(output_dir: str, world_size: int) -> bool:
    """Whether every rank's file says SIGTERM reached it: the last rank to find so removes the folder."""
    return all(SIGNALLED in _words(output_dir, rank) for rank in range(world_size))


def leave(output_dir: str, line: str = "") -> None:
    """The ranks' files go; `line`, the stall's, stays for the driver to read (Ray). Renamed away first, whole: a
    signalled peer reading the files as they went one by one took a removed file for a peer that ended first."""
    here = folder(output_dir)
    going = here.with_name(f"{FOLDER}.gone-{os.getpid()}")
    with contextlib.suppress(OSError):
        here.rename(going)
    shutil.rmtree(going, ignore_errors=True)
    shutil.rmtree(here, ignore_errors=True)
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
