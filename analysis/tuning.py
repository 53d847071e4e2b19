"""The tuning report of a grid (ray_jobs/grid.py): throughput per backend per setting, from the comparisons' JSON alone.

Each row's interval is the t interval of the mean over that arm's repeats; native ÷ Horovod is the paired ratio of
the setting's own comparison, which cancels the machine's slow minutes that the unpaired intervals still carry.
"""

from pathlib import Path
from typing import Any

from analysis import plots, report, runs, speed, stats, text
from contract.config import BACKENDS

GRID = "grid.json"
SCHEMA_VERSION = 1


def load(grid_dir: str | Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """grid.json and each setting's comparison.json, by folder."""
    grid = runs.read_json(Path(grid_dir) / GRID, "pass a folder written by a compare grid")
    folders = [s["folder"] for s in grid["settings"]] + [b["folder"] for b in grid.get("best", {}).values()]
    return grid, {folder: runs.load(Path(grid_dir) / folder) for folder in folders}


def rows(grid: dict[str, Any], comparisons: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per setting, worker count and distributed arm: its mean steady samples/s and their t interval, the
    setting's verdict and parity, and the arm's costs as its comparison's table gives them."""
    out = []
    for setting in grid["settings"]:
        comparison = comparisons[setting["folder"]]
        for workers in grid["workers"]:
            cells = {r["arm"]: r for r in report.rows(comparison, workers)}
            for arm, arm_runs in runs.finished(comparison, workers).items():
                if arm not in speed.DISTRIBUTED_ARMS:
                    continue
                values = [r[speed.METRIC] for r in arm_runs]
                mean, interval = stats.mean_interval(values)
                out.append({"setting": {name: setting[name] for name in grid["varied"]}, "folder": setting["folder"],
                            "workers": workers, "arm": arm, "mean": mean, "ci95": interval, "runs": len(values),
                            "native_over_horovod": comparison["speed"].get(str(workers)),
                            "parity": comparison["parity"].get(str(workers), {}).get("verdict", "—"),
                            "costs": [cells[arm][column] for column in COSTS]})
    return out


COSTS = ("comm share (median of runs)", "overlap", "CPU s per 1k samples", "peak RSS per rank")
"""The columns of a comparison's table (report.rows) that the tuning table repeats for each arm."""


def group(setting: dict[str, Any]) -> str:
    """Settings compete within their model: the best of a backend is found among one model's settings."""
    return str(setting.get("model", "convnet"))


def bests(grid: dict[str, Any], comparisons: dict[str, dict[str, Any]], workers: int
          ) -> dict[str, dict[str, dict[str, Any]]]:
    """Per model with two settings or more: each backend's setting of the highest mean steady samples/s (its arm
    on Ray when Ray ran, else under its own launcher), as {model: {backend: {folder, mean}}}."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows(grid, comparisons):
        setting = next(s for s in grid["settings"] if s["folder"] == row["folder"])
        launchers = comparisons[row["folder"]]["settings"]["launchers"]
        backend = dict(zip(speed.compared_arms(launchers), BACKENDS)).get(row["arm"])
        if backend is None or row["workers"] != workers:
            continue
        best = out.setdefault(group(setting), {}).get(backend)
        if best is None or row["mean"] > best["mean"]:
            out[group(setting)][backend] = {"folder": row["folder"], "mean": row["mean"]}
    counts = {g: sum(group(s) == g for s in grid["settings"]) for g in out}
    return {g: found for g, found in out.items() if counts[g] > 1 and len(found) == 2}


def table(grid: dict[str, Any], comparisons: dict[str, dict[str, Any]]) -> str:
    """One row per setting, worker count and distributed arm: its samples/s and costs, with the setting's verdict."""
    lines, shown = [], set()
    for row in rows(grid, comparisons):
        answer = row["native_over_horovod"]
        said = answer and (row["folder"], row["workers"]) not in shown  # the setting's and worker count's: said once
        shown.add((row["folder"], row["workers"]))
        interval = (f"{row['mean']:.0f} ({row['ci95'][0]:.0f}–{row['ci95'][1]:.0f}), n={row['runs']}"
                    if row["ci95"] else f"{row['mean']:.0f}, n={row['runs']}")
        lines.append([*([_value(name, row["setting"][name]) for name in grid["varied"]] or [""]), row["workers"],
                      row["arm"], interval, report.ratio_text(answer) if said else "",
                      report.decision(answer) if said else "", row["parity"], *row["costs"]])
    head = [*([text.flag(name) for name in grid["varied"]] or [""]), "workers", "arm",
            "steady samples/s, mean (95 % CI), runs", "native ÷ Horovod, paired (95 % CI)", "verdict", "parity",
            "comm share", "overlap", "CPU s per 1k samples", "peak RSS per rank"]
    return text.md_table(head, lines)


def best_lines(grid: dict[str, Any], comparisons: dict[str, dict[str, Any]]) -> list[str]:
    """Each backend at its best, and the verdict between the two: a fair fight is each at its best setting."""
    out = []
    for workers in grid["workers"]:
        for model, found in bests(grid, comparisons, workers).items():
            native, horovod = found["native"], found["horovod"]
            named = {b: f"`{found[b]['folder']}` ({found[b]['mean']:.0f} samples/s)" for b in found}
            head = f"- **{model}, {workers} worker(s)**: native at its best {named['native']}, Horovod at its best " \
                   f"{named['horovod']}"
            if native["folder"] == horovod["folder"]:
                answer = comparisons[native["folder"]]["speed"].get(str(workers))
                verdict = (f"the same setting, whose paired verdict is {report.decision(answer)}" if answer else
                           "the same setting, without a paired verdict")
            elif record := grid.get("best", {}).get(model):
                answer = comparisons[record["folder"]]["speed"].get(str(workers))
                verdict = (f"each at its best, interleaved in [{record['folder']}]({record['folder']}/report.md): "
                           f"{answer['sentence'] if answer else 'no round finished on both sides'}")
            else:
                verdict = "not run against each other (compare --best-of-each runs that comparison)"
            out.append(f"{head}; {verdict}.")
    return out


def intervals(grid: dict[str, Any], comparisons: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """One verdict-plot row per setting and worker count that has a native ÷ Horovod answer."""
    labels = [(named(grid, s), s["folder"]) for s in grid["settings"]] + [
        (f"{model}: each backend at its best", best["folder"]) for model, best in grid.get("best", {}).items()]
    return [(f"{label}, {workers} worker(s)", answer) for label, folder in labels for workers in grid["workers"]
            if (answer := comparisons[folder]["speed"].get(str(workers)))]


UNITS = {"bucket_mb": "MiB", "cycle_time_ms": "ms"}


def _value(name: str, value: Any) -> str:
    if isinstance(value, float):
        return "framework default" if value == 0 else f"{value:g} {UNITS.get(name, '')}".strip()
    return text.option(value)


def markdown(grid: dict[str, Any], comparisons: dict[str, dict[str, Any]]) -> str:
    varied = ", ".join(map(text.flag, grid["varied"]))
    title = "per model" if grid["varied"] == ["model"] else f"tuning grid: {varied}"
    buckets = (" A bucket size of 0 leaves each framework its own default (DDP 25 MiB, Horovod 0.28.1 128 MiB)."
               if "bucket_mb" in grid["varied"] else "")
    best = best_lines(grid, comparisons)
    cells = [(named(grid, s), comparisons[s["folder"]], n) for s in grid["settings"] for n in grid["workers"]]
    out = [f"# Native DDP or Horovod, {title} ({grid['grid_id']})", "",
           f"One whole comparison per setting ({grid['repeats']} repeat(s) of every arm, interleaved), run one after "
           "another; each setting's report is in its folder. Within a setting the backends ran side by side and "
           "their ratio is paired round by round; between settings the runs are minutes apart, so compare settings "
           f"by their intervals, which carry the machine's drift.{buckets}", "",
           report.verdict_table(cells), "", table(grid, comparisons), "",
           *(["**Each backend at its best** (the highest mean steady samples/s of its arm over the settings of one "
              "model):", "", *best, ""] if best else []),
           *([f"Not run: {', '.join(grid['budget_cut'])}. The settings before them had spent the check's "
              "--budget-min, so these would have ended past it.", ""] if grid.get("budget_cut") else []),
           *([report.ONE_RANK_NOTE, ""] if grid["workers"] == [1] else []),
           *([report.TIMELINE_NOTE, ""] if any(report.timeline_on(c) for c in comparisons.values()) else []),
           f"Plot: `{plots.VERDICTS}`, native ÷ Horovod per setting with its interval.",
           "", "Reports: " + ", ".join(
               f"[{s['folder']}]({s['folder']}/report.md)" for s in grid["settings"]), ""]
    return "\n".join(out)


def named(grid: dict[str, Any], setting: dict[str, Any]) -> str:
    """The options a setting varies, as the tables name it: `bucket-mb 25 MiB, compression fp16`."""
    return ", ".join(f"{name.replace('_', '-')} {_value(name, setting[name])}" for name in grid["varied"])


def render(grid_dir: str | Path) -> str:
    """Write report.md into the grid's folder; return the Markdown."""
    grid, comparisons = load(grid_dir)
    written = markdown(grid, comparisons)
    (Path(grid_dir) / "report.md").write_text(written)
    per = "model" if grid["varied"] == ["model"] else "setting"
    plots.plot_intervals(intervals(grid, comparisons), Path(grid_dir) / plots.VERDICTS,
                         f"native ÷ Horovod, steady samples/s per {per}, with its 95 % interval"
                         + (f"\n{runs.hardware(next(iter(comparisons.values())))}" if comparisons else ""))
    return written
