"""One comparison: every arm repeated and interleaved beside the single-process references, then parity and the speed
answer per worker count, into <root>/<run-id>/comparison.json. `python -m ray_jobs.compare`, `make bench` and the
tuning grid run it; analysis/ renders what it writes.

    compare = plan → execute → summarize: the plan checks everything and lists the runs, execute runs them (and the
    second stage of --target-ci), summarize turns the records into comparison.json's verdicts, a pure function.
"""

import json
import logging
import os
import shutil
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from analysis import parity, report, speed, stats, text
from analysis.runs import COMPARISON
from cluster import worker_output
from cluster.ray_address import check_address
from cluster.ray_cluster import check_local_capacity, connect, executor_hosts, require
from contract import models, options, results
from contract.comparison import CompareConfig
from contract.config import BACKENDS, TrainConfig
from contract.errors import DIVERGED, RunFailed
from launchers import arms
from launchers.arms import Arm
from launchers.ray_failures import user_error
from ray_jobs import progress
from ray_jobs import resume as resuming
from runtime import folder_lock, gpus, logs, preflight, run_folder, space
from workload import data, tracing

log = logging.getLogger(__name__)
DEFAULT_EPOCHS = 2
"""The steady window is the last epoch's: on Ray the first overlaps Ray Train's own actors settling after the start,
which slowed one rank or the other by up to 15 % (docs/measuring.md)."""
DEFAULT_AFFINITY = "share"
"""Every rank of every arm, and its threads, on its own share of the cores: where the scheduler puts them decides a
launch's level (workload/cores.py)."""
RUN_KEYS = ("epochs", "final", "step_losses", "peak_rss_mb_per_worker", "parameters_identical_across_ranks",
            "buffers_identical_across_ranks", "parameters_sha256", "options", "phases", "end_to_end_s", "eval_time_s",
            "checkpoint_time_s", "placement", "model", "overlap", "cpu_s_per_1k_samples", "peak_rss_bytes",
            "machine_load", "averaged_by", "buffers_averaged", "gpu_math")
OUTPUT = "output.log"
"""Each run's own lines (its epochs, its workers' lines on Ray), kept in its folder rather than printed."""
ARTIFACTS = ("trace-rank*.json", tracing.TIMELINE, options.AUTOTUNE_LOG)
"""Files a run may leave beside its results.json that the report links to."""


@dataclass
class Plan:
    """A comparison checked and ready: its settings, its folder, and its runs as (round, arm, workers), in order."""

    base: TrainConfig
    cmp: CompareConfig
    run_dir: Path
    runs: list[tuple[int, Arm, int]]
    not_applicable: list[dict[str, Any]]
    network: dict[str, Any] | None = None
    reused: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    reuse_from: Path | None = None
    per_backend: dict[str, dict[str, Any]] | None = None
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    """--target-ci's second stage per worker count: what the pilot asked for and what was added (execute fills it)."""
    pilot_cut: dict[str, float] | None = None
    """Where --budget-min stopped the pilot: the worker count and the rounds that ran (execute fills it)."""
    finished: dict[str, dict[str, Any]] = field(default_factory=dict)
    """With --resume: the runs that finished whole before the comparison stopped, by folder (ray_jobs/resume.py)."""

    @property
    def arms(self) -> list[Arm]:
        return planned_arms(self.cmp, bool(self.per_backend))


def planned_arms(cmp: CompareConfig, per_backend: bool = False) -> list[Arm]:
    """The arms a comparison of `cmp` runs: the compared arms (A/A twins with --aa), then the ceilings unless
    --no-ceiling, or each backend at its own best (`per_backend`): no one ceiling would train as both do."""
    backends, launchers = list(cmp.backend_names), list(cmp.launcher_names)
    return (arms.for_backends(backends, launchers, cmp.aa)
            + ([] if cmp.no_ceiling or per_backend else arms.ceilings(backends, launchers)))


