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
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contract import framework_env, results
from contract.comparison import CompareConfig
from contract.config import ConfigError, TrainConfig
from runtime import space

log = logging.getLogger(__name__)
PLAN = "plan.json"
RECORD = "record.json"
SETTINGS = "framework_settings"
"""The frameworks' settings exported where the comparison started (contract/framework_env.py): a resume asks the same."""
FREE = ("workers", "output_dir", "data_dir", "checkpoint_dir", "log_every", "stall_timeout_s")
"""Training settings a resume may change: where things go and how the runs report; not what they compute."""


def request(base: TrainConfig, cmp: CompareConfig) -> dict[str, Any]:
    """What a comparison is asked, as a resume must ask it again (--budget-min may change: more time, or less)."""
    return {"config": {k: v for k, v in base.to_dict().items() if k not in FREE},
            "workers": list(cmp.worker_counts), "backends": list(cmp.backend_names),
            "launchers": list(cmp.launcher_names), "repeats": cmp.repeats, "aa": cmp.aa, "no_ceiling": cmp.no_ceiling,
            "target_ci": cmp.target_ci, "parity_steps": cmp.parity_steps, "tolerance": cmp.tolerance,
            "target_accuracy": cmp.target_accuracy, SETTINGS: framework_env.in_force(os.environ)}


PLAN_SCHEMA = 2
"""2: runs record gpu_math, which a kept run's record must hold (a schema-1 folder is refused, not emptied)."""


def write_plan(run_dir: Path, asked: dict[str, Any]) -> None:
    space.write_json(run_dir / PLAN, {"schema_version": PLAN_SCHEMA, "request": asked})


def check(run_dir: Path, asked: dict[str, Any]) -> None:
    """Refuse, before anything starts, a folder that is no comparison's, or a resume that asks otherwise."""
    path = run_dir / PLAN
    try:
        plan = json.loads(path.read_text())
        saved, schema = plan["request"], plan.get("schema_version")
    except FileNotFoundError:
        raise ConfigError(f"--resume {run_dir}: no {PLAN} there, so it is no comparison's folder (or one started "
                          "before comparisons could resume); pass the results/<run-id> folder of the stopped "
                          "run") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"--resume {run_dir}: {PLAN} cannot be read ({type(error).__name__}); start a new "
                          "comparison") from None
    if schema != PLAN_SCHEMA:
        raise ConfigError(f"--resume {run_dir}: {PLAN} says schema_version {schema!r}, and this version of the "
                          f"project reads {PLAN_SCHEMA}; resume it with the version that started it, or start a new "
                          "comparison")
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
            config = {**asked["config"], **saved.get("config", {})}  # a field younger than the plan: as asked
            out += [f"--{k.replace('_', '-')} {config[k]} -> {asked['config'][k]}" for k in sorted(asked["config"])
                    if config.get(k) != asked["config"][k]]
        elif key == SETTINGS:
            before, now = saved.get(key, {}), asked[key]
            out += [f"{name}={before.get(name, '(unset)')} -> {now.get(name, '(unset)')} in the environment"
                    for name in sorted(set(before) | set(now)) if before.get(name) != now.get(name)]
        elif saved.get(key) != asked.get(key):
            out.append(f"--{key.replace('_', '-')} {saved.get(key)} -> {asked.get(key)}")
    return out


def finished(run_dir: Path, rebuild: Callable[[str, dict[str, Any], dict[str, Any]], dict[str, Any] | None]
             ) -> dict[str, dict[str, Any]]:
    """The runs that finished whole before the comparison stopped, by folder name: a record.json equal, field for
    field, to the record `rebuild(folder name, record, results)` makes of its results.json (orchestrator.rebuilder:
    the run it names is one of this comparison's, in its own folder, trained as the plan asks, and its results say
    so). A folder without one, or whose files disagree (a run copied under another's name, an edited figure), was
    cut short or is not what it claims: it is removed, and its run runs again. What is kept was rebuilt from
    results.json."""
    kept = {}
    for folder in sorted(p for p in run_dir.iterdir() if p.is_dir()):
        try:
            record = json.loads((folder / RECORD).read_text())
            rebuilt = rebuild(folder.name, record, results.read(folder / results.FILENAME))
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
            rebuilt = None
        if rebuilt is not None and rebuilt == record:
            kept[folder.name] = rebuilt
        else:
            log.info("%s did not finish whole before the comparison stopped, or is not a run this plan asks for: it "
                     "runs again", folder.name)
            shutil.rmtree(folder)
    return kept
