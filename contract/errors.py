"""The errors every entry point turns into one line (runtime/cli.py), and the rank that prints it.

Kept free of torch and Ray, so that `--help` and a refused flag answer at once: those are imported only when a
run starts.
"""

import math
import os
from collections.abc import Sequence

DIVERGED = "training diverged"
"""How a diverged run's line begins, under every launcher: the comparison names those runs by it."""
GROWTH = 1000.0
"""A step loss above this many times the first step's has diverged, finite or not: a run that trains does not climb
three orders of magnitude above where it started (at --lr 50 the losses went from 2.35 to 2.7e16, all finite)."""


def diverged(losses: Sequence[float]) -> str | None:
    """Why step `losses` (the run's first step first) are a diverged run's, in words; None where they are not."""
    if bad := next((loss for loss in losses if not math.isfinite(loss)), None):
        return f"the loss became {bad}"
    if losses and losses[0] > 0 and (top := max(losses)) > GROWTH * losses[0]:
        return f"the loss grew over {GROWTH:g}x, from {losses[0]:.4g} at the first step to {top:.4g}"
    return None


class DataError(ValueError):
    """A data problem the user can fix; CLIs print it as one line and exit 2."""


class Diverged(RuntimeError):
    """The loss became NaN or infinite, or grew past GROWTH x the first step's: the run stops rather than report the
    figures of a broken model."""


class PeerLost(RuntimeError):
    """A collective failed because another rank died or left: this rank ends too, in one line saying how to resume."""


class RunFailed(RuntimeError):
    """The run could not go on for a reason outside its settings (a full disk, a local Ray that did not start): one
    line, exit 1."""


SPAWNED_ENV = "NATIVE_DDP_SPAWNED"
"""Set by native_ddp.spawn in each rank it starts with torch.multiprocessing.spawn."""


def launcher_rank() -> int:
    """This process's rank as torchrun or mp.spawn (RANK) or horovodrun (HOROVOD_RANK) set it, before any process
    group.

    Only for printing a refusal once rather than once per rank; everything else takes the rank from DistContext.
    """
    # RANK alone may be any job system's; torchrun also sets TORCHELASTIC_RUN_ID, native_ddp.spawn SPAWNED_ENV.
    name = "RANK" if "TORCHELASTIC_RUN_ID" in os.environ or SPAWNED_ENV in os.environ else "HOROVOD_RANK"
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else 0


def torchrun_restarts_left() -> int:
    """How many more times torchrun (--max-restarts) will start this rank's group after it fails; 0 elsewhere."""
    return (int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
            - int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0))
