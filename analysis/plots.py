"""The comparison's plots: verdicts.png, loss.png, throughput.png and overhead.png, from comparison.json alone; the
grid and the sweep draw their verdicts.png with `plot_intervals` too."""

import statistics
from pathlib import Path
from typing import Any

from analysis import parity, speed, text
from analysis.runs import PHASE_LABELS, arm_order, finished, median_phases
from contract.config import BACKENDS


def pyplot() -> Any:
    """matplotlib.pyplot, imported when a plot is drawn (a second), so --help and refusals answer at once."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on servers or in CI
    import matplotlib.pyplot as plt

    return plt


VERDICTS = "verdicts.png"


def comparison_intervals(comparison: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The rows of a comparison's verdict plot: native ÷ Horovod per worker count, then each A/A control."""
    out = []
    for workers in comparison["settings"]["workers"]:
        if answer := comparison["speed"].get(str(workers)):
            out.append((f"native ÷ Horovod, steady, {workers} worker(s)", answer))
        if answer := comparison.get("end_to_end", {}).get(str(workers)):
            out.append((f"native ÷ Horovod, end to end, {workers} worker(s)", answer))
        for arm, estimate in comparison.get("noise_floor", {}).get(str(workers), {}).items():
            out.append((f"A/A: {arm} ÷ itself, {workers} worker(s)", {**estimate, "names": (arm, "its twin")}))
    return out


def in_words(estimate: dict[str, Any]) -> str:
    """A row's verdict as a reader says it, the interval from the winner's side: `Horovod 54 % faster (18–102 %)`,
    `undecided (−5.1 to +3.2 %)`, or for an A/A row `no difference found (…)`."""
    a, b = estimate.get("names", ("native", "Horovod"))
    r, (lo, hi) = estimate["ratio"], estimate["ci95"]
    if lo > 1.0:
        return f"{a} {100 * (r - 1):.1f} % faster ({100 * (lo - 1):.1f}–{100 * (hi - 1):.1f} %)"
    if hi < 1.0:
        return f"{b} {100 * (1 / r - 1):.1f} % faster ({100 * (1 / hi - 1):.1f}–{100 * (1 / lo - 1):.1f} %)"
    said = "no difference found" if "names" in estimate else "undecided"
    return f"{said} ({100 * (lo - 1):+.1f} to {100 * (hi - 1):+.1f} %)".replace("-", "−")


