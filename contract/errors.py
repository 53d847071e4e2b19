"""The errors every entry point turns into one line (runtime/cli.py), and the rank that prints it.

Kept free of torch and Ray, so that `--help` and a refused flag answer at once: those are imported only when a
run starts.
"""

import os


class DataError(ValueError):
    """A data problem the user can fix; CLIs print it as one line and exit 2."""


class Diverged(RuntimeError):
    """The loss became NaN or infinite: the run stops rather than report the figures of a broken model."""


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
