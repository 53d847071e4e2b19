"""One comparison: every arm repeated and interleaved beside the single-process references, then parity and the speed
answer per worker count, into <root>/<run-id>/comparison.json. `python -m ray_jobs.compare`, `make bench` and the
tuning grid run it; analysis/ renders what it writes.
"""

import json
import logging
import os
import shutil
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from analysis import parity, speed, stats
from analysis.runs import COMPARISON
from cluster import worker_output
from cluster.ray_cluster import check_address, check_local_capacity, connect, require
from contract import models, options, results
from contract.config import BACKENDS, ConfigError, TrainConfig
from launchers import arms
from launchers.arms import Arm
from launchers.ray_failures import user_error
from runtime import preflight, space
from workload import data, tracing

log = logging.getLogger(__name__)
DEFAULT_TOLERANCE = 1e-4
DEFAULT_WORKERS = "2"
DEFAULT_REPEATS = 6
DEFAULT_EPOCHS = 2
RUN_KEYS = ("epochs", "final", "step_losses", "peak_rss_mb_per_worker", "parameters_identical_across_ranks",
            "buffers_identical_across_ranks", "parameters_sha256", "options", "phases", "end_to_end_s", "eval_time_s",
            "checkpoint_time_s", "placement", "model", "overlap", "cpu_s_per_1k_samples", "peak_rss_bytes")
ARTIFACTS = ("trace-rank*.json", tracing.TIMELINE, options.AUTOTUNE_LOG)
"""Files a run may leave beside its results.json that the report links to."""


