"""One backend on a Ray cluster, from the driver: check everything, resolve the dataset, join Ray, launch, and turn a
failure into one line. Native DDP goes through Ray Train (launchers/ray_train.py), Horovod through RayExecutor
(launchers/ray_executor.py).
"""

import logging
import shutil
from pathlib import Path
from typing import Any

from cluster import worker_output
from cluster.ray_address import check_address
from cluster.ray_cluster import check_local_capacity, connect, executor_hosts, require
from contract.config import ConfigError, TrainConfig
from contract.errors import PeerLost
from contract.options import check as check_options
from launchers.ray_failures import RayRunOptions, run_checkpoints, user_error, worker_failure
from runtime import gpus, heartbeats, memory, preflight

log = logging.getLogger(__name__)


def launch(backend: str, cfg: TrainConfig, options: RayRunOptions) -> dict[str, Any]:
    """Train on the Ray cluster this driver has joined; rank 0's result, once every rank's last line is printed. A
    failure is raised as its one line (what failed, and how to go on), for every driver (ray_jobs.train and compare's
    runs on Ray alike): Ray's own error carries every worker's story, the ranks' lines only in ray.log."""
    # Imported here: Horovod's launcher imports its worker, and torch with it.
    if backend == "native":
        from launchers.ray_train import run as train
    else:
        from launchers.ray_executor import run as train
    oom_before = memory.oom_kills()
    try:
        with worker_output.one_run(cfg.workers):
            doc = train(cfg, options)
        heartbeats.take(cfg.output_dir)  # a stall that a retry (--max-failures) got past leaves its line
        return doc
    except Exception as error:
        if (cause := user_error(error)) is not None:
            raise cause from None
        if stalled := heartbeats.take(cfg.output_dir):  # Ray names the rank that ended itself: the healthy one
            raise PeerLost(f"{stalled}; {_resume_hint(backend, cfg, options)}") from None
        if (failure := worker_failure(error, options, _resume_hint(backend, cfg, options),
                                      memory.killed_since(oom_before))) is not None:
            raise failure from None
        raise


def run(backend: str, cfg: TrainConfig, options: RayRunOptions = RayRunOptions()) -> dict[str, Any]:
    """Check everything that can be checked, resolve the dataset, join Ray, train; returns rank 0's result."""
    from workload import data

    check_options(cfg, backend)
    cfg = cfg.with_absolute_paths()
    preflight.check_config(cfg, horovod=backend == "horovod")
    from workload import checkpoint  # torch: after the checks, so that a refusal answers at once
    preflight.check_name(options.name)
    if options.storage_path:
        preflight.writable_dir(options.storage_path, "--storage-path")
    cfg, retry_only = run_checkpoints(backend, cfg, options)
    # A retry folder left in this output folder by an earlier run is not this run's: nobody asked to resume it.
    resume = None if retry_only else _resume_state(backend, cfg, options)
    address = check_address()
    check_local_capacity(cfg.workers, cfg.use_gpu)
    if cfg.use_gpu and backend == "horovod":
        gpus.check_horovod_nccl()
    cfg = data.resolve(cfg)
    if resume:
        state, where = resume
        checkpoint.check_resume(state, cfg, where, backend, "ray")  # again, now that `auto` has become a dataset
    connect(Path(cfg.output_dir) / worker_output.LOG, address)
    require(cfg.workers, cfg.use_gpu)
    if backend == "horovod":
        executor_hosts(cfg.workers, cfg.use_gpu, cfg.placement_strategy)  # SPREAD's refusal before any worker starts
    if retry_only:
        shutil.rmtree(cfg.checkpoint_dir, ignore_errors=True)
    doc = launch(backend, cfg, options)
    if retry_only:
        shutil.rmtree(cfg.checkpoint_dir, ignore_errors=True)  # the run succeeded: nothing left to resume
    return doc


def _resume_hint(backend: str, cfg: TrainConfig, options: RayRunOptions) -> str:
    """How to carry on after a worker failure, given where this run checkpointed."""
    retry = "" if options.max_failures else "; add --max-failures N to retry automatically"
    if options.name:
        return f"rerun with the same --name {options.name} to resume after the last finished epoch{retry}"
    if cfg.checkpoint_dir:
        return f"rerun with --checkpoint-dir {cfg.checkpoint_dir} to resume after the last finished epoch{retry}"
    return "nothing can resume it: pass --name (or --checkpoint-dir) and --max-failures N to retry from checkpoints"


def _resume_state(backend: str, cfg: TrainConfig, options: RayRunOptions) -> tuple[dict[str, Any], str] | None:
    """The checkpoint a run would resume from, checked against `cfg` here rather than inside every worker.

    Native DDP takes the newer of Ray Train's latest checkpoint of run --name and cfg.checkpoint_dir, as its
    workers will.
    """
    from workload import checkpoint
    from workload.run import resume_state

    found = []
    if backend == "native" and options.name:
        run_dir = Path(options.storage_path or "~/ray_results").expanduser() / options.name
        if run_dir.is_dir():
            from ray.train import Result

            try:
                latest = Result.from_path(run_dir).checkpoint
            except RuntimeError:  # a folder without Ray Train's checkpoint record: a fresh start, as Ray makes it
                latest = None
            if latest:
                state = checkpoint.load(latest.path)
                if state is None:
                    raise ConfigError(f"{run_dir} holds another program's Ray Train checkpoints; choose another "
                                      "--name (or --storage-path)")
                checkpoint.check_resume(state, cfg, latest.path, backend, "ray")
                found.append((state, latest.path))
    state = resume_state(cfg, backend, "ray")
    if state:
        found.append((state, cfg.checkpoint_dir))
    return max(found, key=lambda pair: pair[0]["epoch"], default=None)
