"""End a rank that stops making progress: a stalled or dead peer otherwise blocks every collective forever.

Each worker starts it before its process group exists (`init_process_group`, `hvd.init`) and keeps it until the
end, so one bound covers joining the group, training, evaluation and checkpoints alike.

Horovod's own stall shutdown (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS) did not fire here for a peer that never
submits its tensor (Horovod 0.28.1, Gloo), and gloo's DDP timeout defaults to 30 minutes, so both backends
share this bound instead. When it fires the process exits with STALL_EXIT_CODE; horovodrun, torchrun and
Ray then tear the job down.
"""

import logging
import os
import sys
import threading
import time
from typing import NoReturn

from runtime import heartbeats
from workload.tools import Tool

log = logging.getLogger(__name__)
STALL_EXIT_CODE = 3


class Watchdog(Tool):
    def __init__(self, timeout_s: float, output_dir: str = "", report: bool = False,
                 phase: str = "joining the process group") -> None:
        """`output_dir`: where the ranks show they are alive (runtime/heartbeats.py); `report`: leave the stall's
        line there for the driver (Ray)."""
        self.timeout_s = timeout_s
        self.output_dir, self.report = output_dir, report
        self.phase = phase
        self.rank: int | None = None
        self.world_size = 1
        self._made = False  # the heartbeat folder, once: after a stall removed it, no beat brings it back
        self._seen: set[int] = set()  # the ranks whose file this rank has seen: a file never seen is not a death
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._naming = threading.Lock()  # one stall line per rank, from this thread or the main one (named_stall)
        self._named = ""
        self._thread = threading.Thread(target=self._watch, name="stall-watchdog", daemon=True)

    def __enter__(self) -> "Watchdog":
        if self.timeout_s > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._made:
            heartbeats.gone(self.output_dir, self.rank)

    def joined(self, rank: int, world_size: int) -> None:
        """The group has formed: this rank's number, so that its heartbeat and its stall line can name it."""
        self.rank, self.world_size = rank, world_size
        self._beat()  # its file now where the folder exists, not at the watcher's next beat

    def kick(self, phase: str = "training") -> None:
        """Progress was made (the group formed, a step, an evaluation or a checkpoint finished); `phase` is next."""
        self._last = time.monotonic()
        self.phase = phase

    def after_step(self, epoch: int, step: int, steps: int) -> None:
        self.kick()
        if step <= 2 and len(self._seen) < self.world_size:
            # Rank 0 makes the output folder before the first step: every peer's file is there by the second step's
            # collective, not only at the thread's next beat, so a SIGTERM from then on is never taken for start-up.
            # Not on later steps: peers on another host without a shared folder are never seen.
            self._beat()

    def before_eval(self, epoch: int) -> None:
        self.kick("evaluating")

    def before_checkpoint(self, epoch: int) -> None:
        self.kick("saving the checkpoint")

    def epoch_done(self, epoch: int) -> None:
        self.kick()

    def fit_done(self) -> None:
        self.kick("finishing, after its last epoch (the final checks and the averaging timed alone)")

    def _watch(self) -> None:
        while not self._stop.wait(min(1.0, self.timeout_s / 4)):
            self._beat()
            # The group's own timeout (Ray sets it to this bound) can end the collective in the same instant: the main
            # thread's named_stall and this thread's line must not undo each other's report, nor exit half-way.
            with self._naming:
                if time.monotonic() - self._last > self.timeout_s:
                    self._fire()

    def _fire(self) -> NoReturn:
        """End this process with the stall's line, left for the driver under Ray; silently where named_stall has said
        it already (a rank whose leaving then hung for a whole bound)."""
        if not self._named:
            line = self._line(self._quiet())
            if self.output_dir:
                heartbeats.leave(self.output_dir, line if self.report else "")
            print(f"error: {line}; ending this rank", file=sys.stderr, flush=True)
        os._exit(STALL_EXIT_CODE)

    def named_stall(self) -> str:
        """After a collective failed: the stall line if a peer has gone quiet (the group's own timeout, which Ray sets
        to this bound, ran out first), left for the driver under Ray; '' when no peer is known to be quiet. The
        watchdog then allows the rank a whole bound to leave with that line."""
        with self._naming:
            if not (quiet := self._quiet()):
                return ""
            self._named = self._line(quiet)
            heartbeats.leave(self.output_dir, self._named if self.report else "")
            self.kick("leaving after the stall")
            return self._named

    def signalled_with_peers(self) -> bool | None:
        """After SIGTERM: whether every peer is still running or was signalled too (a launcher passing the user's
        signal on) rather than one having ended first (a launcher ending the others after a death); None when
        this rank or every peer has not shown it is alive yet (start-up, up to the second step: rank 0 makes the
        output folder, and with it the heartbeat folder, as training starts). The last rank signalled removes the
        heartbeat folder."""
        if not (self._known() and self._made):
            return None
        # Before marking: the last signalled peer removes the folder only once this rank has marked itself.
        seen = self._seen | heartbeats.present(self.output_dir, self.world_size)
        heartbeats.mark_signalled(self.output_dir, self.rank)
        # No peer's file seen yet (or ever: another host without a shared folder): nothing to tell the two apart.
        first = heartbeats.ended_first(self.output_dir, self.rank, self.world_size, seen) \
            if seen - {self.rank} else None
        if first:
            return False
        if heartbeats.every_rank_signalled(self.output_dir, self.world_size):
            heartbeats.leave(self.output_dir)
        return None if first is None else True

    def left_on_a_signal(self) -> bool:
        """After a collective failed for a lost peer: whether the peers that left had been signalled and none had
        ended first (horovodrun passes SIGTERM on one rank at a time, and the first to go fails the others'
        collectives before theirs reaches them); this rank then counts as signalled too."""
        if not (self._known() and self._made and heartbeats.any_signalled(self.output_dir, self.world_size)):
            return False
        return self.signalled_with_peers() is True

    def _beat(self) -> None:
        if self._known():
            self._made = heartbeats.beat(self.output_dir, self.rank, make=not self._made) or self._made
            if len(self._seen) < self.world_size:
                self._seen |= heartbeats.present(self.output_dir, self.world_size)

    def _known(self) -> bool:
        """Whether this rank has a number and a folder to show it is alive in."""
        return self.rank is not None and bool(self.output_dir)

    def _quiet(self) -> dict[int, float]:
        return heartbeats.quiet_peers(self.output_dir, self.rank, self.world_size) if self._known() else {}

    def _line(self, quiet: dict[int, float]) -> str:
        return (f"{'this rank' if self.rank is None else f'rank {self.rank}'} made no progress for "
                f"{time.monotonic() - self._last:.0f} s while {self.phase} (--stall-timeout-s {self.timeout_s:g}); "
                f"{heartbeats.who_stalled(quiet)}")
