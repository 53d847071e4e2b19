"""What an elastic run's timeline says: the loss's cost, the world it went on with, its regrowth, and the table.

A timeline is rank 0's events, one per line: `start` (a world formed: world, epoch, offset), `step` (world, epoch,
the epoch's offset after it, n samples) and `done` (optionally with the test accuracy).
"""

import statistics

from analysis import text


def _first_step_of_a_world_formed(events: list[dict], after: float, world: int | None = None) -> dict | None:
    """The first step of a world formed after `after` (of `world` ranks when given); a world that broke up before
    its first step counts for nothing."""
    current = None
    for event in events:
        if event["ev"] == "start":
            current = event if event["t"] > after and world in (None, event["world"]) else None
        elif event["ev"] == "step" and current is not None and event["world"] == current["world"]:
            return event
    return None


def figures(events: list[dict], killed: float | None, returned: float | None, epochs: int, samples: int,
            full: int) -> dict:
    """Seconds without progress after the loss, the world it went on with, seconds from the node's return to a step
    at full size, samples trained more than once, whether it finished, and the final test accuracy."""
    steps = [e for e in events if e["ev"] == "step"]
    done = next((e for e in events if e["ev"] == "done"), None)
    out = {"finished": done is not None, "stalled_s": None, "continued_world": None, "regrown_s": None,
           # only a finished run has trained every sample once: the rest is what it trained again
           "samples_twice": sum(e["n"] for e in steps) - epochs * samples if done else None,
           "worlds": sorted({e["world"] for e in steps}), "accuracy": (done or {}).get("accuracy")}
    if killed is None:
        return out
    resumed = _first_step_of_a_world_formed(events, killed)
    if resumed:
        out["stalled_s"] = round(resumed["t"] - killed, 1)
        out["continued_world"] = resumed["world"]
    if returned is not None and resumed and resumed["world"] < full:
        regrown = _first_step_of_a_world_formed(events, returned, full)
        if regrown:
            out["regrown_s"] = round(regrown["t"] - returned, 1)
    return out


def membership(events: list[dict], origin: float, killed: float | None, returned: float | None) -> list[dict]:
    """The run's membership events in seconds from `origin`: each world formed (its size, and where in the data it
    started), the node's loss and its return."""
    out = [{"t_s": round(e["t"] - origin, 2), "event": "world formed", "world": e["world"], "epoch": e["epoch"],
            "offset": e["offset"]} for e in events if e["ev"] == "start"]
    out += [{"t_s": round(moment - origin, 2), "event": name}
            for name, moment in (("node lost", killed), ("node back", returned)) if moment is not None]
    return sorted(out, key=lambda e: e["t_s"])


def throughput(events: list[dict], origin: float, window_s: float = 2.0) -> list[tuple[float, int, float]]:
    """(seconds from `origin`, world, samples/s over the last `window_s`) at each step, and 0 where no step came
    for longer than the window: the plot's two lines."""
    steps = [e for e in events if e["ev"] == "step"]
    points: list[tuple[float, int, float]] = []
    first, in_window = 0, 0  # the window's first step, and the samples from it to the current step
    for i, step in enumerate(steps):
        if i and step["t"] - steps[i - 1]["t"] > window_s:
            before = steps[i - 1]
            points += [(round(before["t"] + window_s - origin, 2), before["world"], 0.0),
                       (round(step["t"] - origin, 2), step["world"], 0.0)]
        in_window += step["n"]
        while steps[first]["t"] <= step["t"] - window_s:
            in_window -= steps[first]["n"]
            first += 1
        points.append((round(step["t"] - origin, 2), step["world"], round(in_window / window_s, 1)))
    return points


def spread(values: list, form: str = ".1f") -> str:
    """Median and range, or a dash when there is nothing to show."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return "–"
    return f"{statistics.median(values):{form}}" + (
        f" ({values[0]:{form}}–{values[-1]:{form}})" if len(values) > 1 else "")


def table(results: list[dict], modes: list[str], fixed: dict[str, float | None] | None = None,
          reasons: dict[str, str] | None = None) -> str:
    """One row per mode: median (range) of its trials. `fixed` adds the final test accuracy beside the fixed-size
    run's; `reasons` names the modes that could not run here."""
    head = ["mode", "trials", "finished", "s without progress after the loss", "went on with world",
            "s from return to full size", "samples trained twice"] + (
        ["test accuracy (fixed-size run)"] if fixed is not None else [])
    body = []
    for mode in modes:
        rows = [r for r in results if r["mode"] == mode]
        if reasons and mode in reasons:
            body.append([mode, 0, "–", reasons[mode]])
            continue
        worlds = ", ".join(str(r["continued_world"] if r["continued_world"] is not None else "–") for r in rows)
        cells = [mode, str(len(rows)), f"{sum(r['finished'] for r in rows)}/{len(rows)}",
                 spread([r["stalled_s"] for r in rows]), worlds, spread([r["regrown_s"] for r in rows]),
                 spread([r["samples_twice"] for r in rows], ".0f")]
        if fixed is not None:
            reference = fixed.get(mode)
            cells.append(spread([r.get("accuracy") for r in rows], ".4f")
                         + (f" ({reference:.4f})" if reference is not None else " (–)"))
        body.append(cells)
    return text.md_table(head, body)
