"""A comparison's runs as the report and the plots read them: comparison.json loaded and checked, the finished runs
of each arm in report order, and the median time to each phase."""

import json
import statistics
from pathlib import Path
from typing import Any

from analysis import speed
from contract import phases
from contract.config import ConfigError

COMPARISON = "comparison.json"
SCHEMA_VERSION = 2
REQUIRED = ("schema_version", "run_id", "settings", "environment", "wall_time_s", "runs", "parity", "not_applicable")
ORDER = ("reference", "reference-horovod", "reference-reordered", "global-batch", *speed.DISTRIBUTED_ARMS,
         *speed.CEILINGS, "dataparallel")


def arm_order(arm: str) -> tuple[int, str]:
    """The sort key that puts arms in report order; arms it does not know go last, by name."""
    return (ORDER.index(arm) if arm in ORDER else len(ORDER), arm)


PHASE_LABELS = dict(zip(phases.PHASES, ("start → ranks running", "→ process group ready", "→ first step done",
                                  "→ training done", "→ launcher returned"), strict=True))
"""contract/phases.py's phases, in order, with the name each segment gets in the overhead plot."""


def read_json(path: Path, fix: str, **hooks: Any) -> Any:
    """A JSON file's content, or a ConfigError saying why it cannot be read, and `fix`; `hooks` go to json.loads."""
    try:
        return json.loads(path.read_text(), **hooks)
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist; {fix}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"{path} cannot be read as JSON ({error}); {fix}") from None


def load(run_dir: str | Path) -> dict[str, Any]:
    """comparison.json, or a ConfigError saying why it cannot be rendered."""
    path = Path(run_dir) / COMPARISON
    fix = "pass a results/<run-id> folder written by python -m ray_jobs.compare"
    comparison = read_json(path, fix)
    missing = [k for k in REQUIRED if not isinstance(comparison, dict) or k not in comparison]
    if missing:
        raise ConfigError(f"{path} is not a comparison (it lacks {', '.join(missing)}); {fix}")
    if not isinstance(comparison["runs"], list) or not comparison["runs"]:
        raise ConfigError(f"{path} holds no run, so there is nothing to render; {fix}")
    if comparison["schema_version"] != SCHEMA_VERSION:
        raise ConfigError(f"{path} has schema version {comparison['schema_version']!r}, this renderer reads "
                          f"{SCHEMA_VERSION}; rerun python -m ray_jobs.compare")
    return comparison


def rounds(comparison: dict[str, Any]) -> int:
    """The rounds the comparison ran: --repeats, more where --target-ci added a second stage, fewer where
    --budget-min cut the pilot."""
    ran = [r["round"] + 1 for r in comparison["runs"]]
    if comparison["settings"].get("pilot_cut"):
        return max(ran)
    return max([comparison["settings"]["repeats"], *ran])


def finished(comparison: dict[str, Any], workers: int) -> dict[str, list[dict[str, Any]]]:
    """The finished runs at `workers`, by arm in report order, each arm's runs by round (the first run first)."""
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for run in comparison["runs"]:
        if run["workers"] == workers and run["status"] == "ok":
            by_arm.setdefault(run["arm"], []).append(run)
    order = sorted(by_arm, key=arm_order)
    return {arm: sorted(by_arm[arm], key=lambda run: run["round"]) for arm in order}


def last_epochs(arm_runs: list[dict[str, Any]], key: str) -> list[Any]:
    """Each run's last-epoch `key` (`phases_s`, `cpu_s_per_1k_by_thread`), from the runs that recorded it."""
    return [r["epochs"][-1][key] for r in arm_runs if r["epochs"][-1].get(key)]


def median_phases(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Each phase's median over `runs`, in seconds from the launcher's start, plus eval and checkpoint totals.

    The medians keep the phases' order: every run's phases increase, and a median cannot overtake a median of
    values that are each at least as large."""
    out = {name: statistics.median(r["phases"][name] for r in runs) for name in PHASE_LABELS}
    out["eval_time_s"] = statistics.median(r["eval_time_s"] for r in runs)
    out["checkpoint_time_s"] = statistics.median(r["checkpoint_time_s"] for r in runs)
    return out


def model(comparison: dict[str, Any]) -> dict[str, Any]:
    """The model the runs trained, as comparison.json records it; its name alone where the file predates the record."""
    return comparison.get("model") or {"name": comparison["settings"]["config"].get("model", "convnet")}


def hardware(comparison: dict[str, Any]) -> str:
    """What the comparison ran on, for a picture's title: its ranks, CPU or GPU, and the machine."""
    s, env = comparison["settings"], comparison["environment"]
    ranks = "/".join(str(n) for n in s["workers"])
    if s["config"].get("use_gpu"):
        return f"{ranks} GPU rank(s), {env.get('gpu_count', 1)} x {env.get('gpu')}"
    net = s.get("network")
    machine = f"one {env['cpu_count']}-core machine ({env['cpu']})"
    return f"{ranks} CPU rank(s)" + (f", {net['nodes']} simulated nodes on {machine}" if net else f" on {machine}")

