"""Train the shared MNIST ConvNet with one backend on a Ray cluster.

    ray start --head
    ray job submit --working-dir . -- python -m ray_jobs.train --backend native --workers 2

Inside a Ray job (ray job submit) it joins the job's cluster; run directly it joins RAY_ADDRESS if set, else a
cluster started with ray start on this machine, else starts a Ray of its own for the run.
"""

import argparse
import logging
import shutil
from pathlib import Path
from typing import Any

from ray_jobs import worker_output
from ray_jobs.cluster import (RayRunOptions, check_address, connect, require, run_checkpoints, user_error,
                              worker_failure)
from workload import cli, preflight, summary
from workload.config import ConfigError, TrainConfig
from workload.options import check as check_options

# torch and Ray are imported where a run needs them, not here: `--help` and a refused flag answer at once.

log = logging.getLogger(__name__)


def _native(cfg: TrainConfig, options: RayRunOptions) -> dict[str, Any]:
    from native_ddp.launch import on_ray

    with worker_output.one_run(cfg.workers):
        return on_ray(cfg, options)


def _horovod(cfg: TrainConfig, options: RayRunOptions) -> dict[str, Any]:
    from horovod_ddp.launch import on_ray

    with worker_output.one_run(cfg.workers):
        return on_ray(cfg, options)


BACKENDS = {"native": _native, "horovod": _horovod}


def run(backend: str, cfg: TrainConfig, options: RayRunOptions = RayRunOptions()) -> dict[str, Any]:
    """Check everything that can be checked, resolve the dataset, join Ray, train; returns rank 0's result."""
    from workload import checkpoint, data

    check_options(cfg, backend)
    cfg = cfg.with_absolute_paths()
    preflight.check_config(cfg)
    preflight.check_name(options.name)
    if options.storage_path:
        preflight.writable_dir(options.storage_path, "--storage-path")
    cfg, retry_only = run_checkpoints(backend, cfg, options)
    # A retry folder left in this output folder by an earlier run is not this run's: nobody asked to resume it.
    resume = None if retry_only else _resume_state(backend, cfg, options)
    check_address()
    cfg = data.resolve(cfg)
    if resume:
        state, where = resume
        checkpoint.check_resume(state, cfg, where, backend, "ray")  # again, now that `auto` has become a dataset
    connect(Path(cfg.output_dir) / worker_output.LOG)
    require(cfg.workers, cfg.use_gpu)
    if retry_only:
        shutil.rmtree(cfg.checkpoint_dir, ignore_errors=True)
    try:
        doc = BACKENDS[backend](cfg, options)
        if retry_only:
            shutil.rmtree(cfg.checkpoint_dir, ignore_errors=True)  # the run succeeded: nothing left to resume
        return doc
    except Exception as error:
        if (cause := user_error(error)) is not None:
            raise cause from None
        if (failure := worker_failure(error, options, _resume_hint(backend, cfg, options))) is not None:
            raise failure from None
        raise


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


def main() -> int:
    parser = cli.Parser(description=__doc__, prog="python -m ray_jobs.train",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=sorted(BACKENDS), default="native", help="native DDP or Horovod")
    cli.add_config_flags(parser)
    parser.add_argument("--name", help="run name; the same name and storage path resume from the last checkpoint")
    parser.add_argument("--storage-path", help="where Ray keeps checkpoints (default: ~/ray_results)")
    parser.add_argument("--max-failures", type=int, default=0, help="restarts after a worker failure (default: 0)")
    args = parser.parse_args()
    from workload import phases

    start = phases.process_started()  # end to end, as the user waits: the process's start, imports included
    cfg = cli.config_from_args(args)
    options = RayRunOptions(name=args.name, storage_path=args.storage_path, max_failures=args.max_failures)
    doc = run(args.backend, cfg, options)
    doc = phases.finish(doc["config"]["output_dir"], start)
    summary.announce(doc)
    return 0


if __name__ == "__main__":
    cli.run(main)
