"""The elastic modes' drivers, run inside node 0 of the simulated cluster (`python -m launchers.elastic MODE MIN MAX
CONFIG_JSON`); the run's timeline and state go into the config's output_dir.

- ray-native: Ray Train V2's TorchTrainer with ScalingConfig(num_workers=(min, max)) and FailureConfig;
- ray-horovod: Horovod's RayExecutor(min_workers, max_workers) running hvd.elastic.run;
- torchrun needs no driver: one agent per node (experiments/elastic/node_loss.py).
"""

import json
import os
import sys
from pathlib import Path

from contract.config import TrainConfig

MODES = ("ray-native", "ray-horovod", "torchrun")
RESIZE_MONITOR_S = 5
"""Ray Train's check for a larger world (default 60 s): how soon it notices that a node came back."""
COOLDOWN_S = [10, 30]
"""Horovod's cooldown for a failed host (min, max s); without one a host that failed stays blacklisted for good."""
MAX_FAILURES = 5
RAY_ENVIRONMENT = {
    # The controller decides on the full world again before the GCS has marked the lost node dead (~20 s); with the
    # default 60 s it waits for that node instead of going on with the rest.
    "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "15",
}


def _ray_init() -> None:
    import ray
    # Ray's workers start from the raylet's environment, not the driver's: the run's settings go with the job.
    names = ("OMP_NUM_THREADS", "PYTHONPATH")
    ray.init(runtime_env={"env_vars": {k: os.environ[k] for k in names if k in os.environ}})


def ray_native(cfg: TrainConfig, min_workers: int, max_workers: int) -> int:
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from native_ddp.elastic import ray_train_loop
    _ray_init()
    trainer = TorchTrainer(
        ray_train_loop, train_loop_config=cfg.to_dict(),
        scaling_config=ScalingConfig(num_workers=(min_workers, max_workers), use_gpu=False,
                                     elastic_resize_monitor_interval_s=RESIZE_MONITOR_S),
        run_config=RunConfig(name="elastic", storage_path=str(Path(cfg.output_dir) / "ray"),
                             failure_config=FailureConfig(max_failures=MAX_FAILURES)))
    return 0 if trainer.fit().error is None else 1


def ray_horovod(cfg: TrainConfig, min_workers: int, max_workers: int) -> int:
    from horovod.ray import RayExecutor

    from horovod_ddp.elastic import horovod_fn
    _ray_init()
    settings = RayExecutor.create_settings(timeout_s=30, nics={os.environ["HOROVOD_GLOO_IFACE"]})
    executor = RayExecutor(settings, min_workers=min_workers, max_workers=max_workers, cpus_per_worker=1,
                           use_gpu=False, override_discovery=True, cooldown_range=COOLDOWN_S)
    executor.start()
    try:
        executor.run(horovod_fn, args=[cfg.to_dict()])
    finally:
        executor.shutdown()
    return 0


if __name__ == "__main__":
    mode, low, high, values = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
    sys.exit((ray_native if mode == "ray-native" else ray_horovod)(TrainConfig.from_dict(values), low, high))
