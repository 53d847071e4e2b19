"""The one result schema every backend and launcher writes: `<output-dir>/results.json`, by rank 0, at the end
(written atomically by runtime/space.py)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from contract import framework_env
from contract.config import TrainConfig

SCHEMA_VERSION = 1
REQUIRED = {
    "schema_version": int, "backend": str, "launcher": str, "workers": int, "dataset": str, "config": dict,
    "environment": dict, "step_losses": list, "epochs": list, "final": dict, "timestamps": dict, "phases": dict,
    "end_to_end_s": float,
}
EPOCH_KEYS = ("epoch", "train_loss", "test_loss", "test_accuracy", "samples_per_s", "samples_per_s_median",
              "epoch_time_s", "step_time_p50_s", "step_time_p95_s", "comm_share")
FINAL_KEYS = ("test_accuracy", "test_loss", "wall_time_s")
FILENAME = "results.json"
HOROVOD_TIMELINE = "Horovod's timeline"
"""A schedule's `allreduces_from` where Horovod's fused buffers were recorded (workload/schedule.py)."""


@dataclass(slots=True)
class History:
    """Everything a result needs from finished epochs; it travels inside checkpoints so a resumed run has it all."""

    step_losses: list[float] = field(default_factory=list)
    epochs: list[dict[str, Any]] = field(default_factory=list)
    training_s: float = 0.0
    """Seconds spent training these epochs, in every attempt, up to the last epoch's checkpoint: a resumed run's
    wall time then covers the epochs it reports, not only those of its last attempt."""
    checkpoint_s: float = 0.0
    """Seconds of the checkpoint writes before the one that carries this, in every attempt: a resumed run's
    checkpoint_time_s then misses only the write it resumed from, whose time no checkpoint can hold."""

    @property
    def last_epoch(self) -> int:
        return self.epochs[-1]["epoch"] if self.epochs else 0


def environment() -> dict[str, Any]:
    import torch

    return {
        "python": platform.python_version(),
        **{name: _version(name) for name in ("torch", "torchvision", "ray", "horovod")},
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        **_gpus(torch),
        "hostname": platform.node(),
        "framework_settings": (settings := framework_env.in_force(os.environ)),
        "framework_settings_reach": {name: framework_env.applies_to(name) for name in settings},
        "interfaces": framework_env.interfaces(os.environ),
    }


def _gpus(torch) -> dict[str, Any]:
    """Beside the GPU's model: how many, the driver, CUDA and NCCL; nothing where torch sees no GPU."""
    if not torch.cuda.is_available():
        return {}
    try:
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    except (AttributeError, RuntimeError, TypeError):  # a torch built without NCCL
        nccl = None
    return {"gpu_count": torch.cuda.device_count(), "gpu_driver": _driver_version(), "cuda": torch.version.cuda,
            "nccl": nccl}


def _driver_version() -> str | None:
    """The NVIDIA driver's version as nvidia-smi reports it (torch does not say)."""
    if not (smi := shutil.which("nvidia-smi")):
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out[0] if out else None


def build(*, backend: str, launcher: str, workers: int, cfg: TrainConfig, history: History,
          wall_time_s: float, extra: dict[str, Any]) -> dict[str, Any]:
    last = history.epochs[-1]
    return {
        "schema_version": SCHEMA_VERSION,
        "backend": backend,
        "launcher": launcher,
        "workers": workers,
        "dataset": cfg.dataset,
        "config": cfg.to_dict(),
        "environment": environment(),
        "step_losses": history.step_losses,
        "epochs": history.epochs,
        "final": {"test_accuracy": last["test_accuracy"], "test_loss": last["test_loss"], "wall_time_s": wall_time_s},
        **extra,
    }


def validate(doc: dict[str, Any]) -> None:
    """Raise ValueError naming the first way `doc` departs from the schema."""
    for key, kind in REQUIRED.items():
        if not isinstance(doc.get(key), kind):
            raise ValueError(f"results: {key!r} missing or not {kind.__name__}")
    for record in doc["epochs"]:
        if missing := [k for k in EPOCH_KEYS if k not in record]:
            raise ValueError(f"results: epoch record lacks {missing}")
    if missing := [k for k in FINAL_KEYS if k not in doc["final"]]:
        raise ValueError(f"results: final lacks {missing}")
    if len(doc["step_losses"]) != sum(e["steps"] for e in doc["epochs"]):
        raise ValueError("results: step_losses does not hold one loss per step")


def read(path: str | Path) -> dict[str, Any]:
    doc = json.loads(Path(path).read_text())
    validate(doc)
    return doc


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
