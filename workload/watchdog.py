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

from workload.tools import Tool

log = logging.getLogger(__name__)
STALL_EXIT_CODE = 3


class Watchdog(Tool):
    def __init__(self, timeout_s: float, phase: str = "joining the process group") -> None:
        self.timeout_s = timeout_s
        self.phase = phase
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="stall-watchdog", daemon=True)

    def __enter__(self) -> "Watchdog":
        if self.timeout_s > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def kick(self, phase: str = "training") -> None:
        """Progress was made (the group formed, a step, an evaluation or a checkpoint finished); `phase` is next."""
        self._last = time.monotonic()
        self.phase = phase

    def after_step(self, epoch: int, step: int, steps: int) -> None:
        self.kick()

    def before_eval(self, epoch: int) -> None:
        self.kick("evaluating")

    def before_checkpoint(self, epoch: int) -> None:
        self.kick("saving the checkpoint")

    def epoch_done(self, epoch: int) -> None:
        self.kick()

    def _watch(self) -> None:
        while not self._stop.wait(min(1.0, self.timeout_s / 4)):
            idle = time.monotonic() - self._last
            if idle > self.timeout_s:
                message = (f"error: no progress for {idle:.0f} s while {self.phase} (--stall-timeout-s "
                           f"{self.timeout_s:g}); a peer has stalled or died, ending this rank")
                print(message, file=sys.stderr, flush=True)
                os._exit(STALL_EXIT_CODE)
