"""Does a verdict hold on another machine or day? The same comparisons measured more than once (snapshots: grid
folders or comparison folders), side by side per model: each snapshot's native ÷ Horovod with its interval and the
step parts its rounds decide, on how many snapshots and CPUs the verdict held, and, between each later snapshot and
the first that took the step apart, which part of native − Horovod moved (an unpaired interval: the runs of two
snapshots share no rounds)."""

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis import cause, runs, speed, stats, text
from contract.config import ConfigError

STAMP = re.compile(r"^(\d{4})(\d{2})(\d{2})-\d{6}")
"""A run or grid id as compare names it by default: the day and time it started."""
UNSHARED = ("output_dir", "data_dir", "no_averaging", "workers")
"""The config fields two snapshots of one model may differ in: where they wrote, and what the ceiling and
--workers' list set per run."""
FIX = "pass folders written by python -m ray_jobs.compare"


@dataclass(frozen=True)
class Entry:
    """One comparison of one model at one worker count, as one snapshot measured it."""
    snapshot: str
    path: Path
    model: str
    workers: int
    row: str
    verdict: str
    cpu: str
    gaps: dict[str, list[float]]
    """native − Horovod per part and step, ms, by round (cause.difference's values); empty where the snapshot
    predates the parts."""
    least_ms: float
    """What a part must move to be named: cause.difference's, MATTERS of Horovod's median step."""
    config: dict[str, Any]


def load(folder: str) -> tuple[str, list[tuple[Path, dict[str, Any]]]]:
    """A snapshot's name (the folder as given, and the day its id names) and its comparisons by folder: the folder
    itself, or one per subfolder (a grid)."""
    path = Path(folder)
    if not path.is_dir():
        raise ConfigError(f"{folder} is not a folder; {FIX}")
    found = [path] if (path / runs.COMPARISON).is_file() else sorted(
        p.parent for p in path.glob(f"*/{runs.COMPARISON}"))
    if not found:
        raise ConfigError(f"{folder} holds no {runs.COMPARISON}, nor do its subfolders; {FIX}")
    comparisons = [(each, runs.load(each)) for each in found]
    grid = path / "grid.json"
    try:
        started = json.loads(grid.read_text()).get("grid_id", "") if grid.is_file() else comparisons[0][1]["run_id"]
    except (OSError, ValueError, AttributeError):
        started = ""  # a damaged grid.json only costs the day
    day = "-".join(m.groups()) if (m := STAMP.match(str(started))) else "day not recorded"
    return f"{folder} ({day})", comparisons


def entries(snapshot: str, folder: Path, comparison: dict[str, Any]) -> list[Entry]:
    """One comparison's entries, a ConfigError naming its file where a field the table needs is missing."""
    try:
        return [entry(snapshot, folder, comparison, int(workers)) for workers in comparison["settings"]["workers"]
                if str(workers) in (comparison.get("speed") or {})]
    except (KeyError, TypeError, IndexError, ValueError) as error:
        raise ConfigError(f"{folder / runs.COMPARISON} is damaged or from another version ({type(error).__name__}: "
                          f"{error}); rerun python -m ray_jobs.compare") from None


def entry(snapshot: str, folder: Path, comparison: dict[str, Any], workers: int) -> Entry:
    config = comparison["settings"]["config"]
    verdict = comparison["speed"][str(workers)]
    if not all(math.isfinite(x) for x in [verdict["ratio"], *(verdict["ci95"] or [])]):
        raise ValueError(f"native ÷ Horovod at {workers} workers is {verdict['ratio']} ({verdict['ci95']}), which no "
                         "comparison writes")
    if not isinstance(comparison["environment"]["cpu"], str) or not isinstance(verdict["verdict"], str):
        raise TypeError("environment.cpu and the verdict must be text")
    found = cause.difference(comparison, workers, *speed.compared_arms(comparison["settings"]["launchers"]))
    return Entry(snapshot, folder.resolve(), config["model"], workers, row(snapshot, comparison, workers, found),
                 comparison["speed"][str(workers)]["verdict"], comparison["environment"]["cpu"],
                 found["values"] if found else {}, found["least_ms"] if found else 0.0,
                 {k: v for k, v in config.items() if k not in UNSHARED})


