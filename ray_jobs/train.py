"""Train the shared MNIST ConvNet with one backend on a Ray cluster.

    ray start --head
    ray job submit --working-dir . -- python -m ray_jobs.train --backend native --workers 2

Inside `ray job submit` it joins the job's cluster; run directly it joins RAY_ADDRESS if set, else a
`ray start` cluster on this machine, else starts a local Ray.
"""

import argparse
import logging
from pathlib import Path
from typing import Any

from ray_jobs.cluster import RayRunOptions, connect, require
from workload import cli, data, results
from workload.config import TrainConfig, check_backend_options
from workload.summary import format_result

log = logging.getLogger(__name__)


def _native(cfg: TrainConfig, options: RayRunOptions) -> dict[str, Any]:
    from native_ddp.launch import on_ray

    return on_ray(cfg, options)


def _horovod(cfg: TrainConfig, options: RayRunOptions) -> dict[str, Any]:
    from horovod_ddp.launch import on_ray

    return on_ray(cfg, options)


BACKENDS = {"native": _native, "horovod": _horovod}


def run(backend: str, cfg: TrainConfig, options: RayRunOptions = RayRunOptions()) -> dict[str, Any]:
    """Resolve the dataset, join Ray, check it can hold the workers, train; returns rank 0's result."""
    check_backend_options(cfg, backend)
    cfg = data.resolve(cfg.with_absolute_paths())
    connect()
    require(cfg.workers, cfg.use_gpu)
    return BACKENDS[backend](cfg, options)


def main() -> int:
    parser = cli.Parser(description=__doc__, prog="python -m ray_jobs.train",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=sorted(BACKENDS), default="native", help="native DDP or Horovod")
    cli.add_config_flags(parser)
    parser.add_argument("--name", help="run name; the same name and storage path resume from the last checkpoint")
    parser.add_argument("--storage-path", help="where Ray keeps checkpoints (default: ~/ray_results)")
    parser.add_argument("--max-failures", type=int, default=0, help="restarts after a worker failure (default: 0)")
    args = parser.parse_args()
    cfg = cli.config_from_args(args)
    options = RayRunOptions(name=args.name, storage_path=args.storage_path, max_failures=args.max_failures)
    doc = run(args.backend, cfg, options)
    log.info("%s\nresults: %s", format_result(doc), Path(doc["config"]["output_dir"]) / results.FILENAME)
    return 0


if __name__ == "__main__":
    cli.run(main)
