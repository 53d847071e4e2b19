"""A Ray of the command's own, started as a user starts one: `ray start --head --block`, with a temp folder and free
ports of its own, in a session of its own, and ended with that session, however the command ends.

The session's leader is a shell that starts `ray start` and then reads a pipe this process holds: when the command
ends (returns, is signalled, or is SIGKILLed), the pipe closes, and the shell kills every process of the session
and removes the folder. A session, not a process group: Ray's workers make process groups of their own.
"""

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from contract.config import ConfigError
from contract.errors import RunFailed
from runtime import signals
from runtime.launch import executable, free_port

START_TIMEOUT_S = 120.0
STARTED = "Ray runtime started"
EXITED = "ray start exited with"
SESSION = (f'"$0" start "$@" </dev/null >"$TMPDIR/start.log" 2>&1 || echo "{EXITED} $?" >>"$TMPDIR/start.log" & '
           'read _; for p in $(pgrep -s $$); do [ "$p" = $$ ] || kill -KILL "$p" 2>/dev/null; done; rm -rf "$TMPDIR"')
"""The session's leader: `ray start` in the background, then, once the pipe closes, every other process of the
session killed and the folder removed."""
PREFIX = "ray-ddp-vs-horovod-"
"""The folder's prefix in /tmp: short, as Ray's socket paths must fit 107 bytes."""


def token_path() -> Path:
    """Where Ray keeps its token (its documented default, or RAY_AUTH_TOKEN_PATH)."""
    return Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token").expanduser()


def makes_token() -> bool:
    """Whether a Ray of the command's own writes a token: it takes Ray's secure default, token authentication, unless
    RAY_AUTH_MODE says otherwise, and no token is given or written yet."""
    return (os.environ.get("RAY_AUTH_MODE", "token").strip().lower() == "token"
            and not (os.environ.get("RAY_AUTH_TOKEN") or token_path().is_file()))


def check_token_folder() -> None:
    """A Ray of the command's own with token authentication writes a token where there is none: refused before
    anything starts where it cannot be written (a read-only HOME)."""
    if not makes_token():
        return
    folder = token_path().parent
    while not folder.exists():
        folder = folder.parent  # Ray makes the missing folders: the first that exists must take them
    if not os.access(folder, os.W_OK):
        raise ConfigError(f"the local Ray this run would start writes its token to {token_path()} (Ray's default), "
                          f"and {folder} cannot be written here; set HOME to a writable folder, point "
                          "RAY_AUTH_TOKEN_PATH at an existing token, or join a running cluster with RAY_ADDRESS")


def program() -> str:
    """This environment's `ray` command (runtime/launch.py's executable: a GPU machine takes Ray as a carried wheel,
    installed with pip --target); refused where there is none, before anything starts."""
    if found := executable("ray"):
        return found
    raise ConfigError(f"a local Ray would be started with the `ray` command, and there is none beside this Python "
                      f"({Path(sys.executable).with_name('ray')}) or on PATH; install Ray into this environment (make "
                      "install), put its bin/ on PATH, or join a running cluster with RAY_ADDRESS")


def cpus() -> int:
    """The CPUs this command may use (its affinity, as a container's or taskset's limit): what its own Ray offers."""
    return len(os.sched_getaffinity(0))


class OwnRay:
    """`ray start --head --block` for this command alone; `address` once started, `stop()` to end it. `env` and
    `flags` on top of this process's environment and the flags below (the tests' clusters take other CPUs)."""

    def __init__(self, env: dict[str, str] | None = None, flags: tuple[str, ...] = (), prefix: str = PREFIX) -> None:
        with signals.held():  # a Ctrl-C between the folder and its session would leave the folder behind, unowned
            self.folder = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
            try:
                self.session = self._start(env, flags)
            except BaseException:
                shutil.rmtree(self.folder, ignore_errors=True)
                raise

    def _start(self, env: dict[str, str] | None, flags: tuple[str, ...]) -> subprocess.Popen:
        """Free ports for this Ray, and its session started in the folder."""
        self.port, self.dashboard_port = free_port(), free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.dashboard = f"http://127.0.0.1:{self.dashboard_port}"
        # Every port Ray takes by default moved (runtime/launch.py's RAY_DEFAULT_PORTS): a user's `ray start --head`
        # beside this one found 52365 taken, its dashboard agent never started, and `ray job submit` said "500: No
        # available agent to submit job".
        start = ["--head", "--block", f"--temp-dir={self.folder}", f"--port={self.port}",
                 "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1",
                 f"--dashboard-port={self.dashboard_port}", f"--ray-client-server-port={free_port()}",
                 f"--dashboard-agent-listen-port={free_port()}", f"--num-cpus={cpus()}",
                 "--disable-usage-stats", *flags]
        # TMPDIR: what Ray's dashboard's multiprocessing leaves (pymp-*) goes with the folder.
        return subprocess.Popen(["sh", "-c", SESSION, program(), *start], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, **(env or {}), "TMPDIR": str(self.folder)})

    def wait_started(self) -> None:
        """Until `ray start` says its runtime started; RunFailed, with its last line, where it exits instead."""
        deadline = time.monotonic() + START_TIMEOUT_S
        log = self.folder / "start.log"
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace") if log.exists() else ""
            if STARTED in text:
                return
            if EXITED in text or self.session.poll() is not None:
                raise RunFailed(f"the local Ray did not start (`ray start` said: {said(text)[:200]}); run "
                                "again when the machine is less busy, or start a cluster with `ray start --head` "
                                "and join it")
            time.sleep(0.1)
        raise RunFailed(f"the local Ray did not start within {START_TIMEOUT_S:.0f} s (a busy machine); run again "
                        "when it is less busy, or start a cluster with `ray start --head` and join it")

    def stop(self, wait_s: float = 10.0) -> None:
        """Close the pipe: the session's leader kills the rest of the session and removes the folder."""
        if self.session.stdin and not self.session.stdin.closed:
            self.session.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.session.wait(timeout=wait_s)
        if self.session.poll() is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


FAILURE = re.compile(r"error|exception|failed|timed out|cannot|could not|not found|abort", re.I)


def said(log: str) -> str:
    """What `ray start` said of its failure: its last line that names one, else its last line (an INFO line such as
    "Local node IP: …" can follow the error)."""
    lines = [line.strip() for line in log.splitlines() if line.strip() and EXITED not in line]
    return next((line for line in reversed(lines) if FAILURE.search(line)), lines[-1] if lines else "?")


def local_rays() -> dict[str, bool]:
    """The GCS address of every Ray running on this machine, and whether `ray start` started it (it recorded the
    address in its --temp-dir) rather than a program for itself (ray.init records nothing). Read from the raylets'
    command lines, as Ray's own `auto` finds them."""
    import psutil

    rays: dict[str, bool] = {}
    for process in psutil.process_iter(["name", "cmdline"]):
        if process.info["name"] != "raylet":
            continue
        args = dict(arg.split("=", 1) for part in process.info["cmdline"] or [] for arg in part.split(" ")
                    if arg.startswith(("--gcs-address=", "--temp-dir=")))
        if gcs := args.get("--gcs-address"):
            temp_dir = Path(args.get("--temp-dir") or "/tmp/ray")
            rays[gcs] = rays.get(gcs, False) or recorded_in(temp_dir) == gcs
    return rays


def recorded_in(temp_dir: Path) -> str:
    """The GCS address `ray start --temp-dir` recorded in that folder, or ""."""
    try:
        return (temp_dir / "ray_current_cluster").read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""
