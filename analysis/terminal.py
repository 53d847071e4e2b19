"""What compare prints once it is done: the verdicts first, a few lines per worker count, and where the report is.
The full report stays in report.md."""

import statistics
from pathlib import Path
from typing import Any

from analysis import parity, runs, speed, stats, text

PLOTS = "verdicts.png, loss.png, throughput.png, overhead.png, phases.png"


def summary(comparison: dict[str, Any], run_dir: Path) -> list[str]:
    """At most 15 lines for one worker count, verdict first."""
    s = comparison["settings"]
    where = "on Ray" if "ray" in s["launchers"] else "under " + " and ".join(speed.compared_arms(s["launchers"]))
    model = runs.model(comparison)
    size = f" ({text.size(model['gradient_bytes'])} of gradient)" if model.get("gradient_bytes") else ""
    out = [f"Native DDP or Horovod? {model['name']}{size}, {where}, {runs.rounds(comparison)} round(s), "
           f"{text.duration(comparison['wall_time_s'])}:"]
    for n in s["workers"]:
        out += [f"{n} worker(s):", *(f"  {line}" for line in per_workers(comparison, n))]
    if cut := s.get("pilot_cut"):
        out.append(f"--budget-min cut the pilot: {cut['rounds']} of {s['repeats']} round(s) ran at {cut['workers']} "
                   "worker(s), and each verdict stands on those")
    failed = sum(r["status"] != "ok" for r in comparison["runs"])
    if failed:
        out.append(f"{failed} run(s) failed: the report's Failed runs says why")
    out.append(f"report: {run_dir / 'report.md'} (plots beside it: {PLOTS}; each run's own lines in its folder"
               + (", Ray's in ray.log)" if (run_dir / "ray.log").exists() else ")"))
    return out


def per_workers(comparison: dict[str, Any], n: int) -> list[str]:
    key = str(n)
    answer = comparison["speed"].get(key)
    said = answer["sentence"] if answer else "no verdict: no round finished on both sides"
    out = [f"speed (steady samples/s): {said}"]
    if whole := comparison.get("end_to_end", {}).get(key):
        out.append(f"end to end (launch to return): {whole['sentence']}")
    if cost := comparison.get("cpu_cost", {}).get(key):
        out.append(f"CPU cost: {cost['sentence']}")
    if found := comparison.get("efficiency", {}).get(key):
        out.append("efficiency (samples/s ÷ the ceiling's, nothing averaged): " + ", ".join(
            f"{arm} {e['ratio']:.2f}" + stats.interval_text(e)
            for arm, e in found.items()) + ("; above 1: faster than the ceiling, within its interval or the "
                                            "ceiling's runs were slowed (the report says which)"
                                            if any(e["ratio"] > 1 for e in found.values()) else ""))
    if floor := comparison.get("noise_floor", {}).get(key):
        width = stats.resolution(floor)
        out.append("A/A resolution: one round, unknown" if width is None else f"A/A resolution: ±{100 * width:.1f} %")
    if verdict := comparison["parity"].get(key):
        largest = parity.largest(verdict)
        floor = parity.floor_words(verdict)
        out.append(f"parity: {verdict['verdict']}" + (f", largest step-loss difference {text.number(largest)} over "
                                                      f"{verdict['steps']} steps" if largest is not None else "")
                   + (f", {floor}" if floor else "") + (f" ({verdict['why']})" if verdict.get("why") else ""))
    if answer and (stage := answer.get("two_stage")):
        out.append(f"rounds: a pilot of {stage['pilot']}; " + (
            f"its spread asked for {stage['needed']} in all for ±{100 * stage['target']:g} %, {stage['extra']} added"
            + (" (as many as --budget-min allowed)" if stage["budget_limited"] else "")
            if stage["needed"] else "too few finished pairs for a spread, none added"))
    return out


def grid_summary(grid: dict[str, Any], comparisons: dict[str, dict[str, Any]], grid_dir: Path) -> list[str]:
    """A tuning grid or a --models run: one line per setting and worker count, the verdict first."""
    out = [f"Native DDP or Horovod? {len(grid['settings'])} comparison(s), varying "
           + ", ".join(map(text.flag, grid["varied"])) + ":"]
    for setting in grid["settings"]:
        comparison = comparisons[setting["folder"]]
        named = ", ".join(f"{name.replace('_', '-')} {setting[name]}" for name in grid["varied"])
        for n in grid["workers"]:
            answer = comparison["speed"].get(str(n))
            parity = comparison["parity"].get(str(n), {}).get("verdict", "not judged")
            out.append(f"  {named}, {n} worker(s): {answer['sentence'] if answer else 'no verdict'}; parity {parity}")
    return out + _grid_end(grid, grid_dir)


def check_table(grid: dict[str, Any], comparisons: dict[str, dict[str, Any]], grid_dir: Path) -> list[str]:
    """The GPU check's one table (ray_jobs/gpu_check.py): per setting and worker count, each backend's mean steady
    samples/s, native ÷ Horovod paired, parity, and what averaged the gradients."""
    rows = []
    for setting in grid["settings"]:
        comparison = comparisons[setting["folder"]]
        a, b = speed.compared_arms(comparison["settings"]["launchers"])
        named = ", ".join(f"{name} {setting[name]}" for name in grid["varied"]) or setting["folder"]
        for n in grid["workers"]:
            finished = runs.finished(comparison, n)
            means = [f"{statistics.mean(r[speed.METRIC] for r in finished[arm]):.1f}" if arm in finished else "failed"
                     for arm in (a, b)]
            answer = comparison["speed"].get(str(n))
            ratio = "—" if not answer else f"{answer['ratio']:.3f}" + (
                f" ({answer['ci95'][0]:.3f}–{answer['ci95'][1]:.3f})" if answer["ci95"] else " (one round)")
            parity = comparison["parity"].get(str(n), {}).get("verdict", "not judged")
            # One rank averages nothing, whatever library the group was made with.
            by = "one rank each: nothing" if n == 1 else "/".join(
                finished[arm][0].get("averaged_by") or "?" if arm in finished else "?" for arm in (a, b))
            found = comparison.get("efficiency", {}).get(str(n), {})
            efficiency = " / ".join(f"{found[arm]['ratio']:.2f}" if arm in found else "—" for arm in (a, b))
            rows.append([named, n, *means, ratio, parity, by, efficiency])
    head = ["setting", "workers", "native samples/s", "Horovod samples/s", "native ÷ Horovod (95 % CI)", "parity",
            "averaged by", "efficiency native / Horovod"]
    return text.md_table(head, rows).split("\n") + _grid_end(grid, grid_dir)


def _grid_end(grid: dict[str, Any], grid_dir: Path) -> list[str]:
    """The lines after a grid's verdicts: the settings --budget-min left out, what 1 worker shows, the report."""
    cut = [f"not run (--budget-min spent): {', '.join(grid['budget_cut'])}"] if grid.get("budget_cut") else []
    one = ["1 worker: each backend ran one rank, so no gradient averaging was measured; what shows is that both paths "
           "build, train and agree, and each framework's own cost per step"] if grid["workers"] == [1] else []
    return cut + one + [f"report: {grid_dir / 'report.md'} (each setting's report in its folder)"]
