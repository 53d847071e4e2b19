"""Why one backend is faster, and how far each is from this machine's limit: each backend's efficiency against the
ceiling (the same ranks, launched alike, averaging nothing), the step's phases paired by round against the ceiling
and against each other, the CPU of each thread group, and one paragraph that names only what the intervals decide;
phases.png draws each arm's step as a stacked bar."""

import statistics
from pathlib import Path
from typing import Any

from analysis import plots, runs, speed, stats, text
from contract.phases import STEP_PHASES, THREAD_GROUPS

PARTS = (*STEP_PHASES, "remainder")
"""A step's parts, as the table and the picture stack them: the phases, then what they leave."""
MATTERS = 0.01
"""A part is named as a cause only where its whole interval is on one side of 0 and it moves at least this share of
the step: a 0.05 ms difference in loading a batch can be certain and still explain nothing."""
PHASES_PNG = "phases.png"
NO_PARITY = ("The ceiling trains a different model on each rank (nothing is averaged), so parity does not apply to "
             "it, and its loss and accuracy, of models that each saw one shard, are not comparable with the other "
             "arms'; it only says how fast this machine runs these ranks when nothing is averaged.")


def pairs(comparison: dict[str, Any]) -> list[tuple[str, str]]:
    """The pairs the step is split for: native − Horovod, then each backend − its ceiling where the ceiling ran."""
    a, b = speed.compared_arms(comparison["settings"]["launchers"])
    ran = {r["arm"] for r in comparison["runs"] if r["status"] == "ok"}
    return [(a, b), *((arm, speed.ceiling_of(arm)) for arm in (a, b) if speed.ceiling_of(arm) in ran)]


def difference(comparison: dict[str, Any], workers: int, a: str, b: str) -> dict[str, Any] | None:
    """a − b per part and for the whole step, in ms, paired by round: each round's value, their mean and its 95 %
    interval (None from one round); with the rounds, what a part must move to count (MATTERS of b's median step) and
    the parts whose whole interval lies on one side of 0 by that much. None where no round has both."""
    finished = runs.finished(comparison, workers)
    x, y = ({r["round"]: r["epochs"][-1]["phases_s"] for r in finished.get(arm, []) if r["epochs"][-1].get("phases_s")}
            for arm in (a, b))
    rounds = sorted(set(x) & set(y))
    if not rounds:
        return None
    values = {name: [1000 * (x[r][name] - y[r][name]) for r in rounds] for name in (*PARTS, "step")}
    found = {name: stats.mean_interval(v) for name, v in values.items()}
    least = MATTERS * 1000 * statistics.median(y[r]["step"] for r in rounds)
    return {"rounds": len(rounds), "values": values, "ms": found, "least_ms": least,
            "decided": sorted(decided(found, least), key=lambda name: -abs(found[name][0]))}


def decided(found: dict[str, tuple[float, tuple[float, float] | None]], least: float) -> list[str]:
    """The parts whose mean (ms) moved at least `least` and whose whole interval lies on one side of 0."""
    return [name for name in PARTS if (ci := found[name][1]) and (ci[0] > 0 or ci[1] < 0)
            and abs(found[name][0]) >= least]


def signed(mean: float, ci: tuple[float, float] | None) -> str:
    """A difference in ms with its interval where there is one: `+1.2 (+0.3 – +2.1)`."""
    return f"{mean:+.1f}" + (f" ({ci[0]:+.1f} – {ci[1]:+.1f})" if ci else "")


def difference_line(a: str, b: str, found: dict[str, Any]) -> str:
    """One pair's parts in ms with their intervals, and what they decide."""
    cells = [f"{name} {signed(mean, ci)}" for name, (mean, ci) in found["ms"].items()]
    said = ("; ".join(f"{name} {found['ms'][name][0]:+.1f} ms" for name in found["decided"])
            + " (whole intervals on one side of 0, each at least 1 % of the step)" if found["decided"] else
            "no part differs beyond its interval" if found["rounds"] > 1 else "one round: no interval")
    return (f"{a} − {b}, paired by round over {found['rounds']} round(s), ms (95 % CI): " + " | ".join(cells)
            + f". Decided: {said}.")


