"""A run on Ray, as the launchers ask for it and as it fails: the options (--name, --storage-path, --max-failures),
the folder it checkpoints to, and a Ray failure turned into the one line that says what failed and how to go on."""

import re
from dataclasses import dataclass, replace
from pathlib import Path

from contract.config import ConfigError, TrainConfig, require_path
from contract.errors import PeerLost
from runtime import cli


@dataclass(frozen=True, slots=True)
class RayRunOptions:
    name: str | None = None
    """Run name; rerunning with the same name and storage path resumes from its last checkpoint."""
    storage_path: str | None = None
    """Where Ray keeps run state and checkpoints (Ray's default: ~/ray_results)."""
    max_failures: int = 0
    """Restarts from the last checkpoint after a worker failure (Ray's FailureConfig)."""

    def __post_init__(self) -> None:
        if self.storage_path is not None:
            require_path(self.storage_path, "--storage-path")
        if self.max_failures < 0:
            raise ConfigError(f"--max-failures must be >= 0, got {self.max_failures}")


RETRY_CHECKPOINTS = "retry-checkpoints"


def run_checkpoints(backend: str, cfg: TrainConfig, options: RayRunOptions) -> tuple[TrainConfig, bool]:
    """`cfg` with the folder this run on Ray checkpoints to after every epoch, and whether that folder is this
    run's alone (made for --max-failures, removed when the run succeeds).

    --checkpoint-dir wins. With --name: <storage-path>/<name>/<backend>-checkpoints, so rerunning the name resumes.
    With only --max-failures: <output-dir>/retry-checkpoints. Native DDP also reports Ray Train checkpoints, and
    resumes from whichever is newer: Ray registers a reported checkpoint only when its controller next polls the
    workers, so a worker killed just after an epoch would otherwise lose that epoch.
    """
    if cfg.checkpoint_dir:
        return cfg, False
    if options.name:
        storage = Path(options.storage_path or Path.home() / "ray_results").expanduser().resolve()
        return replace(cfg, checkpoint_dir=str(storage / options.name / f"{backend}-checkpoints")), False
    if options.max_failures:
        return replace(cfg, checkpoint_dir=str(Path(cfg.output_dir) / RETRY_CHECKPOINTS)), True
    return cfg, False


def user_error(error: BaseException) -> BaseException | None:
    """The user error (bad settings, a diverged run) behind a Ray failure, if one is: Ray wraps a worker's
    exception in RayTaskError (Horovod's RayExecutor) or WorkerGroupError (Ray Train), with a traceback we
    would otherwise print instead of the one line that says what to fix."""
    # A lost peer is not the user's to fix: a retry (--max-failures) can get past it.
    user_errors = tuple(kind for kind in cli.EXIT_CODES if kind is not PeerLost)
    seen, todo = set(), [error]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        cause = getattr(current, "cause", None)  # RayTaskError keeps the original exception here
        if isinstance(current, user_errors) and not hasattr(current, "cause"):
            return current
        todo += [cause, current.__cause__, current.__context__, getattr(current, "controller_failure", None),
                 *getattr(current, "worker_failures", {}).values()]
    return None


def worker_failure(error: BaseException, options: RayRunOptions, resume_hint: str,
                   oom: str | None = None) -> BaseException | None:
    """One line for a run that failed because a Ray worker, Ray Train's controller or the Ray node died, or a worker
    lost its peer; None for other errors. `oom`: the kernel's out-of-memory killer ended a process meanwhile
    (runtime/memory.py), which is then named as the death's cause.

    Ray raises these with the dead actor's whole story (several tracebacks); what the user needs is what died and how
    to go on. A worker that only lost its peer is named only when no worker died; where Ray cannot tell which worker
    went first, every failed rank is named.
    """
    from ray.exceptions import RayError

    if not isinstance(error, (RayError, _training_failed(), PeerLost)):
        return None
    failures = dict(getattr(error, "worker_failures", None) or {None: error})
    died = {rank: cause for rank, cause in failures.items() if not isinstance(cause, PeerLost)} or failures
    rank, cause = min(died.items(), key=lambda item: -1 if item[0] is None else item[0])
    who, what = _who_died(cause, rank)
    if oom and what.startswith(DIED.split(" (")[0]):
        what = f"died: {oom}"
    if len(ranks := sorted(r for r in died if r is not None)) > 1:
        # A worker that loses its peer ends its process too (distributed.leave), and Ray's health check, every 2 s,
        # can then find both gone with the same error: none is singled out.
        who = f"worker ranks {', '.join(map(str, ranks))}"
        what += (": one died and a worker that loses its peer ends too" if oom else
                 ": one died (killed, out of memory, or crashed) and a worker that loses its peer ends too")
    retried = getattr(error, "retries", options.max_failures if isinstance(error, _training_failed()) else 0)
    tried = f" after {retried} retr{'y' if retried == 1 else 'ies'}" if retried else ""
    return PeerLost(f"{who} {what}{tried}; {resume_hint}")


def _training_failed() -> type:
    """Ray Train's error once its FailureConfig's retries are spent."""
    try:
        from ray.train.v2.api.exceptions import TrainingFailedError
    except ImportError:  # Train V1
        from ray.train import TrainingFailedError
    return TrainingFailedError


DIED = "died (its process exited: killed, out of memory, or crashed)"


def _who_died(cause: BaseException, rank: int | None) -> tuple[str, str]:
    """What died, from Ray's error: Ray Train's controller (which no FailureConfig restarts), the Ray node (its raylet:
    every actor on it unreachable), or a worker."""
    from ray.exceptions import ActorUnavailableError, OutOfMemoryError, RayActorError

    text, worker = str(cause), "a Ray worker" if rank is None else f"worker rank {rank}"
    if isinstance(cause, OutOfMemoryError):  # Ray's memory monitor ends a worker before the kernel would
        return worker, ("was ended by Ray's memory monitor: memory ran out on its node; lower --batch-size, "
                        "--image-size or the model, or give the node more memory")
    if isinstance(cause, ActorUnavailableError) or "node has died" in text or "raylet" in text.lower():
        return "the Ray node this run used", "went away (its raylet exited: killed, out of memory, or crashed)"
    if isinstance(cause, RayActorError) and re.search(r"class_name: TrainController\b", text):
        return "Ray Train's controller", f"{DIED}; Ray Train restarts its workers, never its controller"
    if isinstance(cause, RayActorError):
        return worker, DIED
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return worker, f"failed ({type(cause).__name__}: {(lines[0] if lines else '')[:160]})"
