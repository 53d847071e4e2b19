"""Does a verdict hold on another machine or day? The same comparisons measured more than once (snapshots: grid
folders or comparison folders), side by side per model: each snapshot's native ÷ Horovod with its interval and the
step parts its rounds decide, on how many snapshots and CPUs the verdict held, and, between each later snapshot and
the first that took the step apart, which part of native − Horovod moved (an unpaired interval: the runs of two
snapshots share no rounds)."""

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from analysis import cause, runs, speed, stats
from contract.config import ConfigError

Snapshot = tuple[str, list[dict[str, Any]]]
"""A snapshot's name (its folder, as given, and the day its id names) and its comparisons."""
STAMP = re.compile(r"^(\d{4})(\d{2})(\d{2})-\d{6}")
"""A run or grid id as compare names it by default: the day and time it started."""


def load(folder: str) -> Snapshot:
    """The comparisons of one snapshot: the folder's own comparison.json, or one per subfolder (a grid)."""
    path = Path(folder)
    if not path.is_dir():
        raise ConfigError(f"{folder} is not a folder; pass folders written by python -m ray_jobs.compare")
    found = [path] if (path / runs.COMPARISON).is_file() else sorted(
        p.parent for p in path.glob(f"*/{runs.COMPARISON}"))
    if not found:
        raise ConfigError(f"{folder} holds no {runs.COMPARISON}, nor do its subfolders; pass folders written by "
                          "python -m ray_jobs.compare")
    comparisons = [runs.load(p) for p in found]
    grid = path / "grid.json"
    started = json.loads(grid.read_text()).get("grid_id", "") if grid.is_file() else comparisons[0]["run_id"]
    day = "-".join(m.groups()) if (m := STAMP.match(str(started))) else "day not recorded"
    return f"{folder} ({day})", comparisons


def render(folders: list[str]) -> str:
    """The Markdown of every model measured in at least two of `folders`, in the order the folders first name it."""
    if len(folders) < 2 or len(set(folders)) < len(folders):
        raise ConfigError("give at least two different snapshot folders, e.g. docs/results/models "
                          "docs/results/models-xeon-2026-11-25")
    by_model: dict[tuple[str, int], list[tuple[str, dict[str, Any]]]] = {}
    for name, comparisons in (load(f) for f in folders):
        for comparison in comparisons:
            for workers in comparison["settings"]["workers"]:
                if str(workers) in comparison.get("speed", {}):
                    key = (comparison["settings"]["config"]["model"], workers)
                    by_model.setdefault(key, []).append((name, comparison))
    shared = {key: found for key, found in by_model.items() if len(found) > 1}
    if not shared:
        raise ConfigError(f"no model and worker count was compared in two of {', '.join(folders)}; pass snapshots "
                          "of the same models")
    head = ("| model | workers | snapshot | CPU | native ÷ Horovod, steady samples/s (95 % CI) | rounds | "
            "native − Horovod step, ms (95 % CI) | parts that decide it, ms |")
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    said = []
    for (model, workers), found in shared.items():
        lines.extend(row(model, workers, name, comparison) for name, comparison in found)
        said.append(summary(model, workers, found))
    made = f"Made by `python -m ray_jobs.replicate {' '.join(folders)}` from the snapshots' comparison.json alone."
    return "\n".join([made, "", *lines, "", *said]) + "\n"


def row(model: str, workers: int, name: str, comparison: dict[str, Any]) -> str:
    """One snapshot's figures for one model."""
    verdict = comparison["speed"][str(workers)]
    ratio = f"{verdict['ratio']:.2f}" + (f" ({verdict['ci95'][0]:.2f}–{verdict['ci95'][1]:.2f})"
                                         if verdict["ci95"] else " (one round)")
    step, parts = "not recorded (the snapshot predates the step's parts)", "—"
    if found := cause.difference(comparison, workers, *speed.compared_arms(comparison["settings"]["launchers"])):
        mean, ci = found["ms"]["step"]
        step = f"{mean:+.1f}" + (f" ({ci[0]:+.1f} – {ci[1]:+.1f})" if ci else "")
        parts = ", ".join(f"{p} {found['ms'][p][0]:+.1f}" for p in found["decided"]) or "none beyond its interval"
    return (f"| {model} | {workers} | {name} | {comparison['environment']['cpu']} | {ratio} | {verdict['repeats']} | "
            f"{step} | {parts} |")


def summary(model: str, workers: int, found: list[tuple[str, dict[str, Any]]]) -> str:
    """On how many snapshots and CPUs the verdict held, and what moved between the first with parts and each other."""
    verdicts = Counter(c["speed"][str(workers)]["verdict"] for _, c in found)
    cpus = sorted({c["environment"]["cpu"] for _, c in found})
    said = ", ".join(f"{verdict} on {n} of {len(found)} snapshots" for verdict, n in verdicts.most_common())
    plural = "s" if len(cpus) > 1 else ""
    held = f"- **{model}, {workers} workers**: {said} ({len(cpus)} CPU{plural}: {', '.join(cpus)})"
    split = [(name, apart) for name, c in found
             if (apart := cause.gaps(c, workers, *speed.compared_arms(c["settings"]["launchers"]))[1])["step"]]
    moved = [between(split[0], other) for other in split[1:]]
    return held + ("; " + "; ".join(moved) if moved else "; no two snapshots took the step apart") + "."


def between(first: tuple[str, dict[str, list[float]]], other: tuple[str, dict[str, list[float]]]) -> str:
    """How much native − Horovod moved from `first` to `other`, per part (ms, unpaired 95 % CI), naming the parts whose
    whole interval lies on one side of 0."""
    (a, x), (b, y) = first, other
    moved = {part: stats.welch_interval(y[part], x[part]) for part in (*cause.PARTS, "step")}
    cells = ", ".join(f"{part} {mean:+.1f}" + (f" ({ci[0]:+.1f} – {ci[1]:+.1f})" if ci else "")
                      for part, (mean, ci) in moved.items())
    decided = [part for part in cause.PARTS if (ci := moved[part][1]) and (ci[0] > 0 or ci[1] < 0)]
    named = ", ".join(decided) if decided else "no part beyond its interval"
    return f"from {a} to {b} native − Horovod moved by (ms, 95 % CI) {cells}: {named}"
