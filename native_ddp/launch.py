"""Native DDP on Ray: Ray Train's TorchTrainer creates the process group and places the workers."""

import logging
from pathlib import Path
from typing import Any

from ray_jobs.cluster import RayRunOptions
from workload import results
from workload.config import TrainConfig

log = logging.getLogger(__name__)


def on_ray(cfg: TrainConfig, options: RayRunOptions) -> dict[str, Any]:
    """Run `native_ddp.train.train_func` on `cfg.workers` Ray workers; return rank 0's results.json."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from native_ddp.train import train_func

    trainer = TorchTrainer(
        train_func,
        train_loop_config=cfg.to_dict(),
        # DDP: Ray picks gloo on CPU and NCCL on GPU, and gives each worker its device.
        scaling_config=ScalingConfig(num_workers=cfg.workers, use_gpu=cfg.use_gpu),
        run_config=RunConfig(
            name=options.name,
            storage_path=options.storage_path,
            failure_config=FailureConfig(max_failures=options.max_failures),
        ),
    )
    trainer.fit()
    return results.read(Path(cfg.output_dir) / results.FILENAME)