def compare(base: TrainConfig, cmp: CompareConfig, root: Path, **asked: Any) -> Path:
    """Run everything into root/<run-id>/, write comparison.json and render its report; returns that folder.
    `asked`: plan()'s."""
    planned = plan(base, cmp, root, **asked)
    started = time.monotonic()
    records = execute(planned, started)
    comparison = summarize(planned, records, results.environment(), time.monotonic() - started)
    space.write_json(planned.run_dir / COMPARISON, comparison)
    report.render(planned.run_dir)
    return planned.run_dir


def plan(base: TrainConfig, cmp: CompareConfig, root: Path, *, references: bool = True, run_id: str = "",
         network: dict[str, Any] | None = None, reuse_references: Path | None = None,
         per_backend: dict[str, dict[str, Any]] | None = None, resume: bool = False) -> Plan:
    """Everything checked before anything runs, the dataset resolved and Ray joined (where an arm runs on it), the
    folder made (root/<run-id>, run_id: a timestamp unless given), the runs listed (`runs`) and the plan written (or,
    resuming, the finished runs kept). `network`: the simulated link the runs cross (experiments/simulated_cluster),
    recorded with every run. `reuse_references`: a comparison of the same settings (a link sweep's first rate) whose
    finished single-process references stand in for this one's: they never cross a link, so running them again would
    give the same steps. `per_backend`: options each backend runs with instead of `base`'s (a grid's best of each
    against each other); then no reference runs and parity is not judged, the backends computing differently on
    purpose. `resume`: go on in root/run_id, keeping the runs that finished whole there (compare --resume)."""
    backends, launchers, workers = list(cmp.backend_names), list(cmp.launcher_names), list(cmp.worker_counts)
    asked = resuming.request(base, cmp)
    if resume:
        resuming.check(root / run_id, asked)
    check_options(base, backends)
    arms.check_available(launchers, backends)
    if any(launcher != "ray" for launcher in launchers):  # torchrun, mp.spawn, horovodrun: every rank here
        gpus.check(base.use_gpu, max(workers), horovod=False)  # Ray's: below
    if base.use_gpu and "horovod" in backends:
        gpus.check_horovod_nccl()
    # Checked (and the dataset resolved) at the most workers: they make the shortest epochs.
    base = replace(base, workers=max(workers), output_dir=str(root)).with_absolute_paths()
    preflight.check_config(base, horovod="horovod" in backends)
    on_ray = bool(backends) and "ray" in launchers
    address = check_address() if on_ray else None
    if on_ray:
        check_local_capacity(max(workers), base.use_gpu)
    base = data.resolve(base)
    if said := preflight.warmup_chosen(base, data.choose(base).train_count):
        log.info("%s", said)
    run_dir = root / run_id if run_id else run_folder.new_folder(root)  # a new one: made now, so no other takes it
    try:
        if on_ray:
            connect(run_dir / worker_output.LOG, address)  # one Ray for every run; its log opens with the first run
            require(max(workers), base.use_gpu)
            if "horovod" in backends:  # SPREAD's refusal before the first run
                for count in workers:
                    executor_hosts(count, base.use_gpu, base.placement_strategy)
        planned = Plan(base, cmp, run_dir, [], [], network, finished_references(reuse_references) if reuse_references
                       else {}, reuse_references, per_backend)
        planned.runs, planned.not_applicable = runs(workers, planned.arms, cmp.repeats,
                                                    compressed=base.compression != "none")
        if not references or per_backend:
            planned.runs = [run for run in planned.runs if run[1].launcher != "local"]
        if resume:
            folder_lock.hold(run_dir, "--resume")
            planned.finished = resuming.finished(run_dir, rebuilder(planned))
        else:
            run_dir.mkdir(parents=True, exist_ok=not run_id)
            folder_lock.hold(run_dir, "--output-dir")
            resuming.write_plan(run_dir, asked)
        return planned
    except BaseException:
        if not run_id and not any(run_dir.iterdir()):
            run_dir.rmdir()  # refused after the folder was made: nothing is left behind
        raise


