"""Judge a finished comparison's parity again, with the references it lacks: past two workers, the parity floor's
(`reference-reordered`) and the one that rounds as Horovod does. They are single-process runs, deterministic, and run
here from the configuration comparison.json recorded. `reference` runs again beside them: where it does not reproduce
the recorded losses bit for bit (another CPU, torch or version of this project computes otherwise), it is kept as
`reference-again`, the floor is that pair's, measured here, and the report says so.

    python -m ray_jobs.add_references docs/results/link-sweeps-resnet18/3-nodes/1gbit

The distributed runs are not repeated: their speed, losses and placement stay as they were measured. Each added
reference's folder goes beside them, and comparison.json, report.md and the plots are written again.
"""

import logging
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from analysis import parity, report, runs, text
from contract import results
from contract.config import CEILING, ConfigError, TrainConfig
from contract.errors import RunFailed
from launchers import arms
from launchers.arms import Arm
from ray_jobs import orchestrator, resume
from runtime import cli, folder_lock, preflight, space, tied

log = logging.getLogger(__name__)
MACHINE = ("cpu", "python", "torch", "torchvision")
"""What of the environment a reference's losses can depend on, to name where one computes otherwise."""
ASKED = ("workers", "backends", "launchers", "parity_steps", "tolerance")
"""What of comparison.json's settings, beside its configuration, plan.json records and the parity reads."""


def parser() -> cli.Parser:
    out = cli.Parser(description=__doc__.split("\n\n")[0])
    out.add_argument("folder", type=Path, help="a folder written by python -m ray_jobs.compare (its comparison.json)")
    return out


def compared(comparison: dict[str, Any]) -> list[Arm]:
    """The arms the comparison compared, from its settings."""
    return arms.for_backends(list(comparison["settings"]["backends"]), list(comparison["settings"]["launchers"]))


def missing(comparison: dict[str, Any]) -> list[tuple[Arm, int]]:
    """The references the current plan runs for this comparison and its records lack, with their worker counts."""
    s = comparison["settings"]
    have = {(r["arm"], r["workers"]) for r in comparison["runs"] if r["status"] == "ok"}
    planned, _ = orchestrator.runs(list(s["workers"]), compared(comparison), 1,
                                   compressed=s["config"].get("compression", "none") != "none")
    return [(arm, n) for _, arm, n in planned if arm.launcher == "local" and (arm.label, n) not in have]


def add(folder: Path) -> str:
    """Run what `missing` names into `folder`, then write comparison.json's parity and the report again."""
    comparison = runs.load(folder)
    folder_lock.hold(folder, "the comparison's folder")  # before anything reads it again or runs
    todo = missing(comparison)
    if not todo:
        return f"{folder}: every reference its parity needs is there; nothing ran"
    preflight.writable_dir(folder, "the comparison's folder")
    check(folder, comparison)
    s = comparison["settings"]
    # The runs (and the synthetic data, made again from its seed) in a folder of their own, moved into place once all
    # have finished: a failure or a SIGKILL leaves nothing.
    with tied.folder(".adding-references-", folder) as scratch:
        base = replace(TrainConfig.from_dict(s["config"]), data_dir=str(scratch / "data"))
        again = scratch / "again"
        planned = {(arm.label, n) for arm, n in todo}
        records = [_again(comparison, _run(Arm("reference", "local"), n, base, again), again, scratch)
                   for n in sorted({n for label, n in planned if label == parity.REORDERED})
                   if (parity.REFERENCE, n) not in planned]  # a recorded reference to reproduce
        records = [r for r in records if r] + [_run(arm, n, base, scratch) for arm, n in todo]
        for run in (Path(r["results"]).parent for r in records):
            shutil.rmtree(folder / run, ignore_errors=True)  # a run's folder of an earlier try, which no record names
            os.rename(scratch / run, folder / run)
    comparison["runs"] += records
    labels = [arm.label for arm in compared(comparison)]
    here = results.environment()
    for n in s["workers"]:
        if str(n) in comparison["parity"]:
            verdict = orchestrator.parity_at(comparison["runs"], n, s["parity_steps"], s["tolerance"], labels)
            if verdict["floor"]:
                verdict["floor"]["measured"] = _where(comparison, records, n, here)
            comparison["parity"][str(n)] = verdict
    space.write_json(folder / runs.COMPARISON, comparison)
    report.render(folder)
    verdicts = "; ".join(f"{n} worker(s) {v['verdict']}" for n, v in comparison["parity"].items())
    return f"{folder}: added {', '.join(r['arm'] for r in records)}; parity {verdicts}"


