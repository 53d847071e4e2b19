"""compare --resume DIR (ray_jobs/resume.py): a comparison killed midway goes on in its folder, keeping the runs that
finished whole, checked; a damaged or cut-short run runs again; other settings are refused (tests/test_bad_input.py)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from contract import options, results
from contract.comparison import CompareConfig
from contract.config import TrainConfig
from launchers.arms import Arm
from ray_jobs import orchestrator, resume
from tests.helpers import REPO, data_flags, run_module


PLANNED = orchestrator.Plan(TrainConfig(), CompareConfig(launchers="torchrun,horovodrun", workers="1", repeats=2,
                                                       no_ceiling=True), Path("unset"), [], [])


def plan_in(run_dir: Path) -> orchestrator.Plan:
    planned = replace(PLANNED, run_dir=run_dir)
    planned.runs, _ = orchestrator.runs([1], planned.arms, 2)
    return planned


def whole_run(planned: orchestrator.Plan, arm: Arm, round_: int) -> Path:
    """A run's folder as a finished run leaves it: results.json and, after it, record.json, made from it."""
    folder = planned.run_dir / orchestrator.run_name(arm, round_, 1)
    folder.mkdir(parents=True)
    epoch = {**{k: 0.5 for k in results.EPOCH_KEYS}, "epoch": 1, "samples_per_s_median": 100.0, "steps": 2}
    doc = {"schema_version": 1, "backend": arm.backend, "launcher": arm.launcher, "workers": 1,
           "dataset": "synthetic", "environment": {},
           "config": {**replace(options.for_backend(planned.base, arm.backend), workers=1).to_dict(),
                      "output_dir": str(folder)},
           "step_losses": [2.3, 2.2], "epochs": [epoch], "final": {"test_accuracy": 0.5, "test_loss": 1.0,
                                                                   "wall_time_s": 1.0},
           "timestamps": {}, "phases": {}, "end_to_end_s": 3.0, "cpu_s_per_1k_samples": 2.0, "parameters_sha256": "ab"}
    (folder / results.FILENAME).write_text(json.dumps(doc))
    record = orchestrator.record_of(arm, round_, 1, planned.run_dir, doc)
    (folder / resume.RECORD).write_text(json.dumps(record))
    return folder


def edit(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_only_runs_that_are_what_they_claim_are_kept_rebuilt_from_their_results_the_rest_run_again(tmp_path):
    planned = plan_in(tmp_path)
    native, horovod = Arm("native", "torchrun"), Arm("horovod", "horovodrun")
    kept = whole_run(planned, native, 0)
    shutil.copytree(kept, tmp_path / "native-torchrun-1w-r1")  # round 1 is round 0 again, under another name
    edit(whole_run(planned, horovod, 0) / resume.RECORD, end_to_end_s=99999, cpu_s_per_1k_samples=123)
    edit(whole_run(planned, horovod, 1) / results.FILENAME, end_to_end_s=99999)  # its record says 3.0
    (whole_run(planned, Arm("reference", "local"), 0) / resume.RECORD).unlink()  # killed between the two
    (tmp_path / "global-batch-1w").mkdir()  # killed while it trained
    found = resume.finished(tmp_path, orchestrator.rebuilder(planned))
    assert list(found) == ["native-torchrun-1w-r0"] and found["native-torchrun-1w-r0"]["end_to_end_s"] == 3.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["native-torchrun-1w-r0"]


def test_a_run_trained_otherwise_than_the_plan_asks_runs_again(tmp_path):
    # plan.json edited to another model: the runs of the first one are not set against the new one's
    planned = plan_in(tmp_path)
    native, horovod = Arm("native", "torchrun"), Arm("horovod", "horovodrun")
    doc_path = whole_run(planned, native, 0) / results.FILENAME
    doc = json.loads(doc_path.read_text())
    edit(doc_path, config={**doc["config"], "model": "resnet18"})
    whole_run(planned, horovod, 0)
    found = resume.finished(tmp_path, orchestrator.rebuilder(planned))
    assert list(found) == ["horovod-horovodrun-1w-r0"]


@pytest.mark.cluster
def test_a_comparison_sigkilled_midway_resumes_keeping_its_finished_runs(base_cfg, tmp_path):
    args = ["--launchers", "torchrun,horovodrun", "--workers", "1", "--repeats", "2", "--no-ceiling", "--epochs", "1",
            "--max-steps-per-epoch", "12", "--parity-steps", "12", *data_flags(base_cfg), "--output-dir", str(tmp_path)]
    killed = subprocess.Popen([sys.executable, "-m", "ray_jobs.compare", *args], cwd=REPO, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 240
    while not list(tmp_path.glob("*/*-r0/" + resume.RECORD)):  # the first distributed run finished whole: kill
        assert killed.poll() is None and time.monotonic() < deadline, "no run finished"
        time.sleep(0.2)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    run_dir = next(tmp_path.iterdir())
    first = next(run_dir.glob("*-r0/" + resume.RECORD)).parent
    kept = {p.name: p.stat().st_mtime_ns for p in first.iterdir()}
    done = run_module("ray_jobs.compare", *args, "--resume", str(run_dir), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{first.name.split('-1w')[0].replace('-', '/')}, 1 worker(s), round 1: finished before the comparison " \
           "stopped; kept" in done.stdout + done.stderr
    assert {p.name: p.stat().st_mtime_ns for p in first.iterdir()} == kept  # not run again
    comparison = json.loads((run_dir / "comparison.json").read_text())
    assert [r["status"] for r in comparison["runs"]] == ["ok"] * 5 and comparison["parity"]["1"]["verdict"] == "PASS"
    assert [r.get("kept_on_resume", False) for r in comparison["runs"]].count(True) >= 1
    assert "(resumed with --resume: " in (run_dir / "report.md").read_text()