def runs(workers: list[int], compared: list[Arm], repeats: int,
         compressed: bool = False) -> tuple[list[tuple[int, Arm, int]], list[dict]]:
    """The runs as (round, arm, workers), in order, and what cannot run here with the reason.

    Per worker count: the references once (they are deterministic and only serve parity): where Horovod runs and its
    arithmetic differs from DDP's (`compressed`, or past two workers, where Horovod's sum-then-scale rounds unlike
    DDP's divide-then-sum), the one that rounds as Horovod does; past two workers, the one that sums in another
    order, for the parity floor; then every arm `repeats` times in a balanced order (A B B A …; more arms in a
    Williams design), so that a slow minute on the machine hits every arm alike.
    """
    planned, not_applicable = [], []
    for n in workers:
        planned.append((0, Arm("reference", "local"), n))
        if any(arm.backend == "horovod" for arm in compared) and (compressed or n > 2):
            planned.append((0, Arm(parity.REFERENCE_HOROVOD, "local"), n))
        if n > 2:  # a sum of three or more depends on its order: this reference's drift is the parity floor
            planned.append((0, Arm(parity.REORDERED, "local"), n))
        if n > 1:
            planned.append((0, Arm("global-batch", "local"), n))
        planned += rounds(compared, n, range(repeats))
        if n > 1:
            from workload import reference  # torch, to count GPUs: after the flags are read, not for --help

            if reason := reference.dataparallel_unavailable(n):
                not_applicable.append({"backend": "dataparallel", "workers": n, "reason": reason})
            else:
                planned.append((0, Arm("dataparallel", "local"), n))
    return planned, not_applicable


CEILING_ROUNDS = 3
"""The rounds the ceiling runs in: its runs spread by 1-2 %, so three pin it down, and the rounds after them measure
the compared arms alone."""


def rounds(compared: list[Arm], n: int, which: range) -> list[tuple[int, Arm, int]]:
    """Rounds `which` of `compared` at `n` workers in the balanced order, the ceilings only in the first
    CEILING_ROUNDS."""
    order = stats.balanced_order(compared, which.stop) if which.stop else []
    return [(r, arm, n) for r, arm in order if r in which and not (arm.ceiling and r >= CEILING_ROUNDS)]


def execute(planned: Plan, started: float) -> list[dict[str, Any]]:
    """Every planned run, then the rounds --target-ci's second stage adds; each run's record, finished or failed."""
    records: list[dict[str, Any]] = []
    spent: dict[tuple[str, int], list[float]] = {}  # each run's seconds by (arm, workers): a round's price
    cmp = planned.cmp
    # --budget-min bounds the whole comparison: a pilot that outruns it stops at the end of a round.
    planned.pilot_cut = _run_all(planned, planned.runs, records, spent,
                                 started + 60 * cmp.budget_min if cmp.target_ci else None)
    if cut := planned.pilot_cut:
        log.info("--budget-min %g leaves %s, and a round took %s here: the pilot stopped after %d of %d round(s) at %d "
                 "worker(s), and no round is added", cmp.budget_min, text.duration(cut["left_s"]),
                 text.duration(cut["round_s"]), cut["rounds"], cmp.repeats, cut["workers"])
    elif cmp.target_ci:
        # Stein's two-stage procedure: the rounds so far are the pilot; its spread alone fixes how many in all.
        for n in cmp.worker_counts:
            added = rounds(planned.arms, n, range(cmp.repeats, cmp.repeats + 1))
            stage = second_stage(records, n, list(cmp.launcher_names), cmp.repeats, cmp.target_ci / 100,
                                 60 * cmp.budget_min - (time.monotonic() - started), price(spent, added) or 0.0)
            planned.stages[str(n)] = stage
            log.info("two-stage, %d worker(s): %s", n, stage["why"])
            if stage["extra"]:
                added = rounds(planned.arms, n, range(cmp.repeats, cmp.repeats + stage["extra"]))
                if cut := _run_all(planned, added, records, spent, started + 60 * cmp.budget_min):
                    ran = cut["rounds"] - cmp.repeats  # the added rounds ran slower than the pilot's priced them
                    stage.update(extra=ran, budget_limited=True, why=f"{stage['why']}; --budget-min stopped them "
                                                                   f"after {ran}")
                    log.info("two-stage, %d worker(s): --budget-min stopped the added rounds after %d", n, ran)
    return records


