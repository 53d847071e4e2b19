"""The project's logging: its INFO lines on rank 0 only, to whatever stdout is, and a reader that goes away costs no
traceback."""

import contextlib
import errno
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

PROJECT_LOGGERS = ("__main__", "contract", "runtime", "workload", "native_ddp", "horovod_ddp", "cluster", "launchers",
                   "analysis", "experiments", "ray_jobs", "tests")
"""Every package of the project (tests/test_layout.py checks that none is missing), and a module run as __main__."""


class _StdoutHandler(logging.StreamHandler):
    """Writes to whatever sys.stdout is when a line is logged, not to the stream it was at setup: a caller that
    swaps stdout (pytest's capture, a redirect) and closes the old one must not leave logging writing into it."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stdout

    @stream.setter
    def stream(self, value: object) -> None:
        pass

    def emit(self, record: logging.LogRecord) -> None:
        if sys.stdout is not None:  # None: started with stdout closed (`>&-`)
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        # A reader that went away (`| head -1`) or a closed stdout: the run goes on and writes its results, its lines
        # dropped, rather than logging's traceback for every line.
        error = sys.exc_info()[1]
        if isinstance(error, BrokenPipeError) or (isinstance(error, OSError) and error.errno == errno.EBADF):
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # and no error at exit's flush
            return
        super().handleError(record)


def setup(rank: int = 0) -> None:
    """The project's INFO lines on rank 0 only, so a multi-process run prints each once; libraries at WARNING."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s", handlers=[_StdoutHandler()], force=True)
    for name in PROJECT_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO if rank == 0 else logging.WARNING)


class _Quiet(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return False


class _FileHandler(logging.FileHandler):
    def handleError(self, record: logging.LogRecord) -> None:
        pass  # a full disk: the run's own writes end it in one line (runtime/space.py); its log lines are dropped


@contextlib.contextmanager
def to_file(path: Path) -> Iterator[None]:
    """The project's lines of the block go to `path` and not to the output: a comparison keeps each run's lines in
    its folder (as torchrun's and horovodrun's go to launcher.log) and prints its progress lines alone."""
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    handler = _FileHandler(path, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter("%(message)s"))
    quiet = _Quiet()
    shown = [h for h in root.handlers if isinstance(h, _StdoutHandler)]
    for h in shown:
        h.addFilter(quiet)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()
        for h in shown:
            h.removeFilter(quiet)
