"""The schedule replay (schedule_replay.py) checked against every wait a comparison measured: each run's
own recorded backward (results.json's `schedule`) replayed under a link fitted to that run's averaging alone
(`overlap.comm_alone_s`), its wait and native − Horovod's step difference predicted, and set beside the measured ones,
with the simplest rival's beside them (the wait is the averaging alone: nothing hidden).

    python -m experiments.gpu_model.schedule_check results/<run-id> results/<grid-id> \
        --output docs/results/schedule-check.md

A point is judged only where it was measured precisely, and matches within the same bar (BAR, FLOOR_MS); points
measured less precisely are listed as such and counted apart. Trains nothing.
"""

import logging
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis import runs, speed, stats, text
from contract import results
from contract.config import ConfigError
from contract.options import fusion_bytes
from contract.results import HOROVOD_TIMELINE
from experiments.gpu_model import schedule_replay
from experiments.gpu_model.schedule_replay import MIB, Gradient, Link, Schedule
from runtime import cli

log = logging.getLogger(__name__)
BAR = 0.10
"""A prediction within 10 % of the measured figure matches; a measurement whose interval is within 10 % is precise."""
FLOOR_MS = 1.0
"""For a wait near 0, 10 % of it is below what either framework can place: Horovod's background thread wakes every
1 ms (HOROVOD_CYCLE_TIME's default), so a launch the replay puts in one cycle a run may put in the next. A wait within
1 ms of the measured one matches, and an interval within ±1 ms is precise."""
WIRE = {"native": {"none": 1.0, "fp16": 0.5, "bf16": 0.5}, "horovod": {"none": 1.0, "fp16": 0.5, "bf16": 1.0}}
"""The share of a float32 gradient's bytes each --compression puts on the wire (Horovod's bf16 sends float32:
docs/options.md)."""


@dataclass(frozen=True)
class Point:
    """One checked figure: what it is, the measured mean and interval over runs, the replay's under a link fitted to
    the averaging alone, the replay's under the link DDP's buckets got inside the step (contended), the simplest
    rival's (the averaging alone)."""

    setting: str
    arm: str
    what: str
    measured_ms: float
    interval_ms: tuple[float, float] | None
    replayed_ms: float
    contended_ms: float | None
    rival_ms: float | None
    runs: int
    unit: str = "ms"

    def allowed(self) -> float:
        """How far from the measured figure still counts as it: BAR of it, or FLOOR_MS where that is more (waits, not
        counts)."""
        return max(BAR * abs(self.measured_ms), FLOOR_MS if self.unit == "ms" else 0.0)

    @property
    def precise(self) -> bool:
        """Measured precisely enough to judge a prediction against: its interval within the bar."""
        return self.interval_ms is not None and (self.interval_ms[1] - self.interval_ms[0]) / 2 <= self.allowed()

    def matches(self, value: float | None) -> bool:
        """Whether `value` is within the bar of the measured figure, judged only where that was measured precisely."""
        return self.precise and value is not None and abs(value - self.measured_ms) <= self.allowed()


GLOO_IN_FLIGHT = 2
"""ProcessGroupGloo's threads (its Options' default): two of DDP's allreduces run at once on a CPU."""


def in_step_link(doc: dict[str, Any], ranks: int) -> Link | None:
    """The link a run's recorded allreduces (DDP's buckets, Horovod's fused buffers) got inside the step, beside
    backward: a per-message latency and a bandwidth fitted by least squares to each one's launch-to-finish time
    against its bytes on the wire (2(p-1) messages, 2(p-1)/p of the bytes); None where fewer than two sizes were
    recorded."""
    wire = WIRE[doc["backend"]][doc["config"].get("compression", "none")]
    found = [(2 * (ranks - 1) / ranks * wire * a["bytes"], a["finished_s"] - a["launched_s"])
             for step in doc["schedule"]["steps"] for a in step["allreduces"]
             if a.get("finished_s") is not None and a["finished_s"] > a["launched_s"]]
    if len({x for x, _ in found}) < 2:
        return None
    slope, intercept = statistics.linear_regression(*zip(*found))
    if slope <= 0:
        return None
    return Link(latency_s=max(0.0, intercept) / (2 * (ranks - 1)), bytes_per_s=1 / slope, ranks=ranks)