def price(spent: dict[tuple[str, int], list[float]], todo: list[tuple[int, Arm, int]]) -> float | None:
    """The seconds the runs `todo` should take, each at its arm's median so far; None while an arm has none."""
    found = [spent.get((arm.label, n)) for _, arm, n in todo if arm.launcher != "local"]
    return sum(statistics.median(s) for s in found) if all(found) else None


def _run_all(planned: Plan, todo: list[tuple[int, Arm, int]], records: list[dict[str, Any]],
             spent: dict[tuple[str, int], list[float]], deadline: float | None = None) -> dict[str, int] | None:
    """Run `todo` in order, appending each record; a Ctrl-C or SIGTERM says how many had finished. No new round
    starts that would end past `deadline`, priced from its arms' runs so far (or, before every arm of it ran, at the
    rounds' mean length): then the rounds that ran at that worker count, which the cut leaves whole."""
    rounds = max((r for r, _, _ in todo), default=0) + 1
    shown = progress.Progress([(r, arm.label, n, arm.launcher == "local") for r, arm, n in todo], rounds, deadline,
                              took=spent)
    # Each round's seconds where it ran something (a resume's kept runs take none), when the current one began, and
    # whether it ran anything: a round is a (round, workers) pair in the list's order.
    took, round_began, ran = [], time.monotonic(), False
    for i, (round_, arm, n) in enumerate(todo, 1):
        if i > 1 and (todo[i - 2][0], todo[i - 2][2]) != (round_, n):  # a new round begins: the one before ended
            if ran:
                took.append(time.monotonic() - round_began)
            round_began, ran = time.monotonic(), False
            ahead = price(spent, [run for run in todo if (run[0], run[2]) == (round_, n)])
            ahead = ahead if ahead is not None else sum(took) / len(took) if took else None
            if deadline is not None and round_ > 0 and ahead is not None and round_began + ahead > deadline:
                return {"workers": n, "rounds": round_, "round_s": ahead, "left_s": max(0.0, deadline - round_began)}
        shown.start()
        if (reused := planned.reused.get((arm.label, n))) is not None:
            records.append(reuse(reused, planned.reuse_from, planned.run_dir, f"[{i}/{len(todo)}]"))
            continue
        if (kept := planned.finished.get(run_name(arm, round_, n))) is not None:
            records.append({**kept, "kept_on_resume": True})
            log.info("[%d/%d] %s, %d worker(s)%s: finished before the comparison stopped; kept", i, len(todo),
                     arm.label, n, f", round {round_ + 1}" if arm.launcher != "local" else "")
            continue
        check_room(planned.run_dir, records, len(todo) - i + 1)
        ran = True
        try:
            own = replace(planned.base, **(planned.per_backend or {}).get(arm.backend, {}))
            records.append(run_one(arm, round_, n, own, planned.run_dir, planned.network))
            if records[-1]["status"] != "ok" and preflight.free_bytes(planned.run_dir) < preflight.OUTPUT_BYTES:
                # the disk filled during the run: its own line may not have reached its log
                records[-1]["error"] = failure_line(space.full(planned.run_dir, "the run's files"), "")
            if line := shown.done(i, records[-1]):
                log.info("%s", line)
        except KeyboardInterrupt:
            failed = sum(r["status"] != "ok" for r in records)
            raise KeyboardInterrupt(f"{len(records)} run(s) of this comparison had finished"
                                    f"{f' ({failed} of them failed)' if failed else ''}, the next had not; their "
                                    f"folders stay in {planned.run_dir}") from None
    return None


def check_room(run_dir: Path, records: list[dict[str, Any]], left: int) -> None:
    """Before a run: room for its files (preflight's OUTPUT_BYTES), or a RunFailed that stops the comparison, which a
    resume goes on with once there is room; a run started on a full disk could only fail."""
    if (free := preflight.free_bytes(run_dir)) >= preflight.OUTPUT_BYTES:
        return
    kept = sum(r["status"] == "ok" for r in records)
    raise RunFailed(f"no space left in {run_dir}: {space.size(free)} free, and a run needs about "
                    f"{space.size(preflight.OUTPUT_BYTES)}; {left} run(s) not started, the {kept} that finished are "
                    f"kept: free some space there and go on with compare's same flags and --resume {run_dir}")


