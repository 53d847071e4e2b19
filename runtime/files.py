"""Files and folders written the way the user's umask says, as `open()` and `mkdir()` would make them.

Atomic writes go through a temporary file (tempfile makes those 0600) or folder (0700) that is then renamed into
place; without this, results, checkpoints and data would keep those private modes, and colleagues reading a shared
results folder could not open them.
"""

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


def proc_number(path: str, key: str, base: int = 10) -> int | None:
    """The number after `key` at the start of a line of the kernel's file `path` (/proc/vmstat's `oom_kill `); None
    where the file, the line or the number is not there."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1], base)
    return None


def umask() -> int:
    """This process's umask, read without changing it (os.umask sets it, which races with other threads)."""
    if (found := proc_number("/proc/self/status", "Umask:", 8)) is not None:
        return found
    old = os.umask(0o022)
    os.umask(old)
    return old


def normal_mode(path: str | Path) -> None:
    """Give `path` the mode a plain open() (0666) or mkdir() (0777) would have given it under the umask."""
    base = 0o777 if Path(path).is_dir() else 0o666
    os.chmod(path, base & ~umask())


@contextlib.contextmanager
def unchanged_on_failure(folder: Path, suffixes: tuple[str, ...]) -> Iterator[None]:
    """Every file under `folder` ending in one of `suffixes` as it was, should the block raise: those it rewrote get
    their bytes back, those it made are removed (a refused --render leaves every file as it was)."""
    before = {path: path.read_bytes() for path in _files(folder, suffixes)}
    try:
        yield
    except BaseException:
        for path in _files(folder, suffixes):
            if path not in before:
                path.unlink(missing_ok=True)
        for path, content in before.items():
            if not path.exists() or path.read_bytes() != content:
                path.write_bytes(content)
        raise


def _files(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    return [path for path in folder.rglob("*") if path.suffix in suffixes and path.is_file()] if folder.is_dir() else []