def efficiency_line(comparison: dict[str, Any], workers: int) -> str | None:
    """Each backend's samples/s ÷ its ceiling's, paired by round, with the ceiling's own samples/s."""
    found = comparison.get("efficiency", {}).get(str(workers))
    if not found:
        return None
    parts = [f"{arm} {e['ratio']:.2f}" + (f" ({e['ci95'][0]:.2f}–{e['ci95'][1]:.2f}, {e['repeats']} rounds)"
                                          if e["ci95"] else " (one round: no interval)") for arm, e in found.items()]
    limits = sorted({(e["ceiling"], e["ceiling_samples_per_s"]) for e in found.values()})
    ceiling = ", ".join(f"{name} {rate:,.0f} samples/s" for name, rate in limits)
    shared = (" On Ray one ceiling, under Ray Train, serves both backends, so Horovod's efficiency there also counts "
              "what hvd.init() starts and RayExecutor's placement; under horovodrun its ceiling runs hvd.init() too."
              if "horovod" in found else "")  # Horovod's arm on Ray
    return (f"**Efficiency** (steady samples/s ÷ the ceiling's, paired by round, 95 % CI): {'; '.join(parts)}. The "
            f"ceiling ({ceiling}) is the same ranks, launched alike, each training its own shard with no gradient "
            f"averaging: this machine's limit for this model and worker count.{above(found)}{shared} {NO_PARITY}")


def above(found: dict[str, dict[str, Any]]) -> str:
    """What an efficiency above 1 means, where one is: the arm ran faster than the limit it is measured against."""
    over = [arm for arm, e in found.items() if e["ratio"] > 1]
    if not over:
        return ""
    beyond = [arm for arm in over if found[arm]["ci95"] and found[arm]["ci95"][0] > 1]
    why = (f" {' and '.join(beyond)} beat the ceiling beyond the interval: a run of the ceiling was slowed by "
           "something other than averaging (the machine's load), so the limit is understated there."
           if beyond else " That is within its interval of 1: the rounds cannot tell it from the ceiling.")
    return f" Above 1 ({', '.join(over)}): faster than the ceiling, which averages nothing.{why}"


def ceilings_line(comparison: dict[str, Any], workers: int) -> str | None:
    """Horovod's ceiling ÷ DDP's, where both ran (horovodrun beside torchrun or mp.spawn): the same training with
    nothing averaged, apart from hvd.init() and the background thread it starts; None otherwise."""
    s = comparison["settings"]
    pilot = s["repeats"] if s.get("target_ci") else None
    native, horovod = speed.compared_arms(s["launchers"])
    b, a = speed.ceiling_of(native), speed.ceiling_of(horovod)
    if a == b or not (found := speed.estimate(comparison["runs"], workers, a, b, pilot)):
        return None  # on Ray one ceiling serves both
    interval = f" (95 % CI {found.ci95[0]:.2f}–{found.ci95[1]:.2f}, {found.n} rounds)" if found.ci95 else ""
    return (f"**The runtimes alone**: {a} ÷ {b}, steady samples/s, {found.ratio:.2f}{interval}: the same ranks "
            "training alone, with nothing averaged, apart from what hvd.init() starts (its background thread, "
            "which cycles every --cycle-time-ms whether or not there is anything to average) and what each launcher "
            "does.")


def thread_table(comparison: dict[str, Any], workers: int) -> str | None:
    """Each arm's CPU-seconds per 1,000 samples by thread group, the median over its runs; None where no run
    recorded them."""
    if not (found := by_thread(comparison, workers)):
        return None
    rows = [[arm, count, *(f"{m:.3f}" for m in medians.values()), f"{sum(medians.values()):.3f}"]
            for arm, (count, medians) in found.items()]
    note = ("**CPU by thread** (CPU-seconds per 1,000 samples over every rank, the last epoch's steady window, the "
            "median over the arm's runs). Threads are grouped by when they first appeared, since their names do not "
            "tell them apart: before the process group (the launcher's and the runtime's; under Ray Train, which forms "
            "the group before the training function, the group's too), with the group or hvd.init (the framework's "
            "own), or once training began (torch's intra-op and autograd threads, the data loader's). All threads "
            "reads a few percent above the arm's CPU s per 1k samples: the window runs from the first timed step to "
            "the epoch's end, the moments between steps included (the progress line's loss allreduce every --log-every "
            "steps, the watchdog's beat), which the steps' own CPU time leaves out.")
    return note + "\n\n" + text.md_table(["arm", "runs", *THREAD_GROUPS, "all threads"], rows)