def summarize(planned: Plan, records: list[dict[str, Any]], environment: dict[str, Any],
              wall_time_s: float) -> dict[str, Any]:
    """comparison.json from the records alone: parity, the speed verdict, Ray's overhead, the noise floor and the CPU
    cost per worker count."""
    cmp, base = planned.cmp, planned.base
    launchers, backends = list(cmp.launcher_names), list(cmp.backend_names)
    compared = [arm.label for arm in arms.for_backends(backends, launchers)]
    pilot = cmp.repeats if cmp.target_ci else None
    both = set(backends) == set(BACKENDS)
    out: dict[str, dict[str, Any]] = {k: {} for k in ("parity", "speed", "end_to_end", "launcher_overhead",
                                                       "noise_floor", "cpu_cost", "noise_floor_cpu", "efficiency",
                                                       "spread")}
    one_round = cut_advice(planned)
    for n in cmp.worker_counts:
        key = str(n)
        if not planned.per_backend:
            out["parity"][key] = parity_at(records, n, cmp.parity_steps, cmp.tolerance, compared)
        found = {"efficiency": speed.efficiency(records, n, compared, pilot),
                 "spread": speed.spread(records, n, [arm.label for arm in planned.arms]),
                 "launcher_overhead": speed.launcher_overhead(records, n, pilot)}
        for name, metric in (("speed", speed.METRIC), ("end_to_end", speed.END_TO_END), ("cpu_cost", speed.CPU_METRIC)):
            found[name] = both and speed.speed(records, n, launchers, pilot, one_round, metric)
        for name, metric in (("noise_floor", speed.METRIC), ("noise_floor_cpu", speed.CPU_METRIC)):
            found[name] = cmp.aa and speed.noise_floor(records, n, compared, pilot, metric)
        if found["speed"] and key in planned.stages:
            found["speed"]["two_stage"] = planned.stages[key]
        for name, value in found.items():
            if value:
                out[name][key] = value
    return {"schema_version": 2, "run_id": planned.run_dir.name, "settings": settings(planned),
            "environment": environment, "wall_time_s": wall_time_s, "runs": records,
            "not_applicable": planned.not_applicable, **out, "model": model_record(base, records)}


def cut_advice(planned: Plan) -> str | None:
    """Where --budget-min cut the pilot: what stopped the rounds, and what helps, for a verdict left without one."""
    cut, cmp = planned.pilot_cut, planned.cmp
    if not cut:
        return None
    return (f"--budget-min {cmp.budget_min:g} stopped the pilot after {cut['rounds']} of {cmp.repeats} rounds, a round "
            f"taking {text.duration(cut['round_s'])} on this machine; run it on a quieter machine or with a larger "
            "--budget-min")


def first_losses(records: list[dict[str, Any]], n: int) -> dict[str, list[float]]:
    """Each arm's step losses from its first finished round at `n` workers: every repeat trains the same model."""
    losses: dict[str, list[float]] = {}
    for r in sorted(records, key=lambda r: r["round"]):
        if r["workers"] == n and r["status"] == "ok":
            losses.setdefault(r["arm"], r["step_losses"])
    return losses


def parity_at(records: list[dict[str, Any]], n: int, steps: int, tolerance: float,
              compared: list[str]) -> dict[str, Any]:
    """The parity verdict at `n` workers from the records: each arm's first finished losses, and the runs that
    diverged (their line, under every launcher, says so)."""
    diverged = sorted({r["arm"] for r in records if r["workers"] == n and DIVERGED in (r.get("error") or "")})
    return parity.verdict(first_losses(records, n), steps, tolerance, compared, diverged)


