"""One writer per results folder: a command that writes a comparison's or a grid's folder holds a lock on it for its
whole life, and a second command that would write there (a `compare --resume` of a folder another command is still
writing) is refused in one line naming the holder's PID, before it changes anything.

The lock is flock(2) on the folder itself, so that taking it creates no file, and the kernel drops it when the
holder exits, however it exits (SIGKILL included).
"""

import fcntl
import logging
import os
from pathlib import Path

from contract.config import ConfigError

log = logging.getLogger(__name__)
_held: dict[Path, int] = {}
"""The folders this process holds, with the descriptor that holds each (open for the process's life)."""


def hold(folder: Path, flag: str) -> None:
    """Hold `folder` until this process ends (again in this process: nothing more); a ConfigError naming `flag`,
    the folder and the holder's PID where another process holds it."""
    folder = folder.resolve()
    if folder in _held:
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)  # not inherited: the runs this command starts do not hold it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        pids = ", ".join(holders(folder)) or "unknown"
        raise ConfigError(f"{flag} {folder} is being written by another command (PID {pids}); one command writes a "
                          "folder at a time: wait for it to end, or stop it and resume then") from None
    except OSError:  # NFS emulates flock with POSIX locks, which a directory opened read-only cannot take
        os.close(fd)
        log.warning("%s cannot be locked on its filesystem: run one command at a time in it", folder)
        return
    _held[folder] = fd


def holders(folder: Path) -> list[str]:
    """The other processes that have `folder` open (the lock's holder among them), read from /proc."""
    found = []
    for process in Path("/proc").iterdir():
        if not process.name.isdigit() or int(process.name) == os.getpid():
            continue
        try:
            if any(os.readlink(fd) == str(folder) for fd in (process / "fd").iterdir()):
                found.append(process.name)
        except OSError:  # gone, or not ours to read
            continue
    return found
