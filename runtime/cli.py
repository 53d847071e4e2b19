"""What every command-line entry point shares: the one-line error contract (its flags: runtime/flags.py, its logging:
runtime/logs.py)."""

import argparse
import atexit
import os
import signal
import sys
import time
from collections.abc import Callable

from contract.config import ConfigError
from contract.errors import DataError, Diverged, PeerLost, RunFailed, launcher_rank, torchrun_restarts_left
from runtime import logs, signals

# Settings the user can fix: one line, exit code 2. A diverged run, or one whose peer died, is a failed run: one
# line, exit code 1.
EXIT_CODES = {ConfigError: 2, DataError: 2, Diverged: 1, PeerLost: 1, RunFailed: 1}


prog = ""
"""The command as typed where it is not the module's own usage (`ddp-vs-horovod train`: ray_jobs/console.py)."""


class Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line and exit code 2, like every other user error here."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **{**kwargs, **({"prog": prog} if prog else {})})

    def error(self, message: str) -> None:
        fail_unless_restarted(f"{message} (see --help)", 2)


_said = False  # whether this process has printed its one line


def fail(message: str, code: int, every_rank: bool = False, unless_said: bool = False) -> None:
    """Exit with `code` after one `error:` line; under torchrun, mp.spawn or horovodrun only rank 0 prints it, unless
    `every_rank` (a lost peer: the rank that would have printed may be the one that died)."""
    say(message, every_rank, unless_said)
    sys.exit(code)


def fail_unless_restarted(message: str, code: int) -> None:
    """`fail`, but silent while torchrun has restarts left: it restarts every failed attempt, and the same refusal or
    divergence would end each one with the same line (N+1 times); the attempt it does not restart says it once.
    Ranks above 0 leave the line to rank 0 (see _leave_the_line_to_rank_0)."""
    if torchrun_restarts_left() > 0:
        sys.exit(code)
    if launcher_rank() > 0:
        _leave_the_line_to_rank_0(code)
        say(message, every_rank=True)  # no SIGTERM within the wait: a refusal of this rank's own, or a slow rank 0
        sys.exit(code)
    fail(message, code)


RANK_0_LINE_WAIT_S = 10.0
"""How long a rank above 0 that refuses waits for rank 0 to say the refusal and exit (skewed start-ups take 1-3 s)."""


def _leave_the_line_to_rank_0(code: int) -> None:
    """Every rank makes the same refusal and rank 0 says it, but torchrun and horovodrun end the other ranks with
    SIGTERM once one has exited, which could end rank 0 before its line. So a rank above 0 exits when that SIGTERM
    comes (rank 0 has exited), and returns after the wait if not."""
    signals.on_stop_signals(lambda signum, frame: signals.exit_now(code))
    deadline = time.monotonic() + RANK_0_LINE_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(0.1)  # short: a signal taken by another thread runs the handler only when this sleep returns


def say(message: str, every_rank: bool = False, unless_said: bool = False) -> None:
    """The one `error:` line; `unless_said`: not if this process has printed one already (a signal arriving
    while a rank leaves with its own line)."""
    global _said
    if not (unless_said and _said) and (every_rank or launcher_rank() == 0):
        print(f"error: {message}", file=sys.stderr, flush=True)
        _said = True


def interrupted_line(sigterm: bool, what: str = "") -> str:
    how = "ended by SIGTERM" if sigterm else "interrupted (Ctrl-C)"
    return f"{how} before the command finished; {what or 'a run that had not finished wrote no result'}"


def run(main: Callable[[], int | None]) -> None:
    """Run `main`; a user error becomes one line on stderr and exit code 2, with no traceback; Ctrl-C and SIGTERM one
    line too, and 130 or 143, once what the command started is torn down (runtime/signals.py)."""
    logs.setup()
    signals.forget()
    signals.install()
    whole_process = main.__module__ == "__main__"  # `python -m`: its teardown is the interpreter's exit
    if whole_process:
        atexit.register(_say_a_late_signal)  # first registered, so it runs after the teardown registered later
    try:
        working_directory()
        code = main()
    except KeyboardInterrupt as error:
        # A comparison says which of its runs had finished (ray_jobs/orchestrator.py).
        fail(interrupted_line(signals.exit_code() == 143, str(error)), signals.exit_code(), unless_said=True)
    except Exception as error:
        if signals.ending():  # what the unwinding raised, a half-imported module's error among it
            fail(interrupted_line(signals.exit_code() == 143), signals.exit_code(), unless_said=True)
        if isinstance(error, PeerLost):  # each attempt's own news, with the restarts left
            fail(str(error), EXIT_CODES[PeerLost], every_rank=True)
        if isinstance(error, tuple(EXIT_CODES)):
            fail_unless_restarted(str(error), next(c for kind, c in EXIT_CODES.items() if isinstance(error, kind)))
        raise
    finally:
        if whole_process:
            signals.after_main()
        else:  # called in a process that goes on (the tests): a Ray of its own stopped at its exit must not see it
            signals.forget()
    sys.exit(code or 0)


def working_directory() -> None:
    """A command run from a folder that was removed since: refused here, not as torch's libraries failing to load
    (Intel oneMKL's "FATAL ERROR", exit 2 and nothing else)."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise ConfigError("the working directory no longer exists (it was removed after this shell entered it); cd "
                          "into an existing folder and run the command again") from None


def _say_a_late_signal() -> None:
    if (late := signals.late()) and not _said:
        name = "SIGTERM" if late == signal.SIGTERM else "Ctrl-C"
        say(f"{name} arrived while the command was stopping, its work done; what it wrote stands")
        os._exit(128 + late)