def settings(planned: Plan) -> dict[str, Any]:
    """comparison.json's `settings`: how the comparison was asked for."""
    cmp = planned.cmp
    return {"config": planned.base.to_dict(), "workers": list(cmp.worker_counts), "backends": list(cmp.backend_names),
            "launchers": list(cmp.launcher_names), "repeats": cmp.repeats, "aa": cmp.aa, "ceiling": not cmp.no_ceiling,
            "target_ci": cmp.target_ci / 100, "budget_s": 60 * cmp.budget_min if cmp.target_ci else None,
            "parity_steps": cmp.parity_steps, "tolerance": cmp.tolerance, "target_accuracy": cmp.target_accuracy,
            "speed_metric": speed.METRIC, **({"per_backend": planned.per_backend} if planned.per_backend else {}),
            **({"pilot_cut": planned.pilot_cut} if planned.pilot_cut else {}),
            **({"network": planned.network} if planned.network else {})}


def model_record(cfg: TrainConfig, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The model every run trained, as a finished run recorded it; counted without torch when none finished."""
    found = next((r["model"] for r in records if r["status"] == "ok" and r.get("model")), None)
    if found:
        return found
    size = {"width": cfg.model_width, "num_classes": cfg.num_classes, "image_size": cfg.image_size}
    return {"name": cfg.model, "parameters": models.parameters(cfg.model, **size),
            "gradient_bytes": models.gradient_bytes(cfg.model, **size), "image_size": cfg.image_size}


def run_one(arm: Arm, round_: int, n: int, base: TrainConfig, run_dir: Path,
            network: dict[str, Any] | None) -> dict[str, Any]:
    """One run into its own folder; its record for comparison.json, failed or not (and, finished, in the folder's
    record.json, for a resume)."""
    cfg = replace(arm_config(arm, n, base), output_dir=str(run_dir / run_name(arm, round_, n)))
    record = {"arm": arm.label, "backend": arm.backend, "launcher": arm.launcher, "workers": n, "round": round_}
    try:
        with logs.to_file(Path(cfg.output_dir) / OUTPUT):
            doc = arms.run(arm, cfg)
        if network:
            # The driver knows the link the workers crossed; the workers do not.
            doc["network"] = network
            space.write_results(cfg.output_dir, doc)
        record = record_of(arm, round_, n, run_dir, doc)
        space.write_json(Path(cfg.output_dir) / resuming.RECORD, record)  # the run is whole: a resume keeps it
        return record
    except Exception as error:  # noqa: BLE001 - a failed run is recorded in the report, and the rest go on
        message = failure_line(user_error(error) or error, cfg.output_dir)
        return {**record, "status": "failed", "error": message}


def arm_config(arm: Arm, n: int, base: TrainConfig) -> TrainConfig:
    """What `arm` trains with at `n` workers: each backend the options it has (the others are recorded as not
    applicable in its results.json), the ceiling none that shape the averaging."""
    own = options.for_backend(base, arm.backend)
    return replace(options.ceiling(own) if arm.ceiling else own, workers=n)


def record_of(arm: Arm, round_: int, n: int, run_dir: Path, doc: dict[str, Any]) -> dict[str, Any]:
    """A finished run's record for comparison.json, from its results.json (`doc`) alone: what the run itself wrote
    is every figure the report takes from it."""
    folder = run_dir / run_name(arm, round_, n)
    return {"arm": arm.label, "backend": arm.backend, "launcher": arm.launcher, "workers": n, "round": round_,
            "status": "ok", "error": None, "results": str((folder / results.FILENAME).relative_to(run_dir)),
            "artifacts": sorted(str(p.relative_to(run_dir)) for pattern in ARTIFACTS for p in folder.glob(pattern)),
            **{k: doc.get(k) for k in RUN_KEYS}, **({"network": doc["network"]} if doc.get("network") else {}),
            "interfaces": (doc.get("environment") or {}).get("interfaces"),
            speed.METRIC: doc["epochs"][-1]["samples_per_s_median"]}


def rebuilder(planned: Plan):
    """What a resume keeps a run folder as (resume.finished): the record this comparison would write for the run its
    record.json names, rebuilt from its results.json, where that run is one of this comparison's, its results say
    they are that run's (backend, launcher, worker count, and the name of the folder they were written to), and it
    trained with the configuration this plan gives that run, field for field (all but resume.FREE); else None."""
    known = {(arm.label, n): arm for arm in {*planned.arms, *(arm for _, arm, _ in planned.runs)}
             for n in planned.cmp.worker_counts}

    def rebuild(folder: str, record: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any] | None:
        round_, n = record.get("round"), record.get("workers")
        arm = known.get((record.get("arm"), n))
        if arm is None or not isinstance(round_, int) or run_name(arm, round_, n) != folder:
            return None
        # the folder its results were written to: a comparison's folder may since have moved, its runs' names not
        if (doc["backend"], doc["launcher"], doc["workers"], Path(doc["config"]["output_dir"]).name) != (
                arm.backend, arm.launcher, n, folder):
            return None
        wanted = arm_config(arm, n, planned.base).to_dict()
        if any(doc["config"].get(k) != v for k, v in wanted.items() if k not in resuming.FREE):
            return None  # trained otherwise than this plan asks (another model, batch, …): it runs again
        return record_of(arm, round_, n, planned.run_dir, doc)

    return rebuild


def run_name(arm: Arm, round_: int, n: int) -> str:
    """A run's folder: `native-2w-r0`, `reference-2w`."""
    return f"{arm.label.replace('/', '-')}-{n}w" + (f"-r{round_}" if arm.launcher != "local" else "")


def failure_line(error: BaseException, folder: str) -> str:
    """A failed run in one line: the error's first line (Ray's and the launchers' carry whole tracebacks), or, where a
    full disk is behind it anywhere, the full disk's line."""
    text = str(error)
    if isinstance(error, OSError) and space.is_full(error) or "No space left on device" in text:
        error = error if isinstance(error, RunFailed) else space.full(folder, "the run's files")
        text = str(error)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return space.shorten(f"{type(error).__name__}: {first}", 500)


def finished_references(folder: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """The single-process runs that finished in the comparison at `folder`, by (arm, workers); none if it has no
    readable comparison.json (it failed before writing one): then this comparison runs its own."""
    try:
        records = json.loads((folder / COMPARISON).read_text())["runs"]
    except (OSError, ValueError, KeyError):
        return {}
    return {(r["arm"], r["workers"]): r for r in records if r["launcher"] == "local" and r["status"] == "ok"}


def reuse(record: dict[str, Any], source: Path, run_dir: Path, counter: str) -> dict[str, Any]:
    """`record`'s run folder copied from the comparison at `source` into `run_dir`, and its record, which says so."""
    folder = Path(record["results"]).parent
    shutil.copytree(source / folder, run_dir / folder)
    came_from = os.path.relpath(source / folder, run_dir)
    log.info("%s %s, %d worker(s): the same run as %s (a single process crosses no link)", counter, record["arm"],
             record["workers"], came_from)
    return {**record, "reused_from": str(came_from)}


def second_stage(records: list[dict[str, Any]], n: int, launchers: list[str], pilot: int, target: float,
                 left_s: float, round_s: float) -> dict[str, Any]:
    """How many rounds to add at `n` workers after the pilot: what Stein's procedure asks for a half-width of
    `target`, at most what `left_s` seconds buy at the pilot's `round_s` a round."""
    a, b = speed.compared_arms(launchers)
    _, native, horovod = speed.paired(records, n, a, b, speed.METRIC)
    stage = {"target": target, "pilot": pilot, "pilot_pairs": len(native), "needed": None, "extra": 0,
             "budget_limited": False}
    if len(native) < 2:
        return {**stage, "why": f"{len(native)} finished pilot pair(s); a spread needs 2, so no rounds are added"}
    needed = stats.two_stage_rounds([x / y for x, y in zip(native, horovod)], target)
    affordable = max(0, int(left_s // round_s)) if round_s > 0 else 0
    extra = min(needed - len(native), affordable)
    stage.update(needed=needed, extra=extra, budget_limited=extra < needed - len(native))
    why = (f"the pilot's spread asks for {needed} round(s) in all for ±{100 * target:g} %; "
           f"adding {extra}" + (f" (the budget allows {affordable})" if stage["budget_limited"] else ""))
    return {**stage, "why": why}


def check_options(base: TrainConfig, backends: list[str]) -> None:
    """An option that no compared backend has is refused; one that only some have is recorded as not applicable."""
    for backend in BACKENDS:
        if backend not in backends:
            options.check(base, "horovod" if backend == "native" else "native", "--backends")
