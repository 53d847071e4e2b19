"""What a run on Ray prints: the project's own lines, in order. Ray's, Ray Train's, gloo's and Horovod's go to a file.

Ray forwards every worker's stdout and stderr to the driver, prefixed "(RayTrainWorker pid=…, ip=…)", coloured even
when the output is not a terminal, and in batches, so a worker's last lines could arrive after the driver's summary.
The project's workers log to stdout (runtime/cli.py); what Ray, Ray Train, gloo and Horovod say in a worker goes
to stderr (Python's logging and warnings, C++ glog). So, in the driver:

- a worker's stdout line is logged as it is, without prefix or colour;
- a worker's stderr line, and the driver's own Ray and Horovod log records, are appended to the log file (`ray.log`
  in the run's output folder), prefix kept; the file is opened, and named in the output, when the first run
  starts, so that a command refused after joining Ray (too few CPUs) leaves nothing;
- each Ray worker prints END on stdout as it finishes; once a run has returned, the driver waits for every rank's END
  (a few seconds at most) before it goes on, so a run's last epoch line comes before its summary and before the next
  run's lines.

Ray's dispatcher of forwarded lines is private (ray._private.worker, Ray 2.60), and Ray has no public way to receive
them (ray.init takes only log_to_driver): where it is missing, Ray prints as it always did, and only the driver's own
records go to the file.
"""

import contextlib
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from runtime import space
from runtime.worker_end import END

log = logging.getLogger(__name__)
LOG = "ray.log"
END_WAIT_S = 10.0
RAY_HANDLER = "ray_print_logs"  # the name Ray gives its own handler (ray/_private/worker.py, connect)
LIBRARY_LOGGERS = ("ray", "horovod", "py.warnings")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

_router: "_Router | None" = None


class _Router:
    def __init__(self, path: Path) -> None:
        self.path = path
        # Held in memory until a run starts: a command refused after joining Ray (too few CPUs) creates nothing.
        self.file: TextIO | None = None
        self.pending: list[str] = []
        self.full = False
        self.lock = threading.Lock()
        self.ends = 0
        self.ended = threading.Condition(self.lock)

    def write(self, text: str) -> None:
        with self.lock:
            if self.file is None:
                self.pending.append(text)
            elif not self.full:
                self._to_file(text)

    def _to_file(self, text: str) -> None:
        """A full disk: Ray's lines are dropped, rather than logging's "--- Logging error ---" traceback for each; the
        run's own writes (results, checkpoints) end it in one line when they find the disk full too."""
        try:
            self.file.write(text)
        except OSError as error:
            if not space.is_full(error):
                raise
            self.full = True
            with contextlib.suppress(OSError):  # closed even when its last flush fails, so exit does not retry it
                self.file.close()
            with contextlib.suppress(OSError):  # its last line whole: what a cut-short write left is taken back
                written = self.path.read_bytes()
                with open(self.path, "r+b") as file:
                    file.truncate(written.rfind(b"\n") + 1)

    def open(self) -> None:
        with self.lock:
            if self.file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.file = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - for the process
                self._to_file("".join(self.pending))
                self.pending = []
                log.info("Ray's own lines: %s", self.path)

    def library_logs_to_file(self) -> None:
        handler = logging.StreamHandler(self)  # its write(), under logging's contract: a handler never raises
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.addFilter(_plain)
        for name in LIBRARY_LOGGERS:
            logger = logging.getLogger(name)
            logger.handlers, logger.propagate = [handler], False
        logging.captureWarnings(True)  # warnings.warn in the driver (Ray's deprecations among them) to py.warnings

    def take_over_forwarding(self) -> bool:
        try:
            from ray._private import worker as ray_worker
            from ray._private.worker import global_worker_stdstream_dispatcher as dispatcher
        except ImportError:
            return False
        dispatcher.remove_handler(RAY_HANDLER)
        dispatcher.add_handler(RAY_HANDLER, self)
        if hasattr(ray_worker, "print_to_stdstream"):
            # The raylet's error messages ("A worker died or was killed …") come apart from the workers' lines: Ray's
            # error listener prints them, coloured, to stdout through this function, which it looks up at each call.
            ray_worker.print_to_stdstream = lambda data, ignore_prefix=False: self(data)
        return True

    def __call__(self, data: dict[str, Any]) -> None:
        """One batch of forwarded lines from one worker process, in that worker's order."""
        who = data.get("actor_name") or data.get("task_name") or ""
        daemon = data.get("pid") in ("autoscaler", "raylet")
        prefix = f"({data['pid']}) " if daemon and not who else f"({who} pid={data.get('pid')}, ip={data.get('ip')}) "
        for line in data.get("lines", []):
            line = ANSI.sub("", line)
            if data.get("is_err") or daemon:
                self.write(prefix + line + "\n")
            elif line == END:
                with self.ended:
                    self.ends += 1
                    self.ended.notify_all()
            else:
                log.info("%s", line)

    def wait(self, ends: int, timeout_s: float) -> bool:
        with self.ended:
            return self.ended.wait_for(lambda: self.ends >= ends, timeout_s)


def _plain(record: logging.LogRecord) -> bool:
    """Ray colours parts of its own messages (the dashboard's address): not in a file. A filter, not a formatter:
    ray.init sets its own formatter on the handlers of its logger."""
    record.msg, record.args = ANSI.sub("", record.getMessage()), None
    return True


@contextlib.contextmanager
def stderr_into(file: TextIO | None) -> Iterator[None]:
    """File descriptor 2 into `file` for the block, not Python's sys.stderr alone: what a C++ library writes there
    (Ray's core worker: "core_worker.cc: Attempting to recover 1 lost objects") goes to ray.log with Ray's other lines,
    not beside the run's one line."""
    if file is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(file.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def route(path: Path) -> None:
    """Before ray.init: the driver's Ray and Horovod records go to `path` (the first route of a process wins: one
    file per command)."""
    global _router
    if _router is None:
        _router = _Router(path)
        _router.library_logs_to_file()


def take_over() -> None:
    """After ray.init: the workers' forwarded lines go through the router."""
    if _router is not None and not _router.take_over_forwarding():
        log.debug("Ray's log dispatcher not found; workers' lines print as Ray prints them")


@contextlib.contextmanager
def one_run(workers: int) -> Iterator[None]:
    """Around one run on Ray: when it returns, wait until each of its `workers` ranks has said END."""
    if _router is None:
        yield
        return
    _router.open()
    with _router.ended:
        _router.ends = 0
    with stderr_into(_router.file):
        yield
    if not _router.wait(workers, END_WAIT_S):
        log.debug("not every worker's last lines arrived within %.0f s", END_WAIT_S)
