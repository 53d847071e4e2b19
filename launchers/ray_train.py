"""Native DDP on Ray: Ray Train's TorchTrainer creates the process group and places the workers."""

import logging
import shutil
from pathlib import Path
from typing import Any

from contract import results
from contract.config import TrainConfig
from launchers.ray_failures import RayRunOptions

log = logging.getLogger(__name__)


def run(cfg: TrainConfig, options: RayRunOptions) -> dict[str, Any]:
    """Run `native_ddp.worker.train_func` on `cfg.workers` Ray workers; return rank 0's results.json."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from native_ddp.worker import train_func

    # Ray's own health-check interval (RAY_TRAIN_HEALTH_CHECK_INTERVAL_S) is kept on purpose (docs/measuring.md).
    # Rank 0 counts the worker group's starts here (results.json's `restarts`); removed when the run ends.
    starts_file = Path(cfg.output_dir) / ".worker-group-starts"
    starts_file.parent.mkdir(parents=True, exist_ok=True)
    starts_file.unlink(missing_ok=True)
    # Ray Train keeps a folder per run (state, reported checkpoints), by default ~/ray_results/ray_train_run-<time>.
    # A run nobody can resume (no --name) keeps it in its own output folder while it runs, and removes it after.
    scratch = None if options.name or options.storage_path else Path(cfg.output_dir) / ".ray-train"
    trainer = TorchTrainer(
        train_func,
        # Ray checkpoints cost a write and an upload every epoch; they are kept only where a rerun (--name) or a
        # retry (--max-failures) can resume from them.
        train_loop_config={"config": cfg.to_dict(), "ray_checkpoints": bool(options.name or options.max_failures),
                           "starts_file": str(starts_file)},
        # DDP: Ray picks gloo on CPU and NCCL on GPU, and gives each worker its device.
        scaling_config=ScalingConfig(num_workers=cfg.workers, use_gpu=cfg.use_gpu,
                                     placement_strategy=cfg.placement_strategy),
        # Ray forms the group before train_func (and its watchdog) starts, with a 30-minute default timeout: the
        # stall bound covers joining here as under torchrun and horovodrun.
        torch_config=TorchConfig(timeout_s=max(1, round(cfg.stall_timeout_s))),
        run_config=RunConfig(
            name=options.name,
            storage_path=str(scratch) if scratch else options.storage_path,
            failure_config=FailureConfig(max_failures=options.max_failures),
        ),
    )
    # Ray Train's own Ctrl-C handler aborts the run gracefully and exits 1 with no line, and stays installed after
    # fit(): Ctrl-C is the command's to handle (runtime/cli.py), as in every other launcher.
    trainer._register_sigint_handler = lambda controller: None
    try:
        trainer.fit()
    finally:
        starts_file.unlink(missing_ok=True)
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return results.read(Path(cfg.output_dir) / results.FILENAME)