def plot_intervals(rows: list[tuple[str, dict[str, Any]]], path: Path, title: str) -> None:
    """One row per verdict: the paired ratio and its 95 % interval, with 1.0 (no difference) marked, so that a row
    whose interval crosses the line (drawn grey) is undecided at a glance."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 1.6 + 0.45 * max(1, len(rows))))
    for y, (label, estimate) in enumerate(rows):
        ratio = estimate["ratio"]
        if estimate["ci95"] is None:
            ax.plot([ratio], [y], "o", color="grey")
            ax.text(ratio, y, "  no interval (one round)", va="center", fontsize="small")
            continue
        lo, hi = estimate["ci95"]
        undecided = lo <= 1.0 <= hi
        ax.errorbar([ratio], [y], xerr=[[ratio - lo], [hi - ratio]], fmt="o", capsize=4,
                    color="grey" if undecided else "tab:blue")
        ax.text(hi, y, f"  {in_words(estimate)}", va="center", fontsize="small")
    ax.axvline(1.0, color="black", linewidth=1, linestyle="--")
    ends = [x for _, e in rows for x in (e["ci95"] or [e["ratio"]])] + [1.0]
    span = max(ends) - min(ends) or 0.1
    ax.set_xlim(min(ends) - 0.05 * span, max(ends) + 0.7 * span)  # room for the figures written right of each bar
    ax.set_yticks(range(len(rows)), [label for label, _ in rows])
    ax.invert_yaxis()
    ax.set(xlabel="ratio and its 95 % interval (right of the dashed 1: the first named is faster; grey: undecided)",
           title=title)
    if not rows:
        nothing(ax, "no verdict: no round finished on both sides")
    save(fig, path)


def plot_losses(comparison: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    counts = comparison["settings"]["workers"]
    fig, axes = plt.subplots(1, len(counts), figsize=(6 * len(counts), 4), squeeze=False)
    for ax, workers in zip(axes[0], counts):
        by_arm = finished(comparison, workers)
        for arm, runs in by_arm.items():
            losses = runs[0]["step_losses"]
            ax.plot(range(1, len(losses) + 1), losses, label=arm, linewidth=1, alpha=0.8)
        verdict = comparison["parity"].get(str(workers))
        said = [f"parity {verdict['verdict']}, largest difference "
                f"{text.number(parity.largest(verdict))}"] if verdict else []
        if verdict and verdict.get("floor"):
            said.append(f"floor {text.number(verdict['floor']['largest'])} (summation order)")
        ax.set(title="\n".join([f"{workers} worker(s): lines overlap where the losses agree", "; ".join(said)]).strip(),
               xlabel="step", ylabel="training loss (mean over ranks)", yscale="log")
        legend_or(ax, bool(by_arm), "no run finished")
    save(fig, path)


def plot_throughput(comparison: dict[str, Any], path: Path) -> None:
    """A bar per arm and worker count at the median steady samples/s, every run a dot on its bar."""
    plt = pyplot()
    counts = comparison["settings"]["workers"]
    by_count = [finished(comparison, workers) for workers in counts]
    arms = sorted({arm for by_arm in by_count for arm in by_arm}, key=arm_order)
    fig, ax = plt.subplots(figsize=(max(6.0, 3 + 0.6 * len(counts) * len(arms)), 4.5))
    width = 0.8 / max(1, len(arms))
    for i, arm in enumerate(arms):
        xs, medians = [], []
        for j, by_arm in enumerate(by_count):
            if arm not in by_arm:
                continue
            x = j + i * width
            values = [r[speed.METRIC] for r in by_arm[arm]]
            xs.append(x)
            medians.append(statistics.median(values))
            # Spread the dots a little across the bar so that equal values stay visible as several runs.
            offsets = [0.0] if len(values) == 1 else [
                width * 0.5 * (k / (len(values) - 1) - 0.5) for k in range(len(values))]
            ax.scatter([x + o for o in offsets], values, s=14, color="black", zorder=3,
                       label="one run" if not ax.collections else None)
        ax.bar(xs, medians, width * 0.95, label=arm, color=f"C{i}", alpha=0.85)
    ax.set_xticks([j + width * (len(arms) - 1) / 2 for j in range(len(counts))], [f"{w} worker(s)" for w in counts])
    ax.set(ylabel="steady-state samples/s, total (median step)", title="Steady samples/s by arm (dots: runs)")
    legend_or(ax, bool(arms), "no run finished", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    save(fig, path)


def plot_overhead(comparison: dict[str, Any], path: Path) -> None:
    """One stacked horizontal bar per worker count and distributed arm: the median time to each phase."""
    plt = pyplot()
    bars = [(f"{workers} worker(s), {arm}", median_phases(arm_runs)) for workers in comparison["settings"]["workers"]
            for arm, arm_runs in finished(comparison, workers).items() if arm_runs[0]["backend"] in BACKENDS]
    fig, ax = plt.subplots(figsize=(9, 1.5 + 0.45 * max(1, len(bars))))
    ys = range(len(bars))
    previous = [0.0] * len(bars)
    for k, (name, label) in enumerate(PHASE_LABELS.items()):
        widths = [m[name] - p for (_, m), p in zip(bars, previous)]
        ax.barh(ys, widths, left=previous, color=f"C{k}", label=label, height=0.6)
        previous = [m[name] for _, m in bars]
    for y, total in zip(ys, previous):
        ax.text(total, y, f" {total:.1f} s", va="center", fontsize="small")
    ax.set_yticks(list(ys), [name for name, _ in bars])
    ax.invert_yaxis()  # the first worker count at the top, as in the report
    ax.set(xlabel="seconds from launcher start (median over runs)",
           title="Where the time goes, from launch to return")
    if bars:
        ax.set_xlim(0, 1.15 * max(previous))  # room for the totals written after each bar
    legend_or(ax, bool(bars), "no distributed run finished", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    save(fig, path)


def plot_elastic(runs: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """A panel per elastic mode: samples/s (2 s window) and the world size over time, each trial a line, from its
    `series` [(s, world, samples/s)]; the loss and the return marked."""
    plt = pyplot()
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.6 * max(1, len(runs))), squeeze=False)
    for ax, (mode, trials) in zip(axes[:, 0], runs.items()):
        world_ax = ax.twinx()
        for i, trial in enumerate(trials):
            if not trial["series"]:
                continue
            times, worlds, rates = zip(*trial["series"])
            ax.plot(times, rates, lw=0.8, color=f"C{i}", label=f"trial {trial['index']}")
            world_ax.step(times, worlds, where="post", lw=1.5, ls="--", color=f"C{i}")
            for moment, style in (("killed_s", ":"), ("returned_s", "-.")):
                if trial.get(moment) is not None:
                    ax.axvline(trial[moment], color=f"C{i}", ls=style, lw=0.8)
        ax.set(title=f"{mode}: node lost (dotted), back (dash-dot)", ylabel="samples/s")
        world_ax.set(ylabel="world (dashed)")
        world_ax.set_ylim(0, 1 + max((w for t in trials for _, w, _ in t["series"]), default=1))
        legend_or(ax, any(t["series"] for t in trials), "no step recorded", loc="lower right")
    axes[-1, 0].set_xlabel("seconds from the run's start")
    save(fig, path)


def save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")  # a legend outside the axes stays in the picture
    pyplot().close(fig)


def legend_or(ax: Any, shown: bool, missing: str, **where: Any) -> None:
    """The axes' legend where something was drawn on them, else `missing` in their middle."""
    if shown:
        ax.legend(fontsize="small", **where)
    else:
        nothing(ax, missing)


def nothing(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center")
