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
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from analysis import parity, report, runs, text
from contract import results
from contract.config import ConfigError, TrainConfig
from launchers import arms
from launchers.arms import Arm
from ray_jobs import orchestrator
from runtime import cli, preflight, space

log = logging.getLogger(__name__)


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
    todo = missing(comparison)
    if not todo:
        return f"{folder}: every reference its parity needs is there; nothing ran"
    preflight.writable_dir(folder, "the comparison's folder")
    s = comparison["settings"]
    with tempfile.TemporaryDirectory() as scratch:  # synthetic data is made again from its seed, not kept
        base = replace(TrainConfig.from_dict(s["config"]), data_dir=scratch)
        again = Path(scratch) / "again"
        records = [_again(comparison, _run(Arm("reference", "local"), n, base, again), again, folder)
                   for n in sorted({n for arm, n in todo if arm.label == parity.REORDERED})]
        records = [r for r in records if r] + [_run(arm, n, base, folder) for arm, n in todo]
    comparison["runs"] += records
    labels = [arm.label for arm in compared(comparison)]
    here = results.environment()
    for n in s["workers"]:
        if str(n) in comparison["parity"]:
            verdict = parity.verdict(orchestrator.first_losses(comparison["runs"], n), s["parity_steps"],
                                     s["tolerance"], labels)
            if verdict["floor"]:
                verdict["floor"]["measured"] = _where(comparison, records, n, here)
            comparison["parity"][str(n)] = verdict
    space.write_json(folder / runs.COMPARISON, comparison)
    report.render(folder)
    verdicts = "; ".join(f"{n} worker(s) {v['verdict']}" for n, v in comparison["parity"].items())
    return f"{folder}: added {', '.join(r['arm'] for r in records)}; parity {verdicts}"


def _where(comparison: dict[str, Any], records: list[dict[str, Any]], n: int, here: dict[str, Any]) -> str:
    """Where the added references ran, and what that changes, in words for the report."""
    again = next((r for r in records if r["arm"] == parity.AGAIN and r["workers"] == n), None)
    said = f"added later, on {here['cpu']} with torch {here['torch']}"
    if again is None:
        return said + ", where reference reproduced its recorded losses bit for bit"
    first = again["differs_from_recorded"]
    return (f"{said}, where reference parts from its recorded losses at step {first['step']} (by "
            f"{text.number(first['by'])}; the comparison ran on {comparison['environment'].get('cpu')}): the floor is "
            "the pair run there, and the references added beside it compute as they do there")


def _run(arm: Arm, n: int, base: TrainConfig, folder: Path) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    record = orchestrator.run_one(arm, 0, n, base, folder, None)
    if record["status"] != "ok":
        raise ConfigError(f"{arm.label} with {n} worker(s) failed: {record['error']}")
    return record


def _again(comparison: dict[str, Any], record: dict[str, Any], source: Path, folder: Path) -> dict[str, Any] | None:
    """`reference` run again: nothing to keep where it reproduces the recorded losses, else its record as
    `reference-again`, its folder moved beside the comparison's runs, and what differs said in its record."""
    n = record["workers"]
    recorded = orchestrator.first_losses(comparison["runs"], n).get("reference") or []
    if recorded == record["step_losses"]:
        return None
    name = f"{parity.AGAIN}-{n}w"
    shutil.copytree((source / record["results"]).parent, folder / name)
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
