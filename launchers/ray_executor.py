"""Horovod on Ray, through Horovod's own Ray integration (horovod.ray.RayExecutor).

Ray Train's HorovodTrainer would need the deprecated Train V1 (RAY_TRAIN_V2_ENABLED=0) process-wide, which
would also move the native backend off Train V2; RayExecutor works with the pinned Ray as it is.
"""

import contextlib
import logging
import os
from typing import Any

from contract import framework_env
from contract.config import TrainConfig
from contract.errors import RunFailed
from horovod_ddp.adapter import import_horovod
from horovod_ddp.worker import ray_worker
from cluster.ray_cluster import executor_hosts, in_thread
from launchers.ray_failures import RayRunOptions, user_error

log = logging.getLogger(__name__)
START_TIMEOUT_S = 60


def run(cfg: TrainConfig, options: RayRunOptions) -> dict[str, Any]:
    """Run `horovod_ddp.worker.ray_worker` on `cfg.workers` Ray workers; return rank 0's result.

    A failed attempt (a worker died, or lost its peer) is retried `max_failures` times from cfg.checkpoint_dir
    (see launchers.ray_failures.run_checkpoints), as Ray Train's FailureConfig does for native DDP.
    """
    import_horovod()  # a one-line error here, not an import failure inside every worker
    from horovod.ray import RayExecutor

    attempt = 0
    while True:
        settings = RayExecutor.create_settings(timeout_s=START_TIMEOUT_S)
        executor = RayExecutor(settings, cpus_per_worker=1, use_gpu=cfg.use_gpu,
                               **executor_hosts(cfg.workers, cfg.use_gpu, cfg.placement_strategy))
        try:
            start_bounded(executor, cfg.workers, max(START_TIMEOUT_S, cfg.stall_timeout_s) if cfg.stall_timeout_s
                          else None)
        except BaseException:
            executor.shutdown()  # what the start placed goes: the next run needs its CPUs
            raise
        try:
            exported = {name: os.environ[name] for name in framework_env.KEPT_ON_RAY if name in os.environ}
            outputs = executor.run(ray_worker, args=[cfg.to_dict(), attempt, exported])
            return next(doc for doc in outputs if doc)
        except Exception as error:  # noqa: BLE001 - any worker failure counts against max_failures
            attempt += 1
            # Bad settings or a diverged run fail the same way every time: no retry.
            if attempt > options.max_failures or not cfg.checkpoint_dir or user_error(error):
                with contextlib.suppress(AttributeError):
                    error.retries = attempt - 1  # how many times it was retried, for the run's one line
                raise
            log.warning("attempt %d failed (%s); resuming from %s", attempt, _last_line(error), cfg.checkpoint_dir)
        finally:
            executor.shutdown()


def start_bounded(executor: Any, workers: int, bound_s: float | None) -> None:
    """executor.start(), which places the workers and finds the network they share (Horovod's driver and task
    services, over the nodes' links), within `bound_s` (--stall-timeout-s, at least START_TIMEOUT_S; None: unbounded):
    a node that cannot be reached held it for minutes without a word, and the run then counted those minutes. Past
    it, a RunFailed (the caller shuts the executor down)."""
    if not in_thread(executor.start, "ray-executor-start", bound_s):
        raise RunFailed(f"Horovod's RayExecutor did not start its {workers} worker(s) within {bound_s:g} s "
                        "(--stall-timeout-s, at least its own 60 s): a node or its link did not answer; check that "
                        "every node reaches the others, then run again")


def _last_line(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[-1].strip()[:200] if lines else ''}"
