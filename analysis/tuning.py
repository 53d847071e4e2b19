"""The tuning report of a grid (ray_jobs/grid.py): throughput per backend per setting, from the comparisons' JSON alone.

Each row's interval is the t interval of the mean over that arm's repeats; native ÷ Horovod is the paired ratio of
the setting's own comparison, which cancels the machine's slow minutes that the unpaired intervals still carry.
"""

import json
from pathlib import Path
from typing import Any

from analysis import plots, report, runs, speed, stats
from contract.config import ConfigError

GRID = "grid.json"
SCHEMA_VERSION = 1


def load(grid_dir: str | Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """grid.json and each setting's comparison.json, by folder."""
    path = Path(grid_dir) / GRID
    try:
        grid = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path} cannot be read ({error}); pass a folder written by a compare grid") from None
    return grid, {s["folder"]: runs.load(Path(grid_dir) / s["folder"]) for s in grid["settings"]}


def rows(grid: dict[str, Any], comparisons: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for setting in grid["settings"]:
        comparison = comparisons[setting["folder"]]
        for workers in grid["workers"]:
            answer = comparison["speed"].get(str(workers))
            parity = comparison["parity"].get(str(workers), {}).get("verdict", "—")
            for arm, arm_runs in runs.finished(comparison, workers).items():
                if arm not in speed.DISTRIBUTED_ARMS:
                    continue
                values = [r[speed.METRIC] for r in arm_runs]
                mean, interval = stats.mean_interval(values)
                out.append({"setting": {name: setting[name] for name in grid["varied"]}, "folder": setting["folder"],
                            "workers": workers, "arm": arm, "mean": mean, "ci95": interval, "runs": len(values),
                            "native_over_horovod": answer, "parity": parity})
    return out


def table(grid: dict[str, Any], comparisons: dict[str, dict[str, Any]]) -> str:
    varied = grid["varied"]
    head = (f"| {' | '.join('--' + name.replace('_', '-') for name in varied)} | workers | arm "
            "| steady samples/s, mean (95 % CI), runs | native ÷ Horovod, paired (95 % CI) | verdict | parity |")
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    shown = set()
    for row in rows(grid, comparisons):
        group = (row["folder"], row["workers"])  # the ratio belongs to the setting and worker count: said once
        values = " | ".join(_value(row["setting"][name]) for name in varied)
        interval = (f"{row['mean']:.0f} ({row['ci95'][0]:.0f}–{row['ci95'][1]:.0f}), n={row['runs']}"
                    if row["ci95"] else f"{row['mean']:.0f}, n={row['runs']}")
        answer = row["native_over_horovod"]
        said = answer and group not in shown
        ratio, verdict = (report.ratio_text(answer), report.decision(answer)) if said else ("", "")
        shown.add(group)
        lines.append(f"| {values} | {row['workers']} | {row['arm']} | {interval} | {ratio} | {verdict} "
                     f"| {row['parity']} |")
    return "\n".join(lines)


def intervals(grid: dict[str, Any], comparisons: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """One verdict-plot row per setting and worker count that has a native ÷ Horovod answer."""
    out = []
    for setting in grid["settings"]:
        for workers in grid["workers"]:
            if answer := comparisons[setting["folder"]]["speed"].get(str(workers)):
                named = ", ".join(f"{name.replace('_', '-')} {_value(setting[name])}" for name in grid["varied"])
                out.append((f"{named}, {workers} worker(s)", answer))
    return out


def _value(value: Any) -> str:
    if isinstance(value, float):
        return "framework default" if value == 0 else f"{value:g} MiB"
    return str(value)


def markdown(grid: dict[str, Any], comparisons: dict[str, dict[str, Any]]) -> str:
    varied = ", ".join("--" + name.replace("_", "-") for name in grid["varied"])
    out = [f"# Tuning grid {grid['grid_id']}: {varied}", "",
           f"One whole comparison per setting ({grid['repeats']} repeat(s) of every arm, interleaved), run one after "
           "another; each setting's report is in its folder. Within a setting the backends ran side by side and "
           "their ratio is paired round by round; between settings the runs are minutes apart, so compare settings "
           "by their intervals, which carry the machine's drift. A bucket size of 0 leaves each framework its own "
           "default (DDP 25 MiB, Horovod 0.28.1 128 MiB).", "",
           table(grid, comparisons), "", f"Plot: `{plots.VERDICTS}`, native ÷ Horovod per setting with its interval.",
           "", "Reports: " + ", ".join(
               f"[{s['folder']}]({s['folder']}/report.md)" for s in grid["settings"]), ""]
    return "\n".join(out)


def render(grid_dir: str | Path) -> str:
    """Write report.md into the grid's folder; return the Markdown."""
    grid, comparisons = load(grid_dir)
    text = markdown(grid, comparisons)
    (Path(grid_dir) / "report.md").write_text(text)
    plots.plot_intervals(intervals(grid, comparisons), Path(grid_dir) / plots.VERDICTS,
                         "native ÷ Horovod per setting, with its 95 % interval")
    return text
