"""Model, optimizer and history in one file, written atomically so a crash mid-write never loads wrong."""

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from workload.trainer import History

FILENAME = "checkpoint.pt"


def save(directory: str | Path, module: nn.Module, optimizer: torch.optim.Optimizer, history: History) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {
        "epoch": history.last_epoch,
        "model": module.state_dict(),
        "optimizer": optimizer.state_dict(),
        "history": dataclasses.asdict(history),
    }
    with tempfile.NamedTemporaryFile(dir=directory, prefix=f".{FILENAME}.", delete=False) as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(f.name, directory / FILENAME)
    return directory / FILENAME


def load(directory: str | Path) -> dict[str, Any] | None:
    """The checkpoint in `directory`, or None when there is none."""
    path = Path(directory) / FILENAME
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)


def restore(state: dict[str, Any], module: nn.Module, optimizer: torch.optim.Optimizer) -> History:
    module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return History(**state["history"])


def directory_saver(is_main: bool, directory: str):
    """An on_epoch_end callback for launchers without a checkpoint store of their own: rank 0 saves to `directory`."""

    def save_epoch(epoch: int, history: History, module: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        if directory and is_main:
            save(directory, module, optimizer, history)

    return save_epoch