def render(folders: list[str]) -> str:
    """The Markdown of every model measured in at least two of `folders`, in the order the folders first name it."""
    if len(folders) < 2:
        raise ConfigError("give at least two snapshot folders, e.g. docs/results/models "
                          "docs/results/models-xeon-2026-11-25")
    by_model: dict[tuple[str, int], list[Entry]] = {}
    seen: dict[Path, str] = {}
    measured: dict[tuple[Any, Any], Path] = {}
    for name, found in (load(f) for f in folders):
        for folder, comparison in found:
            if (key := folder.resolve()) in seen:
                raise ConfigError(f"{folder} is in {seen[key]} and {name}: give each snapshot once, none inside "
                                  "another")
            seen[key] = name
            # A copy keeps the run id and the wall time to the microsecond; two measurements never share both.
            if (same := (comparison.get("run_id"), comparison.get("wall_time_s"))) in measured:
                raise ConfigError(f"{folder} and {measured[same]} hold the same comparison (run {same[0]}): a copy is "
                                  "not a second snapshot; give each measurement once")
            measured[same] = folder
            for each in entries(name, folder, comparison):
                by_model.setdefault((each.model, each.workers), []).append(each)
    shared = {key: alike(found) for key, found in by_model.items() if len(found) > 1}
    if not shared:
        raise ConfigError(f"no model and worker count was compared in two of {', '.join(folders)}; pass snapshots "
                          "of the same models")
    table = text.md_table(["model", "workers", "snapshot", "CPU", "native ÷ Horovod, steady samples/s (95 % CI)",
                           "rounds", "native − Horovod step, ms (95 % CI)", "parts that decide it, ms"],
                          [[e.model, e.workers, e.row] for found in shared.values() for e in found])
    said = [summary(found) for found in shared.values()]
    made = f"Made by `python -m ray_jobs.replicate {' '.join(folders)}` from the snapshots' comparison.json alone."
    return "\n".join([made, "", table, "", *said]) + "\n"


def alike(found: list[Entry]) -> list[Entry]:
    """`found`, once no snapshot holds the model twice and every one trained it alike; else a ConfigError."""
    first = found[0]
    if twice := next((e for e in found if sum(o.snapshot == e.snapshot for o in found) > 1), None):
        paths = ", ".join(e.path.name for e in found if e.snapshot == twice.snapshot)
        raise ConfigError(f"{twice.snapshot} holds two comparisons of {first.model} at {first.workers} workers "
                          f"({paths}): pass one folder per setting")
    for other in found[1:]:
        if differ := sorted(k for k in {*first.config, *other.config} if first.config.get(k) != other.config.get(k)):
            k = differ[0]
            raise ConfigError(f"{first.snapshot} and {other.snapshot} trained {first.model} differently "
                              f"({text.flag(k)} {first.config.get(k)} against {other.config.get(k)}): pass "
                              "snapshots of the same settings")
    return found


def row(snapshot: str, comparison: dict[str, Any], workers: int, found: dict[str, Any] | None) -> str:
    """One snapshot's cells for one model, after its model and workers; `found`: its cause.difference, if any."""
    verdict = comparison["speed"][str(workers)]
    ratio = f"{verdict['ratio']:.2f}" + (f" ({verdict['ci95'][0]:.2f}–{verdict['ci95'][1]:.2f})"
                                         if verdict["ci95"] else " (one round)")
    step, parts = "not recorded (the snapshot predates the step's parts)", "—"
    if found:
        mean, ci = found["ms"]["step"]
        step = cause.signed(mean, ci)
        parts = ", ".join(f"{p} {found['ms'][p][0]:+.1f}" for p in found["decided"]) or "none beyond its interval"
    return (f"{snapshot} | {comparison['environment']['cpu']} | {ratio} | {verdict['repeats']} | {step} | "
            f"{parts}")


def summary(found: list[Entry]) -> str:
    """On how many snapshots and CPUs the verdict held, and what moved between the first with parts and each other."""
    verdicts = Counter(e.verdict for e in found)
    cpus = sorted({e.cpu for e in found})
    said = ", ".join(f"{verdict} on {n} of {len(found)} snapshots" for verdict, n in verdicts.most_common())
    plural = "s" if len(cpus) > 1 else ""
    held = f"- **{found[0].model}, {found[0].workers} workers**: {said} ({len(cpus)} CPU{plural}: {', '.join(cpus)})"
    split = [e for e in found if e.gaps]
    moved = [between(split[0], other) for other in split[1:]]
    return held + ("; " + "; ".join(moved) if moved else "; no two snapshots took the step apart") + "."


def between(first: Entry, other: Entry) -> str:
    """How much native − Horovod moved from `first` to `other`, per part (ms, unpaired 95 % CI), naming the parts
    whose whole interval lies on one side of 0 and that move at least cause.MATTERS of the first's Horovod step."""
    moved = {part: stats.welch_interval(other.gaps[part], first.gaps[part]) for part in (*cause.PARTS, "step")}
    cells = ", ".join(f"{part} {cause.signed(mean, ci)}" for part, (mean, ci) in moved.items())
    named = ", ".join(cause.decided(moved, first.least_ms)) or "no part beyond its interval"
    return f"from {first.snapshot} to {other.snapshot} native − Horovod moved by (ms, 95 % CI) {cells}: {named}"