WAIT, COUNT, LAG = "wait after backward", "allreduces a step", "fused buffer's launch after its last gradient"
SHOWN = ((WAIT, "ms", 1000), (COUNT, "count", 1), (LAG, "ms", 1000))
"""The figures checked per arm, each with its unit and its scale from what a run records."""
PAIRED = "backward's compute + wait"
"""Checked as native − Horovod's, not per arm."""


def figures(run: dict[str, Any], doc: dict[str, Any], config: dict[str, Any], contended: Link | None
            ) -> dict[str, list[float | None]]:
    """A run's checked figures, each as (measured, replayed under a link fitted to its averaging alone, replayed under
    the `contended` link, the simplest rival's), seconds or counts: its wait, its backward's compute plus that wait
    (PAIRED, for native − Horovod), and where it recorded its allreduces how many a step and Horovod's launch after
    a fused buffer's last gradient; empty where it recorded no schedule or no averaging alone."""
    schedule, overlap = doc.get("schedule"), run.get("overlap") or {}
    if not schedule or not overlap.get("comm_alone_s"):
        return {}
    # the recorded backward: each gradient's median readiness and its bytes
    grads = [Gradient(at, schedule["gradient_bytes"][int(i)], int(i)) for i, at in schedule["ready_s"].items()]
    wire = WIRE[run["backend"]][config.get("compression", "none")]
    ranks, alone, end = run["workers"], overlap["comm_alone_s"], computed(run, schedule)
    # The link whose averaging alone, replayed, is the measured one (no per-message latency).
    fitted = 2 * (ranks - 1) / ranks * wire * sum(g.bytes for g in grads) / alone
    replayed, inside = (_replayed(run["backend"], grads, wire, end, link, config, doc) if link else None
                        for link in (Link(0.0, fitted, ranks), contended))
    wait = [schedule["wait_s"], replayed.wait_s, inside and inside.wait_s, alone]
    out = {WAIT: wait, PAIRED: [None if w is None else end + w for w in wait]}
    if steps := [s for s in schedule.get("steps", []) if s["allreduces"]]:  # the kept steps' recorded allreduces
        out[COUNT] = [statistics.fmean(len(s["allreduces"]) for s in steps), len(replayed.allreduces),
                      inside and len(inside.allreduces), None]
        if launches := fused_launches(schedule):
            out[LAG] = [statistics.fmean(lag for lag, _, _ in launches), replayed_lag(replayed),
                        inside and replayed_lag(inside), None]
    return out


def fused_launches(schedule: dict[str, Any]) -> list[tuple[float, float, bool]]:
    """Each of Horovod's recorded fused buffers in the kept steps: its launch after its last gradient was ready, when
    every rank had asked for it after that (seconds), and whether it was launched while backward ran; none where
    Horovod's fused buffers were not recorded."""
    if schedule.get("allreduces_from") != HOROVOD_TIMELINE:
        return []
    out = []
    for step in schedule["steps"]:
        ready = dict(step["ready_s"])
        for a in step["allreduces"]:
            last = max(ready[i] for i in a["indices"])
            out.append((a["launched_s"] - last, a["negotiated_s"] - last, a["launched_s"] < step["backward_end_s"]))
    return out


def replayed_lag(schedule: Schedule) -> float:
    """The replay's mean time from a fused buffer's last gradient's readiness to its allreduce's start."""
    return statistics.fmean(a.start_s - a.ready_s for a in schedule.allreduces)


def computed(run: dict[str, Any], schedule: dict[str, Any]) -> float:
    """Where backward's computing ended, from which the wait counts: for DDP its last gradient's readiness (its
    backward() returns only once the buckets are averaged, and its wait is timed from its last bucket), for Horovod
    the return of backward()."""
    return max(schedule["ready_s"].values()) if run["backend"] == "native" else schedule["backward_end_s"]