def parse_workers(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise ConfigError(f"--workers takes a comma-separated list of positive integers, got {text!r}") from None
    if not counts or any(n <= 0 for n in counts) or len(set(counts)) != len(counts):
        raise ConfigError(f"--workers takes distinct positive integers, got {text!r}")
    return counts


def parse_backends(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in BACKENDS]
    if unknown or not names:
        named = ", ".join(unknown) or repr(text)
        raise ConfigError(f"unknown backend {named} in --backends; choose from {', '.join(BACKENDS)}")
    return names


def plan(workers: list[int], arms: list[Arm], repeats: int,
         emulate_horovod: bool = False) -> tuple[list[tuple[int, Arm, int]], list[dict]]:
    """The runs as (round, arm, workers), in order, and what cannot run here with the reason.

    Per worker count: the references once (they are deterministic and only serve parity; `emulate_horovod` adds the
    one that rounds compressed gradients as Horovod does), then every arm `repeats` times in a balanced order
    (A B B A …), so that a slow minute on the machine hits every arm alike.
    """
    runs, not_applicable = [], []
    for n in workers:
        runs.append((0, Arm("reference", "local"), n))
        if emulate_horovod:
            runs.append((0, Arm(parity.REFERENCE_HOROVOD, "local"), n))
        if n > 1:
            runs.append((0, Arm("global-batch", "local"), n))
        runs += [(r, arm, n) for r, arm in stats.balanced_order(arms, repeats)]
        if n > 1:
            from workload import reference  # torch, to count GPUs: after the flags are read, not for --help

            if reason := reference.dataparallel_unavailable(n):
                not_applicable.append({"backend": "dataparallel", "workers": n, "reason": reason})
            else:
                runs.append((0, Arm("dataparallel", "local"), n))
    return runs, not_applicable


def compare(base: TrainConfig, workers: list[int], backends: list[str], root: Path, *, parity_steps: int,
            tolerance: float, target_accuracy: float, repeats: int = 1, launcher_names: list[str] = ("ray",),
            references: bool = True, run_id: str = "", network: dict[str, Any] | None = None,
            aa: bool = False, target_ci: float = 0.0, budget_s: float = 0.0,
            reuse_references: Path | None = None, per_backend: dict[str, dict[str, Any]] | None = None) -> Path:
    """Run everything into root/<run-id>/ (run_id: a timestamp unless given) and write comparison.json; returns that
    folder. `network`: the simulated link the runs cross (experiments/link_sweep.py), recorded with every run. `aa`:
    every distributed arm also runs against its A/A twin, interleaved alike, for the noise floor. `target_ci` (0.05:
    ±5 %): the `repeats` rounds are a pilot, and Stein's two-stage procedure adds the rounds its spread says
    native ÷ Horovod needs for that half-width, as many as `budget_s` (from the start of the first run) allows.
    `reuse_references`: a comparison of the same settings (a link sweep's first rate) whose finished single-process
    references stand in for this one's: they never cross a link, so running them again would give the same steps.
    `per_backend`: options each backend runs with instead of `base`'s (a grid's best of each against each other);
    then no reference runs and parity is not judged, the backends computing differently on purpose."""
    if per_backend:
        references = False
    launcher_names = list(launcher_names)
    check_options(base, backends)
    arms.check_available(launcher_names, backends)
    # Checked (and the dataset resolved) at the most workers: they make the shortest epochs.
    base = replace(base, workers=max(workers), output_dir=str(root)).with_absolute_paths()
    preflight.check_config(base)
    on_ray = bool(backends) and "ray" in launcher_names
    if on_ray:
        address = check_address()
        check_local_capacity(max(workers), base.use_gpu)
    base = data.resolve(base)
    run_id = run_id or datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    run_dir = root / run_id
    if on_ray:
        connect(run_dir / worker_output.LOG, address)  # one Ray cluster for every run; the file opens with the first Ray run
        require(max(workers), base.use_gpu)
    runs, not_applicable = plan(workers, arms.for_backends(backends, launcher_names, aa), repeats,
                                emulate_horovod=base.compression != "none" and "horovod" in backends)
    if not references:
        runs = [run for run in runs if run[1].launcher != "local"]
    run_dir.mkdir(parents=True)
    started = time.monotonic()
    records: list[dict[str, Any]] = []
    reusable = finished_references(reuse_references) if reuse_references else {}
    spent: dict[int, float] = {}  # seconds of distributed runs per worker count, to price a round

    def execute(planned: list[tuple[int, Arm, int]]) -> None:
        for i, (round_, arm, n) in enumerate(planned, 1):
            began = time.monotonic()
            if (reused := reusable.get((arm.label, n))) is not None:
                records.append(reuse(reused, reuse_references, run_dir, f"[{i}/{len(planned)}]"))
                continue
            try:
                own = replace(base, **(per_backend or {}).get(arm.backend, {}))
                records.append(run_one(arm, round_, n, own, run_dir, network, f"[{i}/{len(planned)}]", started))
            except KeyboardInterrupt:
                failed = sum(r["status"] != "ok" for r in records)
                raise KeyboardInterrupt(f"{len(records)} run(s) of this comparison had finished"
                                        f"{f' ({failed} of them failed)' if failed else ''}, the next had not; their "
                                        f"folders stay in {run_dir}") from None
            if arm.launcher != "local":
                spent[n] = spent.get(n, 0.0) + time.monotonic() - began

    execute(runs)
    stages = {}
    if target_ci:
        # Stein's two-stage procedure: the rounds so far are the pilot; its spread alone fixes how many in all.
        distributed = arms.for_backends(backends, launcher_names, aa)
        for n in workers:
            stage = second_stage(records, n, launcher_names, repeats, target_ci,
                                 budget_s - (time.monotonic() - started), spent.get(n, 0.0) / repeats)
            stages[str(n)] = stage
            log.info("two-stage, %d worker(s): %s", n, stage["why"])
            if stage["extra"]:
                order = stats.balanced_order(distributed, repeats + stage["extra"])
                execute([(r, arm, n) for r, arm in order if r >= repeats])
    compared = [arm.label for arm in arms.for_backends(backends, launcher_names)]
    verdicts, speeds, overheads, noise, costs, cost_noise = {}, {}, {}, {}, {}, {}
    pilot = repeats if target_ci else None
    for n in workers:
        # Parity from each arm's first finished round: every repeat trains the same model.
        losses = {}
        for r in sorted(records, key=lambda r: r["round"]):
            if r["workers"] == n and r["status"] == "ok":
                losses.setdefault(r["arm"], r["step_losses"])
        if not per_backend:
            verdicts[str(n)] = parity.verdict(losses, parity_steps, tolerance, compared)
        if set(backends) == set(BACKENDS) and (answer := speed.speed(records, n, launcher_names, pilot)):
            speeds[str(n)] = {**answer, **({"two_stage": stages[str(n)]} if str(n) in stages else {})}
        if overhead := speed.launcher_overhead(records, n, pilot):
            overheads[str(n)] = overhead
        if set(backends) == set(BACKENDS) and (cost := speed.cpu_cost(records, n, launcher_names, pilot)):
            costs[str(n)] = cost
        if aa and (floor := speed.noise_floor(records, n, compared, pilot)):
            noise[str(n)] = floor
        if aa and (floor := speed.noise_floor(records, n, compared, pilot, speed.CPU_METRIC)):
            cost_noise[str(n)] = floor
    comparison = {
        "schema_version": 2,
        "run_id": run_id,
        "settings": {"config": base.to_dict(), "workers": workers, "backends": backends, "launchers": launcher_names,
                     "repeats": repeats, "aa": aa, "target_ci": target_ci, "budget_s": budget_s if target_ci else None,
                     "parity_steps": parity_steps, "tolerance": tolerance,
                     "target_accuracy": target_accuracy, "speed_metric": speed.METRIC,
                     **({"per_backend": per_backend} if per_backend else {}),
                     **({"network": network} if network else {})},
        "environment": results.environment(),
        "wall_time_s": time.monotonic() - started,
        "runs": records,
        "not_applicable": not_applicable,
        "parity": verdicts,
        "speed": speeds,
        "launcher_overhead": overheads,
        "noise_floor": noise,
        "cpu_cost": costs,
        "noise_floor_cpu": cost_noise,
        "model": model_record(base, records),
    }
    space.write_json(run_dir / COMPARISON, comparison)
    return run_dir


def model_record(cfg: TrainConfig, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The model every run trained, as a finished run recorded it; counted without torch when none finished."""
    found = next((r["model"] for r in records if r["status"] == "ok" and r.get("model")), None)
    if found:
        return found
    size = {"width": cfg.model_width, "num_classes": cfg.num_classes, "image_size": cfg.image_size}
    return {"name": cfg.model, "parameters": models.parameters(cfg.model, **size),
            "gradient_bytes": models.gradient_bytes(cfg.model, **size), "image_size": cfg.image_size}


def run_one(arm: Arm, round_: int, n: int, base: TrainConfig, run_dir: Path, network: dict[str, Any] | None,
            counter: str, started: float) -> dict[str, Any]:
    """One run into its own folder; its record for comparison.json, failed or not."""
    name = f"{arm.label.replace('/', '-')}-{n}w" + (f"-r{round_}" if arm.launcher != "local" else "")
    # Each backend takes the options it has; the others are recorded as not applicable in its results.json.
    cfg = replace(options.for_backend(base, arm.backend), workers=n, output_dir=str(run_dir / name))
    what = f"{counter} {arm.label}, {n} worker(s)" + (f", round {round_ + 1}" if arm.launcher != "local" else "")
    log.info("%s: started at +%.0f s", what, time.monotonic() - started)
    record = {"arm": arm.label, "backend": arm.backend, "launcher": arm.launcher, "workers": n, "round": round_}
    try:
        doc = arms.run(arm, cfg)
        if network:
            # The driver knows the link the workers crossed; the workers do not.
            doc["network"] = network
            space.write_results(cfg.output_dir, doc)
        log.info("%s: done, %.0f samples/s (steady), test accuracy %.2f%%, %.1f s end to end, +%.0f s", what,
                 doc["epochs"][-1]["samples_per_s_median"], 100 * doc["final"]["test_accuracy"],
                 doc["end_to_end_s"], time.monotonic() - started)
        return {**record, "status": "ok", "error": None,
                "results": str(Path(cfg.output_dir, results.FILENAME).relative_to(run_dir)),
                "artifacts": sorted(str(p.relative_to(run_dir)) for pattern in ARTIFACTS
                                    for p in Path(cfg.output_dir).glob(pattern)),
                **{k: doc.get(k) for k in RUN_KEYS}, **({"network": network} if network else {}),
                speed.METRIC: doc["epochs"][-1]["samples_per_s_median"]}
    except Exception as error:  # noqa: BLE001 - a failed run is recorded in the report, and the rest go on
        error = user_error(error) or error
        message = " ".join(f"{type(error).__name__}: {error}".split())[:500]
        log.error("%s: FAILED: %s", what, message)
        return {**record, "status": "failed", "error": message}


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
    native, horovod = speed.paired(records, n, a, b, speed.METRIC)
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
