"""Ctrl-C and SIGTERM: one rule for every command and rank.

1. SIGTERM is Ctrl-C: either unwinds the command as a KeyboardInterrupt (Ray's blocking calls pass only that
   through), so that its `finally` blocks stop what it started (a launcher's session, a Ray of its own); then one
   line and 130 or 143 (runtime/cli.py's `run`). `held()` raises it once a step that must not be cut in two ends.
2. A copy within a second is ignored (`timeout` signals the command, then its process group); a KeyboardInterrupt
   that Python swallowed inside a finalizer ("Exception ignored in …") is raised again.
3. Once `main` has returned, a signal lets the teardown finish, then is said, with 130 or 143.
4. Where the main thread waits in C++ (a rank's process group forming), no Python handler runs until it returns:
   `ending_on` ends the process from a thread that reads Python's signal wakeup fd.
"""

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import NoReturn

REPEAT_WINDOW_S = 1.0
ENDING_WAIT_S = 10.0  # the main thread's handler waits this long for the watcher's ending (it reads heartbeats)
_WATCH_ENDS = b"\0"  # no signal has the number 0
_signal: int | None = None  # the signal whose KeyboardInterrupt is unwinding the command
_signalled_at = 0.0
_raise_again = False
_late: int | None = None  # a signal that arrived once main had returned, while the teardown ran
_held = False  # inside `held()`: a signal is raised when the block ends
_came_held = False  # a signal came inside `held()`


def install() -> None:
    """Rules 1 and 2 for this command: from its start, and again after a library installed handlers of its own."""
    on_stop_signals(_unwind)
    sys.unraisablehook = _swallowed


def on_stop_signals(handler: Callable[[int, object], None]) -> None:
    """`handler` for SIGTERM and Ctrl-C, where a handler can be set (the main thread)."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, handler)


def _unwind(signum: int, frame: object) -> None:
    global _signal, _signalled_at, _raise_again, _came_held
    if _raise_again:
        _raise_again = False
    elif _signal is not None and time.monotonic() - _signalled_at < REPEAT_WINDOW_S:
        return  # the copy from timeout's process group: raised, it cut the unwinding short
    else:
        _signal, _signalled_at = signum, time.monotonic()
    if _held:
        _came_held = True
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Rule 1's KeyboardInterrupt raised when the block ends, not inside it: for a short step that must not be cut in
    two (a folder made, and the process that removes it started). It delays rule 1 alone, in the main thread."""
    global _held, _came_held
    if _held or threading.current_thread() is not threading.main_thread():
        yield
        return
    _held = True
    try:
        yield
    finally:
        _held = False
        came, _came_held = _came_held, False
        if came:
            raise KeyboardInterrupt  # also over what the block raised, as the signal would have been inside it


def _swallowed(unraisable: object) -> None:
    global _raise_again
    if isinstance(getattr(unraisable, "exc_value", None), KeyboardInterrupt) and _signal is not None:
        _raise_again = True
        # Sent from a thread a moment later: raised here or now it would be swallowed again, inside this hook.
        threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
        return
    sys.__unraisablehook__(unraisable)


def ending() -> bool:
    """Whether a SIGTERM or Ctrl-C is what ends the command (its line said, its teardown running)."""
    return _signal is not None


def exit_code() -> int:
    return 143 if _signal == signal.SIGTERM else 130  # as a shell reports a command the signal ended


def after_main() -> None:
    """Rule 3: from here a signal is noted, not raised, and `late()` says which."""
    on_stop_signals(_note_late)


def _note_late(signum: int, frame: object) -> None:
    global _late
    _late = _late or signum


def late() -> int | None:  # rule 3's signal, if one came
    return _late


def forget() -> None:
    """A command's start, or its end inside a process that goes on (the tests): no signal is the next one's."""
    global _signal, _raise_again, _came_held
    _signal, _raise_again, _came_held = None, False, False


def exit_now(code: int) -> NoReturn:
    """End this process at once, its logs and output flushed, skipping the interpreter's teardown and every
    `finally` (a group shutdown that would wait on a dead peer, a profiler that aborts at exit)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):  # closed, or None when started closed
            stream.flush()
    os._exit(code)


@contextlib.contextmanager
def ending_on(signums: tuple[int, ...], end: Callable[[int], NoReturn]) -> Iterator[None]:
    """Rule 4: `end(signum)` from whichever comes first, the Python handler or the wakeup-fd watcher; `end` exits
    (if it raises, the process exits anyway). The handlers stay after the context."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # Re-entrant and entered once: a second signal runs its handler inside the first's ending, and returns at once.
    once, began, ours = threading.RLock(), [], os.getpid()

    def at_once(signum: int, wait_s: float) -> None:
        # Not in a child forked with its exec pending; and the main thread waits for the watcher, but not for ever (a
        # handler can run inside a write that holds a lock the watcher's line needs).
        if os.getpid() != ours or not once.acquire(timeout=wait_s):
            return
        if began:
            once.release()
            return
        began.append(signum)
        try:
            end(signum)
        finally:
            os._exit(128 + signum)

    for signum in signums:
        signal.signal(signum, lambda signum, frame: at_once(signum, ENDING_WAIT_S))
    read, write = os.pipe()
    os.set_blocking(write, False)
    previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)

    def watch() -> None:
        with os.fdopen(read, "rb", buffering=0) as received:
            while (byte := received.read(1)) and byte != _WATCH_ENDS:
                if byte[0] in signums:
                    at_once(byte[0], -1)

    watcher = threading.Thread(target=watch, name="stop-signal-watcher", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        os.write(write, _WATCH_ENDS)  # not the pipe's end alone: a child forked without exec would hold it open
        os.close(write)
        watcher.join(timeout=1)