def _replayed(backend: str, grads: list[Gradient], wire: float, end: float, link: Link, config: dict[str, Any],
              doc: dict[str, Any]) -> Schedule:
    """DDP cuts its buckets by the gradients' bytes and sends `wire` of them; Horovod's hooks compress each gradient
    before it is enqueued, so it fuses what is on the wire."""
    if backend == "native":
        cap = int(config["bucket_mb"] * MIB) if config.get("bucket_mb") else schedule_replay.DDP_BUCKET_BYTES
        in_flight = 1 if doc["config"].get("use_gpu") else GLOO_IN_FLIGHT
        return schedule_replay.ddp(grads, end, link, cap_bytes=cap, in_flight=in_flight, wire=wire)
    grads = [Gradient(g.ready_s, int(g.bytes * wire), g.index) for g in grads]
    rules = {"cycle_s": (config.get("cycle_time_ms") or 1.0) / 1000,
             "fusion_bytes": fusion_bytes(config["bucket_mb"]) if config.get("bucket_mb") else
             schedule_replay.HOROVOD_FUSION_BYTES}
    return schedule_replay.horovod_over_phases(grads, end, link, **rules)


def points(folder: Path) -> tuple[list[Point], list[list[object]]]:
    """Every checked figure of one comparison folder: per compared arm its wait, and native − Horovod's step; where a
    run recorded its allreduces, how many a step, and Horovod's wait from readiness to launch. The contended link of
    a run is the one its own allreduces got, or where it recorded none (Horovod without --fused-buffers) the one its
    round's DDP run's buckets got. And Horovod's recorded fused buffers, every Horovod run's pooled (launches_row)."""
    comparison = runs.load(folder)
    config = comparison["settings"]["config"]
    compared = speed.compared_arms(comparison["settings"]["launchers"])
    out, apart = [], []
    for n in comparison["settings"]["workers"]:
        where = f"{_setting(comparison)}, {n} workers"
        docs = {(arm, r["round"]): (r, _results(folder, r, config))
                for arm, found in runs.finished(comparison, n).items() for r in found
                if arm in compared or r["backend"] == "horovod"}
        links = {(arm, round_): in_step_link(doc, n) for (arm, round_), (_, doc) in docs.items()
                 if arm in compared and doc.get("schedule")}
        found: dict[tuple[str, str], dict[int, list[float | None]]] = {}
        for (arm, round_), (run, doc) in docs.items():
            if arm in compared:
                contended = links.get((arm, round_)) or links.get((compared[0], round_))
                for what, values in figures(run, doc, config, contended).items():
                    found.setdefault((arm, what), {})[round_] = values
        out += [_point(where, arm, what, found[arm, what], unit, scale)
                for arm in compared for what, unit, scale in SHOWN if (arm, what) in found]
        native, horovod = (found.get((arm, PAIRED), {}) for arm in compared)
        if paired := {r: [None if a is None or b is None else a - b for a, b in zip(native[r], horovod[r])]
                      for r in sorted(set(native) & set(horovod))}:
            out.append(_point(where, "native − horovod", PAIRED, paired))
        if launches := [launch for run, doc in docs.values() if run["backend"] == "horovod"
                        for launch in fused_launches(doc.get("schedule") or {})]:
            apart.append(launches_row(where, launches))
    return out, apart


