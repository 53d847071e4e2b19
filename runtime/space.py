"""A write that finds its disk full ends the run in one line naming the folder and what the write needed, and
leaves no half-written file behind (the writes here go through a temporary file, removed on failure)."""

import contextlib
import errno
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from contract import results
from contract.errors import RunFailed
from runtime import files


def size(n: int) -> str:
    """Bytes as a person reads them: 8.0 kB, 2.0 MB (powers of 1024, as df -h)."""
    for unit in ("bytes", "kB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def shorten(text: str, limit: int) -> str:
    """`text`, or its words up to `limit` characters and an ellipsis: never a word cut in two."""
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def is_full(error: OSError) -> bool:
    return error.errno in (errno.ENOSPC, errno.EDQUOT)


def full(folder: str | Path, what: str, needed: int | None = None) -> RunFailed:
    """The one line for a write into `folder` that the disk had no room for; `needed`: its bytes, where known."""
    needs = f"needs {size(needed)}" if needed is not None else "could not be written"
    return RunFailed(f"no space left in {folder}: {what} {needs}; free some space there (or choose another folder) "
                     "and run again")


@contextlib.contextmanager
def atomic_file(path: Path, needed: int) -> Iterator[Path]:
    """A temporary file beside `path` for the block to write, renamed into place (with the mode the umask gives)
    when the block ends, removed if it fails; a full disk ends the run in one line. `needed`: the bytes the write
    takes, as far as known."""
    name = ""
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        os.close(fd)
        yield Path(name)
        files.normal_mode(name)
        os.replace(name, path)
    except BaseException as error:
        if name:
            Path(name).unlink(missing_ok=True)
        if isinstance(error, OSError) and is_full(error):
            raise full(path.parent, path.name, needed) from None
        raise


def write_results(output_dir: str | Path, doc: dict[str, Any]) -> None:
    """results.json, validated and written atomically: a crash never leaves a half-written one for a finished-looking
    run."""
    results.validate(doc)
    write_json(Path(output_dir) / results.FILENAME, doc)


def write_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Standard JSON only: a NaN or Infinity here would be a number no run produced, and strict parsers refuse it.
    text = json.dumps(doc, indent=1, allow_nan=False)
    with atomic_file(path, len(text.encode())) as temporary:
        temporary.write_text(text)
