"""compare --resume DIR: a comparison stopped midway (SIGKILL, a reboot) goes on in its folder. Each run that finished
whole is kept, checked rather than trusted; the rest run again, in their places in the interleaved order. A resume
asks the same of the comparison as its start did, or is refused naming the difference, as a checkpoint is.

    python -m ray_jobs.compare --model vit_b_16 --repeats 6              # killed in round 2
    python -m ray_jobs.compare --model vit_b_16 --repeats 6 --resume results/20261126-101500

Every comparison writes plan.json (what it was asked) as it starts, and each run's record.json into the run's folder
once the run has finished and its launcher's view is in its results.json.
"""

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from contract import results
from contract.comparison import CompareConfig
from contract.config import ConfigError, TrainConfig
from runtime import space

log = logging.getLogger(__name__)
PLAN = "plan.json"
RECORD = "record.json"
FREE = ("workers", "output_dir", "data_dir", "checkpoint_dir", "log_every", "stall_timeout_s")
"""Training settings a resume may change: where things go and how the runs report; not what they compute."""


def request(base: TrainConfig, cmp: CompareConfig) -> dict[str, Any]:
    """What a comparison is asked, as a resume must ask it again (--budget-min may change: more time, or less)."""
    return {"config": {k: v for k, v in base.to_dict().items() if k not in FREE},
            "workers": list(cmp.worker_counts), "backends": list(cmp.backend_names),
            "launchers": list(cmp.launcher_names), "repeats": cmp.repeats, "aa": cmp.aa, "no_ceiling": cmp.no_ceiling,
            "target_ci": cmp.target_ci, "parity_steps": cmp.parity_steps, "tolerance": cmp.tolerance,
            "target_accuracy": cmp.target_accuracy}


def write_plan(run_dir: Path, asked: dict[str, Any]) -> None:
    space.write_json(run_dir / PLAN, {"schema_version": 1, "request": asked})


def check(run_dir: Path, asked: dict[str, Any]) -> None:
    """Refuse, before anything starts, a folder that is no comparison's, or a resume that asks otherwise."""
    path = run_dir / PLAN
    try:
        saved = json.loads(path.read_text())["request"]
    except FileNotFoundError:
        raise ConfigError(f"--resume {run_dir}: no {PLAN} there, so it is no comparison's folder (or one started "
                          "before comparisons could resume); pass the results/<run-id> folder of the stopped "
                          "run") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"--resume {run_dir}: {PLAN} cannot be read ({type(error).__name__}); start a new "
                          "comparison") from None
    if (run_dir / "comparison.json").exists():
        raise ConfigError(f"--resume {run_dir}: that comparison finished (its comparison.json is there); render it "
                          "with --render, or start a new one")
    saved.setdefault("no_ceiling", True)  # a comparison planned before the ceiling existed ran none
    differences = _differences(saved, asked)
    if differences:
        raise ConfigError(f"--resume {run_dir} was started with other settings ({'; '.join(differences[:4])}); "
                          "resume it with the settings it started with, or start a new comparison")


def _differences(saved: dict[str, Any], asked: dict[str, Any]) -> list[str]:
    out = []
    for key in sorted(set(saved) | set(asked)):
        if key == "config":
            config = {**saved.get("config", {}), **{k: v for k, v in asked["config"].items()
                                                    if k not in saved.get("config", {})}}
            out += [f"--{k.replace('_', '-')} {config[k]} -> {asked['config'][k]}" for k in sorted(asked["config"])
                    if config.get(k) != asked["config"][k]]
        elif saved.get(key) != asked.get(key):
            out.append(f"--{key.replace('_', '-')} {saved.get(key)} -> {asked.get(key)}")
    return out


def finished(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The runs that finished whole before the comparison stopped, by folder name: a record.json that agrees with
    its results.json (schema, steps, the steady figure, the final weights' hash). A folder without one, or whose
    files disagree, was cut short or damaged: it is removed, and its run runs again."""
    kept = {}
    for folder in sorted(p for p in run_dir.iterdir() if p.is_dir()):
        try:
            record = json.loads((folder / RECORD).read_text())
            doc = results.read(folder / results.FILENAME)
            whole = (record["status"] == "ok" and record["steady_samples_per_s"] ==
                     doc["epochs"][-1]["samples_per_s_median"] and record["parameters_sha256"] ==
                     doc.get("parameters_sha256") and record["step_losses"] == doc["step_losses"])
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            whole = False
        if whole:
            kept[folder.name] = record
        else:
            log.info("%s did not finish whole before the comparison stopped: it runs again", folder.name)
            shutil.rmtree(folder)
    return kept
