"""A command tied to the process that starts it: it ends with that process, however that process ends (SIGKILL
included), and takes every process it started with it, however deep (a build's pip, cmake and nvcc).

The command runs in a session of its own whose leader, a shell, also reads a pipe the starting process holds. When
that process ends, the pipe closes, and the leader kills every other process of the session. A session, not a
process group: the tools a build runs make process groups of their own. `die_with_parent` ties a process to the one
that started it (make, a shell) through the kernel's parent-death signal, and `folder` a scratch folder to the process
that made it, by the same pipe.
"""

import contextlib
import ctypes
import os
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from runtime import signals

PR_SET_PDEATHSIG = 1  # linux/prctl.h
LEADER = ('exec 3<&0; "$@" </dev/null & child=$!; '
          '(read _ <&3; read self _ </proc/self/stat; '
          'for p in $(pgrep -s $$); do [ "$p" = $$ ] || [ "$p" = "$self" ] || kill -KILL "$p" 2>/dev/null; done) & '
          'watcher=$!; wait $child; code=$?; kill $watcher 2>/dev/null; exit $code')
"""The session's leader: the command in the background, a watcher that kills the session once the pipe on fd 3
closes, and the command's exit code as the leader's."""


def run(command: Sequence[str], **kwargs) -> int:
    """`command`'s exit code, the command tied to this process; `kwargs` as subprocess.Popen's (cwd, env, stdout)."""
    leader = subprocess.Popen(["sh", "-c", LEADER, "sh", *command], stdin=subprocess.PIPE, start_new_session=True,
                              **kwargs)
    try:
        return leader.wait()
    except BaseException:  # Ctrl-C or SIGTERM here: the session goes as it would with a SIGKILL
        leader.stdin.close()
        leader.wait()
        raise


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """This process gets `sig` when the process that started it ends (Linux's PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)


@contextlib.contextmanager
def folder(prefix: str, parent: Path | None = None) -> Iterator[Path]:
    """A new folder (in `parent`, else the system's temporary folder) for the block, removed when the block ends or
    this process does, however it ends (SIGKILL included): a shell in a session of its own removes it once the pipe
    this process holds closes."""
    remover: subprocess.Popen | None = None
    try:
        with signals.held():  # a Ctrl-C between the folder and its remover would leave the folder behind
            made = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
            try:
                remover = subprocess.Popen(["sh", "-c", 'read _; rm -rf -- "$0"', str(made)], stdin=subprocess.PIPE,
                                           start_new_session=True)
            except BaseException:
                made.rmdir()
                raise
        yield made
    finally:
        if remover:
            remover.stdin.close()
            remover.wait()


@contextlib.contextmanager
def temporary_root(path: Path) -> Iterator[None]:
    """`path` as this process's temporary folder for the block (TMPDIR, and tempfile's cached choice), so that what a
    library makes there (torch's inductor cache, made where torchvision loads) goes with a tied folder."""
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"], tempfile.tempdir = str(path), None
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before
        tempfile.tempdir = None