def by_thread(comparison: dict[str, Any], workers: int) -> dict[str, tuple[int, dict[str, float]]]:
    """Per arm that recorded them, its runs' count and each thread group's median CPU-seconds per 1,000 samples over
    all ranks."""
    out = {}
    for arm, arm_runs in runs.finished(comparison, workers).items():
        if values := [v["all_ranks"] for v in runs.last_epochs(arm_runs, "cpu_s_per_1k_by_thread")]:
            out[arm] = len(values), {name: statistics.median(v[i] for v in values)
                                     for i, name in enumerate(THREAD_GROUPS)}
    return out


def paragraph(comparison: dict[str, Any], workers: int) -> str | None:
    """The cause, in words: native − Horovod and each backend − its ceiling split into the parts the intervals
    decide, then where the CPU went; None where no pair has a round."""
    said = []
    for a, b in pairs(comparison):
        if not (found := difference(comparison, workers, a, b)):
            continue
        step, ci = found["ms"]["step"]
        span = f"95 % CI {ci[0]:+.1f} – {ci[1]:+.1f} ms, " if ci else ""
        parts = (", ".join(f"{name} {found['ms'][name][0]:+.1f} ms" for name in found["decided"]) if found["decided"]
                 else "no single part beyond its interval")
        said.append(f"{a}'s step is {abs(step):.1f} ms {'longer' if step > 0 else 'shorter'} than {b}'s ({span}"
                    f"{found['rounds']} rounds): {parts}")
    if not said:
        return None
    a, b = speed.compared_arms(comparison["settings"]["launchers"])
    if a in (threads := by_thread(comparison, workers)) and b in threads:
        mine, theirs = threads[a][1], threads[b][1]
        said.append("CPU-seconds per 1,000 samples, " + ", ".join(
            f"{name}: {a} {mine[name]:.3f}, {b} {theirs[name]:.3f}" for name in THREAD_GROUPS
            if max(mine[name], theirs[name]) > 0))
    return ("**Why** (a part is named only where its whole 95 % interval is on one side of 0 and it is at least 1 % of "
            "the step): " + ". ".join(said) + ".")


def plot_phases(comparison: dict[str, Any], path: Path) -> None:
    """A stacked bar per arm and worker count, each part of the step a colour (the mean over the arm's runs of its
    last epoch's figures, so that the parts stack to the mean step), with the 95 % interval of that mean on each
    total; nothing where no run recorded its step's parts."""
    plt = plots.pyplot()
    bars = []
    for workers in comparison["settings"]["workers"]:
        finished = runs.finished(comparison, workers)
        for arm in [a for a in finished if a in speed.CEILINGS] + [a for a in finished if a in speed.DISTRIBUTED_ARMS]:
            if values := runs.last_epochs(finished[arm], "phases_s"):
                bars.append((f"{arm}\n{workers} w", values))
    if not bars:
        return  # comparisons from before the step was taken apart: no picture, rather than an empty one
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(bars) + 2), 4.2))
    for x, (label, values) in enumerate(bars):
        bottom = 0.0
        for i, name in enumerate(PARTS):
            height = 1000 * statistics.fmean(v[name] for v in values)
            ax.bar(x, height, bottom=bottom, color=f"C{i}", label=name if x == 0 else None)
            bottom += height
        mean, ci = stats.mean_interval([1000 * v["step"] for v in values])
        if ci:
            ax.errorbar(x, mean, yerr=[[mean - ci[0]], [ci[1] - mean]], color="black", capsize=4)
    ax.set_xticks(range(len(bars)), [label for label, _ in bars])
    ax.set_ylabel("ms per step (mean over runs)")
    ax.set_title("A step taken apart: the ceiling averages nothing")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    plots.save(fig, path)
