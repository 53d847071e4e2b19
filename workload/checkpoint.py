"""Model, optimizer, history and the settings that produced them, in one file written atomically.

A checkpoint resumes only the run that wrote it: `check_resume` refuses other settings (see
`config.RESUMABLE_CHANGES`), so a result never pairs one run's epochs with another run's config.
"""

import dataclasses
import os
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from contract.config import RESUMABLE_CHANGES, ConfigError, TrainConfig, flag, resume_conflicts
from contract.results import History
from runtime import preflight, space
from workload import faults, model

FILENAME = preflight.CHECKPOINT
KEYS = ("epoch", "model", "optimizer", "history", "config", "backend", "launcher")


def save(directory: str | Path, module: nn.Module, optimizer: torch.optim.Optimizer, history: History,
         cfg: TrainConfig, backend: str, launcher: str) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(f".{FILENAME}.*"):
        stale.unlink(missing_ok=True)  # a write that a kill cut short; the checkpoint beside it is still whole
    state = {
        "epoch": history.last_epoch,
        "model": module.state_dict(),
        "optimizer": optimizer.state_dict(),
        "history": dataclasses.asdict(history),
        "config": cfg.to_dict(),
        # A run is also its backend and launcher: its epochs' figures were measured there.
        "backend": backend,
        "launcher": launcher,
    }
    weights = sum(t.numel() * t.element_size() for t in state["model"].values())
    # About the weights twice (SGD's momentum buffer is their size); the exact size is known only once written.
    with space.atomic_file(directory / FILENAME, 2 * weights) as temporary, temporary.open("wb") as f:
        torch.save(state, f)
        f.flush()
        faults.point("checkpoint", 0, history.last_epoch)  # only rank 0 writes
        os.fsync(f.fileno())
    return directory / FILENAME


def load(directory: str | Path) -> dict[str, Any] | None:
    """The checkpoint in `directory`, or None when there is none; ConfigError when the file is not one of ours."""
    path = Path(directory) / FILENAME
    if not path.exists():
        return None
    fix = "delete it or choose another checkpoint folder"
    try:
        # weights_only: tensors and plain data only, so a foreign pickle is refused rather than executed. Its warning
        # about bytes that are not ours ("Detected pickle protocol …") would be a second line beside our one.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - torch's unpickler raises many kinds on bytes that are not ours
        reason = space.shorten(" ".join(str(error).split()), 120)
        raise ConfigError(f"{path} is not a readable checkpoint ({type(error).__name__}: {reason}); {fix}") from None
    if not isinstance(state, dict) or any(key not in state for key in KEYS):
        raise ConfigError(f"{path} is not a checkpoint of this project (it lacks model, optimizer, history or "
                          f"the settings that wrote it); {fix}")
    try:
        # The weights must fit the model they claim to be, or the restore would fail later, inside every worker; a
        # checkpoint of other settings is then refused by check_resume.
        model.build(TrainConfig.from_dict(state["config"])).load_state_dict(state["model"])
    except (RuntimeError, TypeError, AttributeError, ConfigError) as error:
        raise ConfigError(f"{path} holds weights of another model ({str(error).splitlines()[0]}); {fix}") from None
    return state


def check_resume(state: dict[str, Any], cfg: TrainConfig, where: str | Path, backend: str, launcher: str) -> None:
    """Refuse a resume that would not carry on the same run, or that has trained more epochs than it asks for."""
    conflicts = [f"--{name} {state[name]} -> {now}" for name, now in (("backend", backend), ("launcher", launcher))
                 if state[name] != now]
    conflicts += resume_conflicts(state["config"], cfg)
    if conflicts:
        raise ConfigError(
            f"the checkpoint in {where} was written with other settings ({'; '.join(conflicts)}); a resume carries "
            f"on the same run and may change only {', '.join(map(flag, RESUMABLE_CHANGES))}: "
            "use the original settings, or another checkpoint folder or run name for a new run"
        )
    # As many epochs as asked for: a run killed after its last checkpoint, before its result; the result is
    # written from the checkpoint. More: the user asks for a shorter run than the one that wrote it.
    if state["epoch"] > cfg.epochs:
        raise ConfigError(
            f"the checkpoint in {where} has already trained {state['epoch']} epoch(s), more than --epochs "
            f"{cfg.epochs}; pass --epochs {state['epoch']} to write its result, above {state['epoch']} to train "
            "more, or another checkpoint folder or run name for a new run"
        )


def restore(state: dict[str, Any], module: nn.Module, optimizer: torch.optim.Optimizer) -> History:
    module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return History(**state["history"])


def directory_saver(rank: int, directory: str, cfg: TrainConfig, backend: str, launcher: str):
    """An on_epoch_end callback for launchers without a checkpoint store of their own: rank 0 saves to `directory`."""

    def save_epoch(epoch: int, history: History, module: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        if not directory:
            return
        if rank == 0:
            save(directory, module, optimizer, history, cfg, backend, launcher)
        else:
            faults.point("checkpoint", rank, epoch)  # a peer dying while rank 0 writes

    return save_epoch