def _results(folder: Path, run: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """A run's results.json, checked: whole, of the comparison's own model and backend, its schedule whole and
    finite; else one line naming the file."""
    path = folder / run["results"]
    try:
        doc = results.read(path)
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist: {folder} holds its comparison.json without that run's folder (a "
                          "snapshot may keep the summary alone), and the check needs each run's results.json") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:  # json's errors are ValueErrors too
        raise ConfigError(f"{path} cannot be read as a run's results ({error}); run the comparison again") from None
    said = {"model": doc["config"].get("model"), "backend": doc.get("backend")}
    wanted = {"model": config["model"], "backend": run["backend"]}
    if said != wanted:
        raise ConfigError(f"{path} is a run of {said['model']} under {said['backend']}, in a comparison of "
                          f"{wanted['model']} whose run {run['arm']} it stands for: check only folders as compare "
                          "wrote them")
    schedule = doc.get("schedule")
    if schedule:
        sizes, ready = schedule.get("gradient_bytes"), schedule.get("ready_s")
        whole = isinstance(sizes, list) and isinstance(ready, dict) and all(
            str(i).isdigit() and int(i) < len(sizes) for i in ready)
        numbers = [*(ready.values() if isinstance(ready, dict) else []), schedule.get("wait_s")]
        if not whole or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in numbers):
            raise ConfigError(f"{path}'s schedule is cut short or holds a number that is not finite (ready_s, "
                              "wait_s); run the comparison again")
    return doc


def _point(setting: str, arm: str, what: str, values: dict[int, list[float | None]], unit: str = "ms",
           scale: float = 1000) -> Point:
    """From each round's (measured, replayed, replayed contended, rival) seconds (or counts, `scale` 1): the
    means in `unit`, and the measured figure's interval over the rounds."""
    def mean(k: int) -> float | None:
        found = [scale * v[k] for v in values.values() if v[k] is not None]
        return statistics.fmean(found) if found else None

    _, interval = stats.mean_interval([scale * v[0] for v in values.values()])
    return Point(setting, arm, what, mean(0), interval, mean(1), mean(2), mean(3), len(values), unit)


def _setting(comparison: dict[str, Any]) -> str:
    """A comparison's setting as the tables name it: the model, its options, the simulated nodes."""
    config, network = comparison["settings"]["config"], comparison["settings"].get("network")
    said = [config["model"], *(f"--{key.replace('_', '-')} {config[key]:g}" for key in ("bucket_mb", "cycle_time_ms")
                               if config.get(key))]
    said += [f"--compression {config['compression']}"] if config.get("compression", "none") != "none" else []
    said += [f"--{key.replace('_', '-')}" for key in ("trace", "fused_buffers") if config.get(key)]
    return ", ".join(said + ([f"{network['nodes']} simulated nodes, link {network['link_rate']}"] if network else []))


def folders(given: list[str]) -> list[Path]:
    """Each comparison folder: the folders given, or their settings' (a grid)."""
    out: list[Path] = []
    for name in given:
        path = Path(name)
        found = [path] if (path / runs.COMPARISON).is_file() else sorted(
            p.parent for p in path.rglob(runs.COMPARISON))  # a grid's settings, a link sweep's rates
        if not found:
            raise ConfigError(f"{name} holds no {runs.COMPARISON}, nor do its subfolders; pass folders written by "
                              "python -m ray_jobs.compare")
        seen = {p.resolve() for p in out}
        if twice := [p for p in found if p.resolve() in seen]:
            raise ConfigError(f"{twice[0]} is given twice (itself, or inside another folder given): each comparison "
                              "counts once; name it once")
        out += found
    return out


def launches_row(where: str, launches: list[tuple[float, float, bool]]) -> list[object]:
    """Horovod's recorded fused buffers (fused_launches), pooled over a setting's runs, as a table row: those launched
    while backward ran and those after its end, each with its mean launch after its last gradient; and for all, when
    every rank had asked for it and the launch after that (means, ms)."""
    def mean(values: list[float]) -> str:
        return f"{1000 * statistics.fmean(values):.1f}" if values else "—"

    during = [lag for lag, _, running in launches if running]
    after = [lag for lag, _, running in launches if not running]
    return [where, len(during), mean(during), len(after), mean(after), mean([asked for _, asked, _ in launches]),
            mean([lag - asked for lag, asked, _ in launches])]


def check(given: list[str]) -> str:
    """The check of every comparison in `given`, as Markdown."""
    found, apart = [], []
    for folder in folders(given):
        made, rows = points(folder)
        found, apart = found + made, apart + rows
    if not found:
        raise ConfigError(f"no run of {', '.join(given)} recorded its schedule and its averaging alone; compare them "
                          "again with this version")
    return markdown(found, given, apart)


