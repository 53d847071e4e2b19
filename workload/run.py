"""Build the pieces every backend shares, run the loop, write the result: adapters call these, in this order."""

import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import torch

from contract import options, phases, results
from contract.config import DATASETS, ConfigError, TrainConfig
from contract.results import History
from runtime import launch, space
from workload import checkpoint, data, host_load, model
from workload.distributed import DistContext
from workload.tensorboard_scalars import Scalars
from workload.trainer import Trainer

T = TypeVar("T")


def on_main(ctx: DistContext, work: Callable[[], T]) -> T | None:
    """`work()` on rank 0 alone, its result there and None elsewhere.

    A refusal on rank 0 (a user error) ends every rank, not only rank 0, so no peer waits forever in the
    next collective. The all-reduce is also a barrier: no rank goes on before rank 0 is done.
    """
    result, refusal = None, None
    failed = torch.zeros(1)
    if ctx.is_main:
        try:
            result = work()
        except (ConfigError, data.DataError) as error:
            refusal, failed[0] = error, 1
    if float(ctx.all_reduce(failed, "sum")[0]):
        raise refusal or ConfigError("rank 0 refused the settings; its error says why")  # only rank 0 prints
    return result


def resolve_dataset(ctx: DistContext, cfg: TrainConfig) -> TrainConfig:
    """Rank 0 picks the dataset (downloading or generating files) first; the others then take its choice.

    For launchers whose ranks start on their own (torchrun, horovodrun); Ray's driver and native_ddp.spawn resolve
    it before the ranks start.
    """
    resolved = on_main(ctx, lambda: data.resolve(cfg))
    choice = torch.tensor([float(DATASETS.index(resolved.dataset)) if resolved else 0.0])  # one dtype on every rank
    choice = ctx.all_reduce(choice, "sum")
    if resolved:
        return resolved
    return data.resolve(replace(cfg, dataset=DATASETS[int(choice[0])]))


def resume_state(cfg: TrainConfig, backend: str, launcher: str) -> dict[str, Any] | None:
    """The checkpoint in cfg.checkpoint_dir once it is known to carry on this run, or None when there is none."""
    if not cfg.checkpoint_dir:
        return None
    state = checkpoint.load(cfg.checkpoint_dir)
    if state:
        checkpoint.check_resume(state, cfg, cfg.checkpoint_dir, backend, launcher)
    return state


GPU_MATH_HOW = ("torch.use_deterministic_algorithms(True, warn_only=True): deterministic kernels wherever torch has "
                "one (an op without one warns and runs anyway), cuDNN's deterministic convolutions without "
                "benchmarking, CUBLAS_WORKSPACE_CONFIG=:4096:8 for cuBLAS; TF32 off for float32 matrix products and "
                "convolutions")


def deterministic_gpu() -> None:
    """On a GPU, the same kernels in every arm and the reference, each computing alike run after run, and float32 as
    float32 (TF32 off): parity then compares the backends, not kernel choices."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before cuBLAS's first handle: the model's first op
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = False  # not for determinism: a fill of every torch.empty
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False


def gpu_math(device: torch.device) -> dict[str, Any] | None:
    """What deterministic_gpu set, read back for results.json; None off a GPU."""
    if device.type != "cuda":
        return None
    return {"deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "cublas_workspace_config": os.environ["CUBLAS_WORKSPACE_CONFIG"],
            "tf32": torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32, "how": GPU_MATH_HOW}


def build_model(cfg: TrainConfig, device: torch.device) -> torch.nn.Module:
    if device.type == "cuda":
        deterministic_gpu()
    # The same seed on every rank gives the same initial weights before any broadcast.
    torch.manual_seed(cfg.seed)
    return model.build(cfg).to(device)


def machine_load(trainer: Trainer, placement: list[dict[str, Any]], last: dict[str, Any]) -> dict[str, float] | None:
    """What else used rank 0's machine over the last epoch's steady window: its CPU time outside the ranks on it
    (every simulated node's included: they share the machine)."""
    if trainer.host is None or "cpu_s_per_rank" not in last:
        return None
    here = placement[0].get("host") if placement else None
    mine = sum(cpu for rank, cpu in enumerate(last["cpu_s_per_rank"])
               if not placement or placement[rank].get("host") == here)
    return host_load.others(trainer.host, mine)


def train_and_report(
    trainer: Trainer,
    *,
    backend: str,
    launcher: str,
    history: History | None = None,
    restarts: int = 0,
    on_epoch_end: Callable[[int, History], None] = lambda epoch, history: None,
    averaged_by: str | None = None,  # the library that averaged the gradients (NCCL, Gloo); None: one process
) -> dict[str, Any] | None:
    """Train the remaining epochs; rank 0 writes results.json and returns it, the other ranks return None."""
    history = history or History()
    resumed_from = history.last_epoch
    if trainer.ctx.is_main:
        # A results.json in the output folder must describe a finished run: never leave an older one behind.
        (Path(trainer.cfg.output_dir) / results.FILENAME).unlink(missing_ok=True)
    earlier, earlier_checkpoints = history.training_s, history.checkpoint_s  # the attempts before this one's
    scalars = Scalars(trainer.cfg.output_dir, len(history.step_losses)) if trainer.ctx.is_main else None
    start = time.perf_counter()

    def save_epoch(epoch: int, history: History) -> None:
        history.training_s = earlier + time.perf_counter() - start  # before the checkpoint, so it carries this
        history.checkpoint_s = earlier_checkpoints + trainer.checkpoint_time_s
        if scalars:
            scalars.epoch(history.epochs[-1], history.step_losses)
        on_epoch_end(epoch, history)

    assert history.last_epoch <= trainer.cfg.epochs, "checkpoint.check_resume refuses a shorter run"
    try:
        history = trainer.fit(history, save_epoch)
    finally:
        if scalars:
            scalars.close()
    last, extra = history.epochs[-1], trainer.consistency()
    extra.update(overlap=trainer.overlap(last) if "comm_exposed_s" in last else None,  # every rank: collectives
                 cpu_s_per_1k_samples=last.get("cpu_s_per_1k_samples"),
                 schedule=trainer.schedule.record() if trainer.schedule else None,
                 machine_load=machine_load(trainer, extra["placement"], last))
    if not trainer.ctx.is_main:
        return None
    stamps = {"workers_started": trainer.ctx.began_at or launch.process_started(),
              "process_group_ready": trainer.ctx.ready_at, **trainer.stamps}
    doc = results.build(
        backend=backend, launcher=launcher, workers=trainer.ctx.world_size * len(trainer.loaders), cfg=trainer.cfg,
        history=history, wall_time_s=earlier + time.perf_counter() - start, extra={
            "model": model.describe(trainer.module, trainer.cfg),
            "options": options.effective(trainer.cfg, backend), "averaged_by": averaged_by,
            "gpu_math": gpu_math(trainer.ctx.device), "resumed_from_epoch": resumed_from, "restarts": restarts,
            **extra, "timestamps": stamps,
            # Provisional, from the command that started the workers; launchers that know better replace them.
            "phases": phases.phases(stamps, launch.launcher_started(), time.time()),
            "eval_time_s": sum(e["eval_time_s"] for e in history.epochs),  # every attempt's, as the wall time
            "checkpoint_time_s": earlier_checkpoints + trainer.checkpoint_time_s,  # every attempt's (see History)
        },
    )
    doc["end_to_end_s"] = doc["phases"]["launcher_returned"]
    space.write_results(trainer.cfg.output_dir, doc)
    return doc