def check(folder: Path, comparison: dict[str, Any]) -> None:
    """Refuse, before anything runs, a comparison.json whose settings are not those its plan.json asked for, or its
    recorded runs trained with (an edited copy): its references would run otherwise than the runs they are set against,
    and the difference would be blamed on the machine."""
    s = comparison["settings"]
    said = {**{k: v for k, v in s["config"].items() if k not in resume.FREE}, **{k: s[k] for k in ASKED}}
    found = []
    if (folder / resume.PLAN).exists():
        plan = runs.read_json(folder / resume.PLAN, "restore it").get("request", {})
        found += [f"--{k.replace('_', '-')} {said.get(k)}, where plan.json says {v}" for k, v in
                  {**plan.get("config", {}), **{k: plan[k] for k in ASKED if k in plan}}.items() if said.get(k) != v]
    base = TrainConfig.from_dict(s["config"])
    for r in (r for r in comparison["runs"] if r["status"] == "ok"):
        wanted = orchestrator.arm_config(Arm(r["backend"], r["launcher"], ceiling=r["arm"].startswith(CEILING)),
                                         r["workers"], base).to_dict()
        try:
            trained = results.read(folder / r["results"])["config"]
        except FileNotFoundError:  # a copy without the runs' folders: what each record names
            trained = {**wanted, "model": (r.get("model") or {}).get("name", base.model)}
        except (OSError, ValueError, KeyError):
            found.append(f"{r['results']} cannot be read")
            continue
        found += [f"--{k.replace('_', '-')} {wanted[k]}, where {r['results']} says {trained.get(k)}" for k in wanted
                  if k not in resume.FREE and trained.get(k) != wanted[k]]
    if found:
        raise ConfigError(f"{folder / runs.COMPARISON} does not match the comparison it records ({'; '.join(found[:3])}"
                          f"{'; …' if len(found) > 3 else ''}); restore the comparison.json that comparison wrote, "
                          "then add its references")


def _where(comparison: dict[str, Any], records: list[dict[str, Any]], n: int, here: dict[str, Any]) -> str:
    """Where the added references ran, and what that changes, in words for the report."""
    again = next((r for r in records if r["arm"] == parity.AGAIN and r["workers"] == n), None)
    said = f"added later, on {here['cpu']} with torch {here['torch']}"
    if any(r["arm"] == parity.REFERENCE and r["workers"] == n for r in records):
        return said + ", beside the reference they are set against, which the comparison lacked"
    if again is None:
        return said + ", where reference reproduced its recorded losses bit for bit"
    first = again["differs_from_recorded"]
    then = comparison["environment"]
    moved = [f"{key} {then[key]}" for key in MACHINE if key in then and then[key] != here.get(key)]
    cause = (f"the comparison ran with {', '.join(moved)}" if moved else "the same CPU, Python, torch and torchvision "
             "as the comparison's, so this project's code computes it otherwise than when the comparison ran")
    return (f"{said}, where reference parts from its recorded losses at step {first['step']} (by "
            f"{text.number(first['by'])}; {cause}): the floor is the pair run there, and the references added beside "
            "it compute as they do there")


def _run(arm: Arm, n: int, base: TrainConfig, folder: Path) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    record = orchestrator.run_one(arm, 0, n, base, folder, None)
    if record["status"] != "ok":
        raise RunFailed(f"{arm.label} with {n} worker(s) failed: {record['error']}")
    return record


def _again(comparison: dict[str, Any], record: dict[str, Any], source: Path, folder: Path) -> dict[str, Any] | None:
    """`reference` run again: nothing to keep where it reproduces the recorded losses, else its record as
    `reference-again`, its folder moved beside the comparison's runs, and what differs said in its record."""
    n = record["workers"]
    recorded = orchestrator.first_losses(comparison["runs"], n).get("reference") or []
    if recorded == record["step_losses"]:
        return None
    name = f"{parity.AGAIN}-{n}w"
    os.rename((source / record["results"]).parent, folder / name)
    return {**record, "arm": parity.AGAIN, "results": f"{name}/results.json",
            "artifacts": [f"{name}/{Path(a).name}" for a in record["artifacts"]],
            "differs_from_recorded": _first_difference(recorded, record["step_losses"])}


def _first_difference(a: list[float], b: list[float]) -> dict[str, Any]:
    step = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return {"step": step + 1, "by": abs(a[step] - b[step]) if step < min(len(a), len(b)) else None}


def main() -> int:
    args = parser().parse_args()
    log.info("%s", add(args.folder))
    return 0


if __name__ == "__main__":
    cli.run(main)