def markdown(found: list[Point], given: list[str], apart: list[list[object]]) -> str:
    def cell(p: Point, value: float | None) -> str:
        if value is None:
            return "—"
        return f"{value:.1f} ({'within' if p.matches(value) else 'outside' if p.precise else 'not judged'})"

    head = ["setting", "arm", "figure", "measured (95 % CI)", "runs", "precise enough",
            "replayed, link of the averaging alone", "replayed, link the run's allreduces got in the step",
            "the simplest rival (the averaging alone)"]
    table = [[p.setting, p.arm, p.what if p.unit == "ms" else f"{p.what} ({p.unit})",
              f"{p.measured_ms:.1f}" + (f" ({p.interval_ms[0]:.1f}–{p.interval_ms[1]:.1f})" if p.interval_ms else ""),
              p.runs, "yes" if p.precise else "no", *(cell(p, v) for v in (p.replayed_ms, p.contended_ms, p.rival_ms))]
             for p in found]
    waits = [p for p in found if p.unit == "ms" and p.rival_ms is not None]
    others = [p for p in found if p not in waits]
    judged = [[p for p in group if p.precise] for group in (waits, others)]
    counts = [[sum(p.matches(getattr(p, name)) for p in group) for name in ("replayed_ms", "contended_ms", "rival_ms")]
              for group in judged]
    out = [f"Made by `python -m experiments.gpu_model.schedule_check {' '.join(given)}` from the runs' results.json "
           "alone.", "",
           f"**The replay matched {counts[0][0]} of {len(judged[0])} precisely measured waits** (each backend's wait "
           f"after backward and native − Horovod's backward plus wait; precise: the 95 % interval over the runs "
           f"within ±{100 * BAR:.0f} % of the value or ±{FLOOR_MS:g} ms) within {100 * BAR:.0f} % or {FLOOR_MS:g} ms "
           f"under a link fitted to each run's averaging alone, and {counts[0][1]} of {len(judged[0])} under the link "
           f"the run's own allreduces got inside its step (for Horovod without its fused buffers recorded, the link "
           f"DDP's buckets got in the same round); the simplest rival (the averaging alone, nothing hidden), "
           f"{counts[0][2]} of {len(judged[0])}. The other {len(waits) - len(judged[0])} of the {len(waits)} waits "
           f"were not measured precisely enough to judge any model by (more rounds would narrow them), and are "
           f"counted as nothing."]
    if others:
        out[-1] += (f" Where the runs recorded their allreduces, the replay's matched {counts[1][0]} and "
                    f"{counts[1][1]} of the {len(judged[1])} precisely measured figures of {len(others)} (allreduces "
                    f"a step; a fused buffer's launch after its last gradient), which the rival cannot say.")
    out[-1] += " Figures in ms unless they say otherwise; within or outside the bar, or not judged."
    out += ["", text.md_table(head, table), ""]
    if apart:
        head = ["setting", "fused buffers launched while backward ran", "their launch after their last gradient, ms",
                "launched after backward's end", "their launch after their last gradient, ms",
                "every rank had asked, after the last gradient, ms", "launch after every rank had asked, ms"]
        out += ["Horovod's recorded fused buffers taken apart, pooled over each setting's runs and kept steps (means):",
                "", text.md_table(head, apart), ""]
    return "\n".join(out)


def parser() -> cli.Parser:
    out = cli.Parser(description=__doc__.split("\n\n")[0], prog="python -m experiments.gpu_model.schedule_check")
    out.add_argument("comparisons", nargs="+", help="folders written by python -m ray_jobs.compare (or grids)")
    out.add_argument("--output", type=Path, help="a Markdown file to write the table to (default: print it)")
    return out


def main() -> int:
    args = parser().parse_args()
    made = check(args.comparisons)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(made)
        log.info("wrote %s", args.output)
    else:
        log.info("%s", made)
    return 0


if __name__ == "__main__":
    cli.run(main)
